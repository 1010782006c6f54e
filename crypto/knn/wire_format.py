"""Checking concrete's evaluation keys and ciphertexts against a circuit's client specs, without
concrete.

concrete-python 2.11 runs whatever key set or ciphertext it is handed, and some it cannot survive:
``server.run`` with the evaluation keys of another circuit (another n, another data set) dies by
SIGSEGV or a Rust abort, and so does a key set or a query whose bytes are concrete's own but whose
payload is cut into blobs differently. concrete sizes its buffer from the sum of the blobs and then
copies blob i at word ``i * (MAX_TEXT_SIZE / 8)``, so any other cut writes outside the buffer
(``protoPayloadToVector``). Python cannot read a key set through concrete's API (``ServerKeyset``
offers ``serialize`` and ``deserialize`` only), but the bytes are a Cap'n Proto message of
concrete's protocol, and so are the client specs (as JSON): every key carries the same description
(kind, id, input and output secret-key ids, every parameter, compression) as the specs' entry for
it. :class:`WireFormat` reads the message with pycapnp (a reader built for hostile input, with
traversal and nesting limits; our schema of the fields read is ``concrete_wire.capnp``) and accepts
it only when

* the bytes are exactly one message (its segment table accounts for every byte: concrete reads a
  key set with trailing bytes, so padding would let another circuit's keys match the expected size);
* it holds, for each kind, exactly the keys the specs list, in order, each description equal to
  the specs' entry;
* each payload has the size those parameters give (:func:`payload_bytes`) and concrete's own
  blob cut (:func:`blob_cut`);
* for a ciphertext, its raw and type description equal the circuit's gate (shape, precision,
  encryption key id, LWE dimension, variance, compression, encoding) and its payload is shape x 8
  bytes in concrete's cut.

**Only re-encoded bytes reach concrete.** A check returns the message *re-encoded* from what it
checked (the specs' descriptions and the payload blobs, written by pycapnp with this schema, whose
layout is concrete's), and callers give concrete only those bytes. concrete deep-copies a message
as it reads it (``readMessageCopy``, traversal limit 7e9 words), pointers the schema does not list
included, while a reader of the listed fields never looks at them: a key set whose root carried 8
extra pointers (8 bytes each) aliasing its 20 MB bootstrap key passed every check above, and each
cost concrete 20 MB (measured: +1 GB resident for 50 pointers; the 64 KiB upload margin holds 8,000,
enough to kill the server). The re-encoded key set of a genuine upload is
byte-identical to it (Iris, measured); a ciphertext is re-encoded in one segment.

Keys that pass have the circuit's parameters exactly: concrete runs them (a key set of another
circuit with exactly the same parameters cannot be told apart, and gives its sender garbage, no
crash). Payload *values* are never interpreted: random bytes of the right size run and decrypt to
garbage (``tests/crypto/knn/test_wire_format.py`` runs such keys). Measured: 2 ms (iris, n = 10, 19 MB keys)
to 0.3 s (125 MB) per key set.

Packing key-switching keys (concrete's circuit bootstrapping): no petlab circuit uses them and their
payload size is not derived here, so :meth:`WireFormat.check_keys` refuses every key set of a
circuit that has them (a server does not host such a model); ciphertexts are still checked.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import capnp

from petlab.crypto.knn.split.program import ANSWER_STAGE, ENTRY_STAGE
from petlab.errors import BadInput

SCHEMA = capnp.load(str(resources.files("petlab.crypto.knn").joinpath("concrete_wire.capnp")))
WORD_BYTES = 8
SEED_BYTES = 16  # a compressed key's CSPRNG seed (128 bits), stored after its words
# capnp::MAX_TEXT_SIZE = 2^29 - 2 bytes; concrete fills each blob but the last with as many whole
# 64-bit words as that allows
BLOB_BYTES = ((1 << 29) - 2) // WORD_BYTES * WORD_BYTES
KINDS = ("lweBootstrapKeys", "lweKeyswitchKeys", "packingKeyswitchKeys")
KIND_NAMES = {
    "lweBootstrapKeys": "bootstrap key",
    "lweKeyswitchKeys": "key-switching key",
    "packingKeyswitchKeys": "packing key-switching key",
}
NESTING_LIMIT = 16
MAX_SEGMENTS = 512  # Cap'n Proto's own readers refuse more


class ForeignBytes(BadInput, ValueError):
    """The bytes are not this circuit's key set or ciphertext (the message says what differs)."""


def blob_cut(size: int) -> list[int]:
    """How concrete cuts a payload of ``size`` bytes into Data blobs."""
    full, rest = divmod(size, BLOB_BYTES)
    return [BLOB_BYTES] * full + ([rest] if rest else [])


