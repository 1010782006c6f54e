"""Hash-chained traces that bind an analyst to a whole sequence of analyses.

Domingo-Ferrer (PSD 2022), Section 3.2. With H = SHA-512 and instructions I_1..I_n from
``crypto.chain.instructions``, the traces are computed backwards, equation (1):

    T_n = H(I_n),    T_{j-1} = H(T_j) XOR I_j   for j = n, ..., 1,

and the controller, holding T_{j-1}, recovers I_j from the revealed T_j by equation (2):

    I_j = H(T_j) XOR T_{j-1}.

T_0 is signed by the analyst with Ed25519 (Section 3.2, "seal"), and optionally co-signed by a
certification authority that has checked the whole sequence (Section 4.2). Signatures cover a
domain-separated message. The authority's also covers the analyst's public key and a
:class:`CertificationScope`: the controller it certifies for, the digest of that controller's data
set (keyed by the controller, so it names the version and nothing else) and the SHA-256 of its
output-checking rules, an expiry, and the person the key belongs to (the
controller keeps refusals and quotas per person, so a fresh key is not a fresh start). So a
co-signature cannot be moved to another analyst's sequence or person, nor replayed at another
controller, against other data or under laxer rules than the ones the authority saw, nor used
after it expires. Keys are PEM (PKCS#8 / SubjectPublicKeyInfo).
"""

from __future__ import annotations

import hashlib
import struct
import time
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from petlab.crypto.chain.ed25519_points import check_public_key
from petlab.crypto.chain.instructions import SIZE, InvalidInstruction, decode, encode, pointer_of, resolve

ANALYST_DOMAIN = b"petlab/tit-for-tat/v2/analyst-T0:"
AUTHORITY_DOMAIN = b"petlab/tit-for-tat/v3/authority-T0:"  # v3: the scope names a person
MAX_CONTROLLER_ID = 64  # bytes of UTF-8
MAX_PERSON_ID = 64  # bytes of UTF-8


def check_person_id(person: str) -> str:
    """A person id as an authority or the allow-list names it: 1 to 64 bytes of UTF-8, no control
    characters, no leading or trailing space, not starting with ``key:`` (the controller's name
    for a key that nobody vouches for)."""
    if not isinstance(person, str) or not 1 <= len(person.encode()) <= MAX_PERSON_ID:
        raise ValueError(f"a person id is 1 to {MAX_PERSON_ID} bytes of UTF-8")
    if person != person.strip() or any(ord(ch) < 32 or ord(ch) == 127 for ch in person):
        raise ValueError("a person id has no control characters and no leading or trailing space")
    if person.startswith("key:"):
        raise ValueError("person ids starting with 'key:' are reserved for keys nobody vouches for")
    return person


@dataclass(frozen=True)
class CertificationScope:
    """Where and until when an authority's co-signature holds (Section 4.2, made explicit).

    ``controller_id`` names the controller (``petlab-server --controller-id``), ``dataset_sha256``
    and ``rules_sha256`` are the digests it publishes (``petlab-analyst describe``), ``expires`` is
    a Unix time in seconds, ``person_id`` the person the analyst's key belongs to."""

    controller_id: str
    dataset_sha256: bytes
    rules_sha256: bytes
    expires: int
    person_id: str

    def __post_init__(self) -> None:
        if not 1 <= len(self.controller_id.encode()) <= MAX_CONTROLLER_ID:
            raise ValueError(f"a controller id is 1 to {MAX_CONTROLLER_ID} bytes of UTF-8")
        if len(self.dataset_sha256) != 32 or len(self.rules_sha256) != 32:
            raise ValueError("the data set and rules digests are SHA-256 (32 bytes)")
        if not 0 < self.expires < 2**63:
            raise ValueError("the expiry is a positive Unix time in seconds")
        check_person_id(self.person_id)

    def encode(self) -> bytes:
        """Unambiguous bytes: length-prefixed id, both digests, the expiry as 8 bytes big-endian,
        the length-prefixed person id."""
        raw_id, raw_person = self.controller_id.encode(), self.person_id.encode()
        return (
            bytes([len(raw_id)])
            + raw_id
            + self.dataset_sha256
            + self.rules_sha256
            + struct.pack(">Q", self.expires)
            + bytes([len(raw_person)])
            + raw_person
        )

    def to_json(self) -> dict:
        return {
            "controller_id": self.controller_id,
            "dataset_sha256": self.dataset_sha256.hex(),
            "rules_sha256": self.rules_sha256.hex(),
            "expires": self.expires,
            "person_id": self.person_id,
        }

    @classmethod
    def from_json(cls, document: dict) -> CertificationScope:
        return cls(
            str(document["controller_id"]),
            bytes.fromhex(document["dataset_sha256"]),
            bytes.fromhex(document["rules_sha256"]),
            int(document["expires"]),
            str(document["person_id"]),
        )


