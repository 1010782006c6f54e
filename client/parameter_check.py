"""The client's minimum-security check of a server's encryption parameters.

The client specs come from the server, and the client generates its secret keys and encrypts its
query under them: a hostile server could hand out a tiny LWE dimension or almost no noise, and the
"encrypted" query would be readable; or it could add a key the client then makes and uploads (an
evaluation key is an encryption of a secret key: with almost no noise, it *is* the secret key).
Before any key is made, :func:`check_security` reads the specs twice, as JSON (what the server
sent) and through concrete (what concrete will generate), and refuses them unless:

* **only known kinds**: the key set names secret keys, bootstrap keys, key-switching keys and
  packing key-switching keys and nothing else, the document holds nothing but the key set, the
  circuits and empty TFHE-rs interoperability specs, and concrete reads as many keys of each kind
  as the JSON lists (concrete 2.11 silently ignores fields it does not know: a kind added by a
  later concrete, or by the server, would otherwise pass unchecked);
* **every key is 128-bit**: every secret key has an LWE dimension of at least 450, binary
  coefficients, 64-bit integers and the native modulus; and every noise variance is at least the
  least variance concrete allows at 128 bits for the dimension of the key it encrypts under:
  each bootstrap key's and each packing key-switching key's (under its output GLWE key, dimension
  GLWE dimension x polynomial size), each key-switching key's (under its output LWE key), each
  circuit input's fresh encryption;
* **keys fit together**: each key's input and output secret keys exist and have the dimensions its
  parameters name (so no key is encrypted under a key the checks above did not see);
* **every value is encrypted under a whole key**: each circuit input and output is an LWE
  ciphertext (no clear or index gate) under an existing secret key, with exactly that key's LWE
  dimension, the native modulus and no compression but concrete's seed. concrete encrypts an input
  with the first ``lweDimension`` coefficients of the secret key the gate names, whatever that
  key's size (``getEncryptionTransformer``): specs whose input names dimension 1 under the
  2048-coefficient key made the client send each feature under a single key bit, which the server
  reads by trying both values (``tests/client/test_parameter_check.py``); a larger
  dimension reads past the key's buffer, when encrypting and when decrypting;
* **every value is laid out as its key's ciphertexts**: raw and concrete shape alike,
  ``lweDimension + 1`` unsigned 64-bit words per element (3 when seed-compressed). concrete
  decrypts that many words whatever shape the gate states: specs whose answer gate stated fewer
  made the device read past the answer's buffer and die by SIGABRT, since the device's result check
  compares the answer with the gate and so accepted it;
* **one function per name**: concrete decrypts a split model's answer with the first function of
  its name, and the device's result check must read the same one.

The JSON checks read the specs as concrete itself reads them (``ProgramInfo.serialize()``), so no
difference between two JSON parsers (duplicate fields, escapes, numbers) can show this check one
value and concrete another.

The curve: concrete's optimizer's 128-bit security curve (concrete-python 2.11, ciphertext modulus
2^64, binary keys): log2(standard deviation) >= max(-0.025696778711484592 n + 2.675740240076439,
-62) for a key of dimension n. concrete's own default compilation sits exactly on it
(``tests/test_parameter_check`` checks that against the model a server really compiles), so a
genuine 128-bit server passes and anything weaker does not.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from concrete import fhe

from petlab.errors import BadInput

SLOPE = -0.025696778711484592
BIAS = 2.675740240076439
MIN_DIMENSION = 450
MIN_LOG2_STD = -62.0  # 2 bits above the 64-bit modulus' resolution
TOLERANCE_BITS = 0.01  # slack for rounding: concrete's own keys sit within 0.001 bit of the curve
KEY_KINDS = {
    "lweSecretKeys": "secret key",
    "lweBootstrapKeys": "bootstrap key",
    "lweKeyswitchKeys": "key-switching key",
    "packingKeyswitchKeys": "packing key-switching key",
}
DOCUMENT_FIELDS = {"keyset", "circuits", "tfhers_specs"}
NATIVE_MODULUS: dict[str, dict[str, dict]] = {"modulus": {"native": {}}}


class WeakParameters(BadInput, ValueError):
    """The server's client specs are weaker than concrete's 128-bit defaults (or malformed, or
    name something this check does not know)."""


def minimal_log2_variance(dimension: int) -> float:
    """log2 of the least noise variance concrete allows at 128 bits for a key of ``dimension``."""
    return 2.0 * max(SLOPE * dimension + BIAS, MIN_LOG2_STD)


@dataclass(frozen=True)
class _Noise:
    what: str
    key_id: int  # the secret key it encrypts under
    variance: float


@dataclass(frozen=True)
class _Link:
    what: str
    key_id: int
    dimension: int  # the dimension the key's parameters give that secret key


def check_security(specs: bytes) -> None:
    """Refuse (``WeakParameters``) client specs weaker than 128-bit security, or naming anything
    this check does not know; see the module docstring."""
    try:
        document = json.loads(specs)
        keyset = document["keyset"]
        _known_kinds_only(document, keyset)
        program = fhe.ClientSpecs.deserialize(bytes(specs)).program_info
        info = program.get_keyset_info()
        read = {
            "lweSecretKeys": info.secret_keys(),
            "lweBootstrapKeys": info.bootstrap_keys(),
            "lweKeyswitchKeys": info.keyswitch_keys(),
            "packingKeyswitchKeys": info.packing_keyswitch_keys(),
        }
        for kind, name in KEY_KINDS.items():
            if len(read[kind]) != len(keyset.get(kind, [])):
                raise WeakParameters(
                    f"the server's client specs list {len(keyset.get(kind, []))} {name}(s), concrete "
                    f"reads {len(read[kind])}; refusing to make keys"
                )
        dimensions = [key.dimension() for key in read["lweSecretKeys"]]
        concrete_view = json.loads(program.serialize())  # what concrete will use, field by field
        noises, links = _noises_and_links(read)
        functions = list(program.function_list())
        repeated = sorted({name for name in functions if functions.count(name) > 1})
        if repeated:  # concrete finds the first by name; the device's result check must see the same
            raise WeakParameters(
                f"the server's client specs name two functions {repeated[0]!r}; refusing to make keys"
            )
        for name in functions:
            for i in range(len(program.get_circuit(name).get_inputs())):
                noises.append(
                    _Noise(
                        f"input {i} of {name}",
                        program.input_keyid_at(i, name),
                        program.input_variance_at(i, name),
                    )
                )
    except WeakParameters:
        raise
    except Exception as exc:  # JSON errors, missing fields, concrete's own RuntimeErrors
        raise WeakParameters(f"the server's client specs cannot be read: {exc}") from exc
    _check_dimensions(dimensions)
    for noise in noises:
        if not 0 <= noise.key_id < len(dimensions):
            raise WeakParameters(
                f"the server's {noise.what} names an unknown secret key; refusing to make keys"
            )
        floor = minimal_log2_variance(dimensions[noise.key_id])
        variance = noise.variance
        if not (math.isfinite(variance) and variance > 0) or math.log2(variance) < floor - TOLERANCE_BITS:
            raise WeakParameters(
                f"the server's {noise.what} has noise variance {variance:.3g} under a key of dimension "
                f"{dimensions[noise.key_id]}, below the 2^{floor:.1f} that 128-bit security needs; "
                "refusing to make keys"
            )
    try:
        _check_json_keys(concrete_view["keyset"])
        _check_gates(concrete_view["circuits"], dimensions)
    except (KeyError, TypeError) as exc:
        raise WeakParameters(f"the server's client specs cannot be read: missing {exc}") from exc
    for link in links:
        if not 0 <= link.key_id < len(dimensions) or dimensions[link.key_id] != link.dimension:
            raise WeakParameters(
                f"the server's {link.what} does not match its secret keys; refusing to make keys"
            )


def _known_kinds_only(document: dict[str, Any], keyset: dict[str, Any]) -> None:
    unknown = sorted(set(document) - DOCUMENT_FIELDS) + sorted(set(keyset) - set(KEY_KINDS))
    if unknown:
        raise WeakParameters(
            f"the server's client specs name {', '.join(unknown)}, which this client does not check; "
            "refusing to make keys"
        )
    interop = document.get("tfhers_specs") or {}
    entries = [
        entry
        for per_function in interop.values()
        for values in per_function.values()
        for entry in (values if isinstance(values, list) else [values])
    ]
    if any(entry is not None for entry in entries):  # one None per input and output: no interop
        raise WeakParameters(
            "the server's client specs carry TFHE-rs interoperability parameters, which this client does "
            "not check; refusing to make keys"
        )


def _noises_and_links(read: dict[str, list]) -> tuple[list[_Noise], list[_Link]]:
    """Each key's noise (under its output key) and the dimensions it names for its input and
    output secret keys, for every key kind that concrete generates from secret keys."""
    noises: list[_Noise] = []
    links: list[_Link] = []
    for kind in ("lweBootstrapKeys", "packingKeyswitchKeys"):  # output: a GLWE key
        for i, key in enumerate(read[kind]):
            what = f"{KEY_KINDS[kind]} {i}"
            noises.append(_Noise(what, key.output_secret_key_id(), key.variance()))
            links.append(
                _Link(what, key.output_secret_key_id(), key.glwe_dimension() * key.polynomial_size())
            )
            links.append(_Link(what, key.input_secret_key_id(), key.input_lwe_dimension()))
    for i, key in enumerate(read["lweKeyswitchKeys"]):
        noises.append(_Noise(f"key-switching key {i}", key.output_secret_key_id(), key.variance()))
    return noises, links


def _check_json_keys(keyset: dict[str, Any]) -> None:
    """What concrete's Python API does not show: secret keys' distribution and integers, each key's
    modulus, and the key-switching keys' dimensions (checked against the secret keys)."""
    secrets = keyset.get("lweSecretKeys", [])
    for position, key in enumerate(secrets):
        params = key["params"]
        if key["id"] != position:
            raise WeakParameters("the server's secret keys are not numbered in order; refusing to make keys")
        if params["keyType"] != "binary" or params["integerPrecision"] != 64:
            raise WeakParameters(
                f"the server's secret key {position} is not a binary key of 64-bit integers (the 128-bit "
                "curve is for those); refusing to make keys"
            )
    dimensions = [key["params"]["lweDimension"] for key in secrets]
    for kind in ("lweBootstrapKeys", "lweKeyswitchKeys", "packingKeyswitchKeys"):
        for i, key in enumerate(keyset.get(kind, [])):
            params, what = key["params"], f"{KEY_KINDS[kind]} {i}"
            if params.get("modulus", NATIVE_MODULUS) != NATIVE_MODULUS or params.get("keyType") != "binary":
                raise WeakParameters(
                    f"the server's {what} is not over the native 2^64 modulus with binary keys"
                )
            if kind == "lweKeyswitchKeys" and [
                params["inputLweDimension"],
                params["outputLweDimension"],
            ] != [_dimension(dimensions, key["inputId"]), _dimension(dimensions, key["outputId"])]:
                raise WeakParameters(
                    f"the server's {what} does not match its secret keys; refusing to make keys"
                )


