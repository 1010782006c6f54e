"""The client's minimum-security check of a server's encryption parameters (issue 15, item 5).

The client specs come from the server, and the client generates its secret keys and encrypts its
query under them: a hostile server could hand out a tiny LWE dimension or almost no noise, and the
"encrypted" query would be readable. Before any key is made, :func:`check_security` compares every
noise variance in the specs with the least variance concrete itself allows at 128-bit security for
the dimension of the key it is under, and every LWE dimension with concrete's minimum:

* the 128-bit security curve of concrete's optimizer (concrete-python 2.11, ciphertext modulus
  2^64, binary keys): log2(standard deviation) >= max(-0.025696778711484592 n + 2.675740240076439,
  -62) for a key of dimension n (for a GLWE key, n = GLWE dimension x polynomial size), and n >= 450.
  concrete's own default compilation sits exactly on this curve (``tests/test_parameter_check``
  checks that against the model a server really compiles), so a genuine 128-bit server passes and
  anything weaker does not;
* the noises checked: each bootstrap key's and each key-switching key's (under its output key), and
  each circuit input's fresh encryption noise (under its input key).
"""

from __future__ import annotations

import math

from concrete import fhe

SLOPE = -0.025696778711484592
BIAS = 2.675740240076439
MIN_DIMENSION = 450
MIN_LOG2_STD = -62.0  # 2 bits above the 64-bit modulus' resolution
TOLERANCE_BITS = 0.01  # slack for rounding: concrete's own keys sit within 0.001 bit of the curve


class WeakParameters(ValueError):
    """The server's client specs are weaker than concrete's 128-bit defaults (or malformed)."""


def minimal_log2_variance(dimension: int) -> float:
    """log2 of the least noise variance concrete allows at 128 bits for a key of ``dimension``."""
    return 2.0 * max(SLOPE * dimension + BIAS, MIN_LOG2_STD)


def check_security(specs: bytes) -> None:
    """Refuse (``WeakParameters``) client specs weaker than 128-bit security; see the module."""
    try:
        program = fhe.ClientSpecs.deserialize(bytes(specs)).program_info
        keyset = program.get_keyset_info()
        dimensions = [key.dimension() for key in keyset.secret_keys()]
        noises = [
            (f"bootstrap key {i}", key.output_secret_key_id(), key.variance())
            for i, key in enumerate(keyset.bootstrap_keys())
        ]
        noises += [
            (f"key-switching key {i}", key.output_secret_key_id(), key.variance())
            for i, key in enumerate(keyset.keyswitch_keys())
        ]
        for name in program.function_list():
            for i in range(len(program.get_circuit(name).get_inputs())):
                noises.append(
                    (
                        f"input {i} of {name}",
                        program.input_keyid_at(i, name),
                        program.input_variance_at(i, name),
                    )
                )
        glwe = [
            (key.output_secret_key_id(), key.glwe_dimension() * key.polynomial_size())
            for key in keyset.bootstrap_keys()
        ]
    except Exception as exc:  # concrete raises its own RuntimeErrors for malformed specs
        raise WeakParameters(f"the server's client specs cannot be read: {exc}") from exc
    if not dimensions:
        raise WeakParameters("the server's client specs name no secret key")
    for i, dimension in enumerate(dimensions):
        if dimension < MIN_DIMENSION:
            raise WeakParameters(
                f"the server's secret key {i} has LWE dimension {dimension}, below the {MIN_DIMENSION} "
                "that 128-bit security needs; refusing to make keys"
            )
    for key_id, dimension in glwe:
        if not 0 <= key_id < len(dimensions) or dimensions[key_id] != dimension:
            raise WeakParameters(
                "the server's bootstrap keys do not match its secret keys; refusing to make keys"
            )
    for what, key_id, variance in noises:
        if not 0 <= key_id < len(dimensions):
            raise WeakParameters(f"the server's {what} names an unknown secret key; refusing to make keys")
        floor = minimal_log2_variance(dimensions[key_id])
        if not (math.isfinite(variance) and variance > 0) or math.log2(variance) < floor - TOLERANCE_BITS:
            raise WeakParameters(
                f"the server's {what} has noise variance {variance:.3g} under a key of dimension "
                f"{dimensions[key_id]}, below the 2^{floor:.1f} that 128-bit security needs; "
                "refusing to make keys"
            )