def payload_bytes(kind: str, info: dict[str, Any]) -> int:
    """Bytes of one key's payload, from its description (measured against concrete 2.11's keys):
    a bootstrap key is ``n_in`` GGSW ciphertexts of ``level x (k+1)`` GLWE ciphertexts of
    ``(k+1) x N`` words; a key-switching key ``n_in x level`` LWE ciphertexts of ``n_out + 1``
    words. Seeded compression keeps only the last (body) part of each and adds the seed."""
    params, seeded = info["params"], info["compression"] == "seed"
    if info["compression"] not in ("none", "seed"):
        raise ValueError(f"a {KIND_NAMES[kind]} compressed as {info['compression']!r} is not checked here")
    if kind == "lweBootstrapKeys":
        glwe = params["glweDimension"] + 1
        words = params["inputLweDimension"] * params["levelCount"] * glwe * params["polynomialSize"]
        words *= 1 if seeded else glwe
    elif kind == "lweKeyswitchKeys":
        words = params["inputLweDimension"] * params["levelCount"]
        words *= 1 if seeded else params["outputLweDimension"] + 1
    else:
        raise ValueError(f"{KIND_NAMES[kind]}s are not checked here")
    return words * WORD_BYTES + (SEED_BYTES if seeded else 0)


@dataclass(frozen=True)
class WireFormat:
    """What a circuit's key sets and ciphertexts must look like, from its client specs."""

    keys: dict[str, tuple[dict[str, Any], ...]]  # kind -> the specs' descriptions, in order
    payloads: dict[str, tuple[int, ...]]  # kind -> each key's payload bytes
    inputs: tuple[dict[str, Any], ...]  # the circuit's input gates (rawInfo, typeInfo)
    outputs: tuple[dict[str, Any], ...]

    @classmethod
    def from_specs(cls, specs: bytes) -> WireFormat:
        """From a program's client specs: one circuit, or a split model's stages
        (``crypto.knn.split.program``: the query is encrypted for :data:`ENTRY_STAGE`, the answer
        comes from :data:`ANSWER_STAGE`; one key set serves every stage). ``ValueError`` for any
        other program, or a key compression not known here."""
        document = json.loads(specs)
        keyset, circuits = document["keyset"], document["circuits"]
        if len(circuits) == 1:
            entry = answer = circuits[0]
        else:
            by_name = {circuit.get("name"): circuit for circuit in circuits}
            if ENTRY_STAGE not in by_name or ANSWER_STAGE not in by_name:
                raise ValueError(
                    f"expected one circuit or a split model's stages, got {sorted(map(str, by_name))}"
                )
            entry, answer = by_name[ENTRY_STAGE], by_name[ANSWER_STAGE]
        keys = {kind: tuple(keyset.get(kind, ())) for kind in KINDS}
        payloads = {
            kind: tuple(payload_bytes(kind, info) for info in keys[kind])
            for kind in KINDS
            if kind != "packingKeyswitchKeys"
        }
        return cls(keys, payloads, tuple(entry["inputs"]), tuple(answer["outputs"]))

    @property
    def keys_checkable(self) -> bool:
        """Whether :meth:`check_keys` can accept any key set (no packing key-switching keys)."""
        return not self.keys["packingKeyswitchKeys"]

    @property
    def key_bytes(self) -> int:
        """The payload bytes of a whole key set: an upload is this plus a little framing."""
        return sum(sum(sizes) for sizes in self.payloads.values())

    def check_keys(self, data: bytes) -> bytes:
        """``ForeignBytes`` unless ``data`` is a key set for exactly this circuit; else the key set
        re-encoded from what was checked, the only bytes to give concrete (module docstring)."""
        if not self.keys_checkable:
            raise ForeignBytes("this circuit's packing key-switching keys cannot be checked; refusing keys")
        _check_framing(data, "key set")
        try:
            with SCHEMA.ServerKeyset.from_bytes(
                bytes(data), traversal_limit_in_words=_words(data), nesting_limit=NESTING_LIMIT
            ) as keyset:
                found = {  # each blob read once: every read counts against the traversal limit
                    kind: [(key.info.to_dict(), _blobs(key.payload)) for key in getattr(keyset, kind)]
                    for kind in KINDS
                }
        except Exception as exc:  # capnp's KjException: not a message of this shape, or too deep
            raise ForeignBytes(f"the bytes are not an evaluation key set: {_first_line(exc)}") from exc
        self._check_descriptions(found)
        checked = {
            kind: [
                {"info": info, "payload": {"data": blobs}}
                for info, (_, blobs) in zip(self.keys[kind], found[kind], strict=True)
            ]
            for kind in KINDS
        }
        return bytes(SCHEMA.ServerKeyset.new_message(**checked).to_bytes())

    def _check_descriptions(self, found: dict[str, list[tuple[dict[str, Any], list[bytes]]]]) -> None:
        """Each kind's keys: as many as the specs list, each with the specs' description and its
        payload in the size and cut its parameters give."""
        for kind in KINDS:
            name, wanted = KIND_NAMES[kind], self.keys[kind]
            if len(found[kind]) != len(wanted):
                raise ForeignBytes(
                    f"the key set holds {len(found[kind])} {name}(s); this model's circuit needs "
                    f"{len(wanted)}"
                )
            for number, ((info, blobs), expected, size) in enumerate(
                zip(found[kind], wanted, self.payloads.get(kind, ()), strict=True)
            ):
                if info != expected:
                    raise ForeignBytes(
                        f"{name} {number} was made for another circuit: {_difference(info, expected)}"
                    )
                sizes = [len(blob) for blob in blobs]
                if sizes != blob_cut(size):
                    raise ForeignBytes(
                        f"{name} {number} has {sum(sizes)} payload bytes in {len(sizes)} blob(s); its "
                        f"parameters give {size} bytes in {len(blob_cut(size))}"
                    )

    def check_input(self, data: bytes, position: int = 0) -> bytes:
        """``ForeignBytes`` unless ``data`` is a ciphertext for input ``position`` of this circuit;
        else the ciphertext re-encoded, the only bytes to give concrete (module docstring)."""
        return _check_value(self.inputs[position], data, "encrypted query")

    def check_output(self, data: bytes, position: int = 0) -> bytes:
        """``ForeignBytes`` unless ``data`` is a ciphertext of output ``position`` of this circuit;
        else the ciphertext re-encoded, the only bytes to give concrete (module docstring)."""
        return _check_value(self.outputs[position], data, "encrypted result")