def _check_gates(circuits: list[dict[str, Any]], dimensions: list[int]) -> None:
    """Every input and output of every circuit is an LWE ciphertext under a whole secret key
    (module docstring): concrete encrypts and decrypts with the gate's ``lweDimension`` and the
    key its ``keyId`` names, and checks neither against the other."""
    for circuit in circuits:
        for side in ("inputs", "outputs"):
            for position, gate in enumerate(circuit[side]):
                what = f"{side[:-1]} {position} of {circuit.get('name', '?')}"
                if set(gate["typeInfo"]) != {"lweCiphertext"}:
                    raise WeakParameters(f"the server's {what} is not encrypted; refusing to make keys")
                ciphertext = gate["typeInfo"]["lweCiphertext"]
                encryption = ciphertext["encryption"]
                key_id, dimension = encryption["keyId"], encryption["lweDimension"]
                if _dimension(dimensions, key_id) != dimension or type(dimension) is not int:
                    raise WeakParameters(
                        f"the server's {what} is encrypted with LWE dimension {dimension} under secret "
                        f"key {key_id} of dimension {_dimension(dimensions, key_id)}; refusing to make keys"
                    )
                if encryption.get("modulus", NATIVE_MODULUS) != NATIVE_MODULUS or ciphertext[
                    "compression"
                ] not in ("none", "seed"):
                    raise WeakParameters(
                        f"the server's {what} is not over the native 2^64 modulus with concrete's own "
                        "compression; refusing to make keys"
                    )
                layout = _layout(gate, ciphertext)
                if layout != _key_layout(ciphertext):
                    raise WeakParameters(
                        f"the server's {what} is laid out as {layout}, not as ciphertexts of its LWE "
                        f"dimension {dimension} ({_key_layout(ciphertext)}); refusing to make keys"
                    )


