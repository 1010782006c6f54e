"""Binding sequences (Domingo-Ferrer, PSD 2022, Section 3): Propositions 1 and 2 as property tests."""

import dataclasses
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.crypto.chain.instructions import (
    MAX_INLINE,
    MAX_POINTER,
    SALT,
    InvalidInstruction,
    canonical_json,
    decode,
    encode,
    pointer_of,
)
from petlab.crypto.chain.traces import (
    CertificationScope,
    ChainState,
    H,
    authority_message,
    build_traces,
    load_private_key,
    load_public_key,
    next_analysis,
    private_key_pem,
    public_key_pem,
    retrieve,
    seal,
    verify_seal,
    xor,
)

ANALYST = Ed25519PrivateKey.generate()
AUTHORITY = Ed25519PrivateKey.generate()
SCOPE = CertificationScope("controller-a", b"\x00" * 32, b"\x01" * 32, 2_000_000_000, "alice")

specs_strategy = st.lists(
    st.dictionaries(
        st.sampled_from(["type", "column", "by", "q", "where"]),
        st.one_of(st.integers(-5, 10**6), st.text(max_size=80)),
        min_size=1,
        max_size=4,
    ),
    min_size=1,
    max_size=6,
).map(lambda specs: [canonical_json(s) for s in specs])


def run(sequence, traces):
    state = ChainState(sequence.traces[0])
    out = []
    for trace in traces:
        state, spec = next_analysis(state, trace, sequence.specs)
        out.append(spec)
    return state, out


def test_equation_1_and_2_by_hand():
    instructions = [encode(b'{"a":1}', "p1", False), encode(b'{"b":2}', "p2", True)]
    traces = build_traces(instructions)
    assert traces[2] == H(instructions[1])
    assert traces[1] == xor(H(traces[2]), instructions[1])
    assert traces[0] == xor(H(traces[1]), instructions[0])
    assert retrieve(traces[0], traces[1]) == instructions[0]
    assert retrieve(traces[1], traces[2]) == instructions[1]


def test_both_encodings_roundtrip():
    short, long = b'{"t":"mean"}', canonical_json({"type": "magnitude", "column": "x" * 100})
    inline = decode(encode(short, "#1", last=True))
    assert inline.spec == short and inline.last
    reference = decode(encode(long, "#2", last=False))
    assert reference.spec is None and reference.pointer == "#2" and not reference.last
    assert len(short) <= MAX_INLINE < len(long)


@settings(max_examples=60)
@given(specs_strategy)
def test_honest_sequence_is_revealed_in_order(spec_bytes):
    sequence = seal(spec_bytes, ANALYST)
    verify_seal(sequence.traces[0], ANALYST.public_key(), sequence.analyst_signature)
    state, revealed = run(sequence, sequence.traces[1:])
    assert revealed == spec_bytes and state.finished and state.position == len(spec_bytes)
    with pytest.raises(InvalidInstruction, match="already ended"):
        next_analysis(state, sequence.traces[-1], sequence.specs)


def test_controller_cannot_read_ahead():
    """Proposition 1: T_{j} hides I_{j+1} until T_{j+1} is revealed."""
    spec_bytes = [canonical_json({"type": "mean", "column": "age"})] * 3
    sequence = seal(spec_bytes, ANALYST)
    with pytest.raises(InvalidInstruction):
        decode(sequence.traces[1])  # a trace alone is not an instruction
    with pytest.raises(InvalidInstruction):
        decode(xor(H(os.urandom(64)), sequence.traces[1]))  # guessing T_2 gives gibberish


@settings(max_examples=60)
@given(specs_strategy.filter(lambda s: len(s) >= 2), st.data())
def test_any_change_to_the_sequence_is_detected(spec_bytes, data):
    sequence = seal(spec_bytes, ANALYST)
    traces = sequence.traces[1:]
    n = len(traces)
    j = data.draw(st.integers(0, n - 1), label="position")
    other = seal(spec_bytes, ANALYST)  # same specs, another sequence (same pointers)
    attacks = {
        "substitution": [*traces[:j], os.urandom(64), *traces[j + 1 :]],
        "foreign trace": [*traces[:j], other.traces[j + 1], *traces[j + 1 :]],
        "deletion": traces[:j] + traces[j + 1 :],
        "insertion": [*traces[:j], other.traces[1], *traces[j:]],
        "replay": [*traces[: j + 1], traces[j], *traces[j + 1 :]],
    }
    if j + 1 < n:
        attacks["reordering"] = [*traces[:j], traces[j + 1], traces[j], *traces[j + 2 :]]
    for name, attacked in attacks.items():
        if name == "deletion" and j == n - 1:
            # dropping the last trace is just stopping early: the sequence never finishes
            state, _ = run(sequence, attacked)
            assert not state.finished, name
            continue
        with pytest.raises(InvalidInstruction):
            run(sequence, attacked)
            raise AssertionError(f"{name} at {j} went undetected")