def _check_value(gate: dict[str, Any], data: bytes, what: str) -> bytes:
    _check_framing(data, what)
    try:
        with SCHEMA.Value.from_bytes(
            bytes(data), traversal_limit_in_words=_words(data), nesting_limit=NESTING_LIMIT
        ) as value:
            raw, typed, payload = value.rawInfo.to_dict(), value.typeInfo.to_dict(), _blobs(value.payload)
    except Exception as exc:
        raise ForeignBytes(f"the {what} is not a ciphertext: {_first_line(exc)}") from exc
    if raw != gate["rawInfo"]:
        raise ForeignBytes(f"the {what} does not fit this model: {_difference(raw, gate['rawInfo'])}")
    if typed != gate["typeInfo"]:
        raise ForeignBytes(f"the {what} does not fit this model: {_difference(typed, gate['typeInfo'])}")
    size = math.prod(raw["shape"]["dimensions"]) * raw["integerPrecision"] // 8
    blobs = [len(blob) for blob in payload]
    if blobs != blob_cut(size):
        raise ForeignBytes(
            f"the {what} has {sum(blobs)} payload bytes in {len(blobs)} blob(s); its shape gives {size} "
            f"bytes in {len(blob_cut(size))}"
        )
    checked = {"payload": {"data": payload}, "rawInfo": gate["rawInfo"], "typeInfo": gate["typeInfo"]}
    return bytes(SCHEMA.Value.new_message(**checked).to_bytes())


def _check_framing(data: bytes, what: str) -> None:
    """``ForeignBytes`` unless ``data`` is exactly one unpacked Cap'n Proto message: a segment
    count, the segments' sizes (padded to a word), and the segments, with no byte after them."""
    size = len(data)
    count = int.from_bytes(data[:4], "little") + 1 if size >= 4 else 0
    if not 1 <= count <= MAX_SEGMENTS:
        raise ForeignBytes(f"the {what} is not a Cap'n Proto message (its segment table is malformed)")
    header = (4 + 4 * count + WORD_BYTES - 1) // WORD_BYTES * WORD_BYTES
    sizes = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "little") for i in range(count)]
    framed = header + WORD_BYTES * sum(sizes)
    if size < header or framed != size:
        raise ForeignBytes(f"the {what} is {size} bytes but its message framing accounts for {framed}")


def _blobs(payload: Any) -> list[bytes]:
    return [bytes(blob) for blob in payload.data]


def _words(data: bytes) -> int:
    """Traversal limit: every word of the message read at most once (no amplification)."""
    return len(data) // WORD_BYTES + 64


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _difference(found: Any, expected: Any, path: str = "") -> str:
    """The first field where ``found`` and ``expected`` differ, as ``path is found, expected ...``
    (each value cut to 80 characters: the sender chooses what it found)."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for name in sorted(set(found) | set(expected)):
            if found.get(name) != expected.get(name):
                return _difference(found.get(name), expected.get(name), f"{path}.{name}" if path else name)
    return f"{path or 'value'} is {_cut(repr(found))}, expected {_cut(repr(expected))}"


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
