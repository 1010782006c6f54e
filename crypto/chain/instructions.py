"""Fixed-length instructions I_j for binding analysis sequences.

Domingo-Ferrer, "Tit-for-Tat Disclosure of a Binding Sequence of User Analyses" (PSD 2022),
Section 3.1. Each analysis i_j is a declarative JSON spec, serialized canonically (sorted keys, no
whitespace, UTF-8). It becomes an instruction I_j exactly as long as the output of H (SHA-512,
64 bytes):

* short spec (at most 37 bytes), *inline*:
  ``0x01 | flags | len | spec | zero padding | salt (16) | MAGIC (8)``
* long spec, *by reference* (h_j || p_j with h_j = H'(i_j), H' = SHA-256, p_j a pointer of at most
  5 ASCII bytes naming where the spec is revealed, ``#1`` .. ``#9999``):
  ``0x02 | flags | h_j (32) | len(p_j) | p_j | zero padding | salt (16) | MAGIC (8)``

``flags`` bit 0 marks the last instruction of the sequence. The salt is 16 fresh random bytes per
instruction: without it the traces would be a deterministic function of the analyses, and a
controller who guessed the sequence could confirm the guess against T_0, so Proposition 1 would
hold only for unguessable analyses; 128 bits keep that guess infeasible however few candidate
sequences there are (format version 1 had 8 bytes and 13-byte pointers; its instructions are
refused with a message that says to prepare the sequence again). The redundancy the controller
checks (Proposition 2) is: a known tag, flags with no unknown bit, lengths in range, all-zero
padding and the 8-byte ``MAGIC`` (which carries the format version) at the end. A gibberish I_j*
(what eq. (2) yields for any substituted, inserted, reordered or replayed trace, since H is a strong
hash) passes the tag, flags and magic checks alone with probability below 2^-70; a by-reference
spec must moreover hash to h_j, and an inline one must parse as a spec.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from petlab.errors import BadInput

SIZE = 64  # output length of H = SHA-512
FORMAT_VERSION = 2
MAGIC = b"PETLAB" + bytes([FORMAT_VERSION, 0])
INLINE, REFERENCE = 0x01, 0x02
LAST = 0x01
SALT = 16
MAX_INLINE = SIZE - 3 - SALT - len(MAGIC)  # 37
MAX_POINTER = SIZE - 2 - 32 - 1 - SALT - len(MAGIC)  # 5
MAX_ANALYSES = 9999  # pointers "#1" .. "#9999" fit in MAX_POINTER


def pointer_of(position: int) -> str:
    """The pointer p_j of analysis j (1-based) in a sequence."""
    if not 1 <= position <= MAX_ANALYSES:
        raise ValueError(f"a sequence holds 1 to {MAX_ANALYSES} analyses")
    return f"#{position}"


class InvalidInstruction(BadInput, ValueError):
    """The bytes are not a well-formed instruction (gibberish, or a changed sequence)."""


@dataclass(frozen=True)
class Instruction:
    last: bool
    spec: bytes | None = None  # canonical JSON, for inline instructions
    digest: bytes | None = None  # H'(spec), for instructions by reference
    pointer: str | None = None


def canonical_json(spec: dict) -> bytes:
    """The one serialization that is hashed and encoded: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def spec_digest(spec_bytes: bytes) -> bytes:
    return hashlib.sha256(spec_bytes).digest()


def encode(spec_bytes: bytes, pointer: str, last: bool, salt: bytes | None = None) -> bytes:
    """I_j for one analysis: inline when it fits, else by reference to ``pointer``."""
    salt = os.urandom(SALT) if salt is None else salt
    if len(salt) != SALT:
        raise ValueError(f"the salt is {SALT} bytes")
    flags = LAST if last else 0
    if len(spec_bytes) <= MAX_INLINE:
        body = bytes([INLINE, flags, len(spec_bytes)]) + spec_bytes
    else:
        raw_pointer = pointer.encode("ascii")
        if not 1 <= len(raw_pointer) <= MAX_POINTER:
            raise ValueError(f"a pointer is 1 to {MAX_POINTER} ASCII characters, got {pointer!r}")
        body = bytes([REFERENCE, flags]) + spec_digest(spec_bytes) + bytes([len(raw_pointer)]) + raw_pointer
    return body + bytes(SIZE - len(body) - SALT - len(MAGIC)) + salt + MAGIC


def decode(instruction: bytes) -> Instruction:
    """Check the redundancy and split the fields; ``InvalidInstruction`` on gibberish."""
    if len(instruction) != SIZE:
        raise InvalidInstruction(f"an instruction is {SIZE} bytes, got {len(instruction)}")
    if instruction[-len(MAGIC) :] == b"PETLAB\x01\x00":
        raise InvalidInstruction(
            f"the instruction is in format version 1; this controller reads version {FORMAT_VERSION}: "
            "prepare the sequence again with this petlab-analyst"
        )
    if instruction[-len(MAGIC) :] != MAGIC:
        raise InvalidInstruction("the instruction's redundancy pattern is wrong")
    tag, flags = instruction[0], instruction[1]
    if flags & ~LAST:
        raise InvalidInstruction("the instruction has unknown flags set")
    payload = instruction[2 : -SALT - len(MAGIC)]
    if tag == INLINE:
        length = payload[0]
        if length > MAX_INLINE or any(payload[1 + length :]):
            raise InvalidInstruction("the inline instruction's length or padding is wrong")
        return Instruction(last=bool(flags & LAST), spec=bytes(payload[1 : 1 + length]))
    if tag == REFERENCE:
        digest, length = bytes(payload[:32]), payload[32]
        pointer = payload[33 : 33 + length]
        if not 1 <= length <= MAX_POINTER or any(payload[33 + length :]):
            raise InvalidInstruction("the reference's pointer length or padding is wrong")
        try:
            text = pointer.decode("ascii")
        except UnicodeDecodeError as exc:
            raise InvalidInstruction("the reference's pointer is not ASCII") from exc
        return Instruction(last=bool(flags & LAST), digest=digest, pointer=text)
    raise InvalidInstruction("the instruction's tag is unknown")


def resolve(instruction: Instruction, revealed: dict[str, bytes]) -> bytes:
    """The spec bytes an instruction stands for; a by-reference spec must hash to h_j."""
    if instruction.spec is not None:
        return instruction.spec
    if instruction.pointer is None:
        raise InvalidInstruction("the instruction has neither an inline spec nor a pointer")
    spec = revealed.get(instruction.pointer)
    if spec is None:
        raise InvalidInstruction(f"the spec at pointer {instruction.pointer!r} was not revealed")
    if spec_digest(spec) != instruction.digest:
        raise InvalidInstruction(f"the spec at pointer {instruction.pointer!r} does not match its hash")
    return spec