def test_changed_stored_spec_is_detected():
    long_spec = canonical_json({"type": "frequency", "columns": ["age", "sex"], "note": "y" * 60})
    sequence = seal([long_spec], ANALYST)
    tampered = dict(sequence.specs)
    tampered["#1"] = long_spec.replace(b"age", b"agf")
    with pytest.raises(InvalidInstruction, match="does not match its hash"):
        next_analysis(ChainState(sequence.traces[0]), sequence.traces[1], tampered)
    with pytest.raises(InvalidInstruction, match="not revealed"):
        next_analysis(ChainState(sequence.traces[0]), sequence.traces[1], {})


def test_signatures_bind_to_this_first_trace_and_analyst():
    sequence = seal([b'{"t":1}'], ANALYST)
    other = seal([b'{"t":2}'], ANALYST)
    with pytest.raises(ValueError, match="analyst's signature"):
        verify_seal(other.traces[0], ANALYST.public_key(), sequence.analyst_signature)
    with pytest.raises(ValueError, match="analyst's signature"):
        verify_seal(sequence.traces[0], Ed25519PrivateKey.generate().public_key(), sequence.analyst_signature)
    co_signature = AUTHORITY.sign(authority_message(sequence.traces[0], ANALYST.public_key(), SCOPE))
    verify_seal(
        sequence.traces[0],
        ANALYST.public_key(),
        sequence.analyst_signature,
        AUTHORITY.public_key(),
        co_signature,
        SCOPE,
    )
    with pytest.raises(ValueError, match="co-signature"):
        verify_seal(
            sequence.traces[0],
            ANALYST.public_key(),
            sequence.analyst_signature,
            AUTHORITY.public_key(),
            None,
            SCOPE,
        )
    moved = AUTHORITY.sign(authority_message(other.traces[0], ANALYST.public_key(), SCOPE))
    with pytest.raises(ValueError, match="authority's co-signature"):
        verify_seal(
            sequence.traces[0],
            ANALYST.public_key(),
            sequence.analyst_signature,
            AUTHORITY.public_key(),
            moved,
            SCOPE,
        )


@pytest.mark.parametrize(
    "elsewhere",
    [
        {"controller_id": "controller-b"},
        {"dataset_sha256": b"\x02" * 32},
        {"rules_sha256": b"\x03" * 32},
        {"expires": SCOPE.expires + 1},
        {"person_id": "mallory"},
    ],
    ids=["other controller", "other data set", "other rules", "other expiry", "other person"],
)
def test_co_signature_holds_only_in_its_scope(elsewhere):
    """An authority's co-signature replayed at another controller, against other data, under other
    rules, with a later expiry or for another person does not verify; past its expiry it is refused
    too."""
    sequence = seal([b'{"t":1}'], ANALYST)
    co_signature = AUTHORITY.sign(authority_message(sequence.traces[0], ANALYST.public_key(), SCOPE))
    seal_args = (sequence.traces[0], ANALYST.public_key(), sequence.analyst_signature, AUTHORITY.public_key())
    with pytest.raises(ValueError, match="for this controller, data set and rules"):
        verify_seal(*seal_args, co_signature, dataclasses.replace(SCOPE, **elsewhere))
    verify_seal(*seal_args, co_signature, SCOPE, now=SCOPE.expires - 1)
    with pytest.raises(ValueError, match="expired"):
        verify_seal(*seal_args, co_signature, SCOPE, now=SCOPE.expires)
    with pytest.raises(ValueError, match="scope"):
        verify_seal(*seal_args, co_signature, None)


def test_sixteen_byte_salts_and_old_format_refused():
    """Format 2: every instruction carries 16 fresh random bytes, so the same analyses never give
    the same T_0; a format-1 instruction (8-byte salt) is refused with a clear message."""
    spec = b'{"t":1}'
    first, second = encode(spec, "#1", True), encode(spec, "#1", True)
    assert first[-SALT - 8 : -8] != second[-SALT - 8 : -8] and SALT == 16
    assert seal([spec], ANALYST).traces[0] != seal([spec], ANALYST).traces[0]
    old = first[:-8] + b"PETLAB\x01\x00"
    with pytest.raises(InvalidInstruction, match="format version 1"):
        decode(old)
    with pytest.raises(ValueError, match="9999"):
        pointer_of(10_000)
    assert len(pointer_of(9999).encode()) <= MAX_POINTER


def test_keys_roundtrip_through_pem():
    assert private_key_pem(load_private_key(private_key_pem(ANALYST))) == private_key_pem(ANALYST)
    public = load_public_key(public_key_pem(ANALYST.public_key()))
    assert public_key_pem(public) == public_key_pem(ANALYST.public_key())
    with pytest.raises(ValueError):
        load_public_key(b"\x00" * 5)


def test_a_pem_key_of_an_unknown_algorithm_is_a_value_error():
    """Found by the RPC fuzzer: one flipped byte in the algorithm identifier of an Ed25519 PEM
    (1.3.101.112 -> 0.11.101.112) made cryptography raise UnsupportedAlgorithm, which reached
    gRPC as UNKNOWN; every malformed key must be the ValueError the servicers answer."""
    pem = public_key_pem(ANALYST.public_key())
    body = pem.split(b"\n")[1]
    flipped = pem.replace(body, body[:12] + b"C2" + body[14:])
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        load_public_key(flipped)