def _layout(gate: dict[str, Any], ciphertext: dict[str, Any]) -> list[int] | str:
    """The words a gate's values hold: its raw and concrete shapes, when they agree on 64-bit
    unsigned words (else a description of the disagreement)."""
    raw = gate["rawInfo"]
    shape = list(ciphertext["concreteShape"]["dimensions"])
    if raw["shape"]["dimensions"] != shape:
        return f"{raw['shape']['dimensions']} raw and {shape} concrete words"
    if (raw["integerPrecision"], raw["isSigned"], ciphertext["integerPrecision"]) != (64, False, 64):
        return "other than unsigned 64-bit words"
    return shape


def _key_layout(ciphertext: dict[str, Any]) -> list[int]:
    """The words an LWE ciphertext of the gate's dimension takes, per element of its abstract shape:
    ``lweDimension + 1`` (mask and body), or 3 when seed-compressed (a 128-bit seed and the body);
    concrete reads that many, whatever shape the gate states (module docstring)."""
    words = 3 if ciphertext["compression"] == "seed" else ciphertext["encryption"]["lweDimension"] + 1
    return [*ciphertext["abstractShape"]["dimensions"], words]


def _dimension(dimensions: list[int], key_id: int) -> int:
    return dimensions[key_id] if 0 <= key_id < len(dimensions) else -1


def _check_dimensions(dimensions: list[int]) -> None:
    if not dimensions:
        raise WeakParameters("the server's client specs name no secret key")
    for i, dimension in enumerate(dimensions):
        if dimension < MIN_DIMENSION:
            raise WeakParameters(
                f"the server's secret key {i} has LWE dimension {dimension}, below the {MIN_DIMENSION} "
                "that 128-bit security needs; refusing to make keys"
            )