def H(data: bytes) -> bytes:
    return hashlib.sha512(data).digest()


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def build_traces(instructions: list[bytes]) -> list[bytes]:
    """T_0..T_n from I_1..I_n (equation (1))."""
    if not instructions:
        raise ValueError("a sequence needs at least one analysis")
    if any(len(i) != SIZE for i in instructions):
        raise ValueError(f"every instruction must be {SIZE} bytes")
    traces = [H(instructions[-1])]
    for instruction in reversed(instructions):
        traces.append(xor(H(traces[-1]), instruction))
    return traces[::-1]


def retrieve(previous_trace: bytes, trace: bytes) -> bytes:
    """I_j from T_{j-1} and T_j (equation (2))."""
    if len(previous_trace) != SIZE or len(trace) != SIZE:
        raise ValueError(f"a trace is {SIZE} bytes")
    return xor(H(trace), previous_trace)


@dataclass(frozen=True)
class SealedSequence:
    """What the analyst prepares: traces, specs by pointer, and the signatures on T_0."""

    traces: list[bytes]  # T_0..T_n
    specs: dict[str, bytes]  # pointer -> canonical JSON, revealed one at a time with its trace
    pointers: list[str]  # pointer of analysis j (1-based position j - 1)
    analyst_signature: bytes


def seal(spec_bytes: list[bytes], analyst_key: Ed25519PrivateKey) -> SealedSequence:
    pointers = [pointer_of(j) for j in range(1, len(spec_bytes) + 1)]
    instructions = [
        encode(spec, pointer, last=j == len(spec_bytes) - 1)
        for j, (spec, pointer) in enumerate(zip(spec_bytes, pointers, strict=True))
    ]
    traces = build_traces(instructions)
    return SealedSequence(
        traces,
        dict(zip(pointers, spec_bytes, strict=True)),
        pointers,
        analyst_key.sign(ANALYST_DOMAIN + traces[0]),
    )


def authority_message(
    first_trace: bytes, analyst_public_key: Ed25519PublicKey, scope: CertificationScope
) -> bytes:
    return AUTHORITY_DOMAIN + first_trace + public_key_bytes(analyst_public_key) + scope.encode()


def verify_seal(
    first_trace: bytes,
    analyst_public_key: Ed25519PublicKey,
    analyst_signature: bytes,
    authority_public_key: Ed25519PublicKey | None = None,
    authority_signature: bytes | None = None,
    scope: CertificationScope | None = None,
    now: float | None = None,
) -> None:
    """``ValueError`` unless the analyst (and, when required, the authority, for this controller's
    ``scope`` and before its expiry) signed this T_0."""
    if len(first_trace) != SIZE:
        raise ValueError(f"T_0 is {SIZE} bytes")
    try:
        analyst_public_key.verify(analyst_signature, ANALYST_DOMAIN + first_trace)
    except InvalidSignature as exc:
        raise ValueError("the analyst's signature does not verify on this T_0") from exc
    if authority_public_key is not None:
        if not authority_signature:
            raise ValueError("this controller requires a certification authority's co-signature")
        if scope is None:
            raise ValueError("the authority's co-signature must name this controller's scope")
        try:
            authority_public_key.verify(
                authority_signature, authority_message(first_trace, analyst_public_key, scope)
            )
        except InvalidSignature as exc:
            raise ValueError(
                "the authority's co-signature does not verify on this T_0 for this controller, "
                "data set and rules and this person"
            ) from exc
        if (time.time() if now is None else now) >= scope.expires:
            raise ValueError("the authority's certification has expired")


# ---------------------------------------------------------------- key (de)serialisation


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def public_key_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def load_public_key(data: bytes) -> Ed25519PublicKey:
    """A PEM public key, or the 32 raw bytes of one."""
    try:
        key = (
            serialization.load_pem_public_key(data)
            if data.lstrip().startswith(b"-----")
            else Ed25519PublicKey.from_public_bytes(data)
        )
    except (ValueError, UnsupportedAlgorithm) as exc:  # malformed, or a key type nobody supports
        raise ValueError(f"not an Ed25519 public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    try:
        check_public_key(public_key_bytes(key))
    except ValueError as exc:
        raise ValueError(f"weak Ed25519 public key: {exc}") from None
    return key


# ---------------------------------------------------------------- the controller's side


@dataclass(frozen=True)
class ChainState:
    """Where a controller is in a sequence: the last accepted trace and how many analyses it gave."""

    previous_trace: bytes
    position: int = 0
    finished: bool = False


def next_analysis(state: ChainState, trace: bytes, revealed: dict[str, bytes]) -> tuple[ChainState, bytes]:
    """Accept T_j: recover I_j by equation (2), check its redundancy and, for a reference, the
    revealed spec's hash. Returns the new state and the spec; ``InvalidInstruction`` (a
    ``ValueError``) if the sequence was changed in any way (Proposition 2)."""
    if state.finished:
        raise InvalidInstruction("the sequence has already ended")
    instruction = decode(retrieve(state.previous_trace, trace))
    spec = resolve(instruction, revealed)
    return ChainState(trace, state.position + 1, instruction.last), spec
