"""concrete's key sets and ciphertexts checked against a circuit's client specs without concrete
(``crypto.knn.wire_format``), on real keys: Iris at n = 10 and Wine at n = 6, compiled as
``petlab-server`` compiles them. Hostile variants are built from the real messages with pycapnp.
Which of them kill concrete is measured in ``tests/server/knn/test_foreign_keys.py`` (through a server
process); here: each is refused, and only what concrete itself writes passes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.wire_format import (
    BLOB_BYTES,
    SCHEMA,
    ForeignBytes,
    blob_cut,
    payload_bytes,
)

pytestmark = pytest.mark.slow  # real key generation (about 2 s per model)

# iris with the default family; wine with the fast one, whose parameters differ (two thermo circuits
# can share every key parameter: their keys then pass these checks, threat-models.md, not guaranteed)
IRIS, WINE = ("iris", KnnSettings(n=10, k=3)), ("wine", KnnSettings(n=6, k=3, algorithm="fast"))


@pytest.fixture(scope="module")
def iris(keyed_model):
    return keyed_model(*IRIS)


@pytest.fixture(scope="module")
def wine(keyed_model):
    return keyed_model(*WINE)


@pytest.fixture(scope="module")
def iris_keys(iris) -> bytes:
    return iris[1].evaluation_keys_bytes()


def _edited_keys(data: bytes, edit) -> bytes:
    with SCHEMA.ServerKeyset.from_bytes(data, traversal_limit_in_words=len(data)) as reader:
        builder = reader.as_builder()
    edit(builder)
    return builder.to_bytes()


def _edited_value(data: bytes, edit) -> bytes:
    with SCHEMA.Value.from_bytes(data) as reader:
        builder = reader.as_builder()
    edit(builder)
    return builder.to_bytes()


def _cut(message, pieces: list[bytes]) -> None:
    blobs = message.payload.init("data", len(pieces))
    for i, piece in enumerate(pieces):
        blobs[i] = piece


def _payload(message) -> bytes:
    return b"".join(bytes(blob) for blob in message.payload.data)


def test_payload_sizes_are_what_concrete_writes(iris, wine):
    """The size formula against real keys of both circuits (bootstrap keys with k = 2, N = 1024
    and k = 1, N = 2048; seeded compression), and the framing is about a hundred bytes per key."""
    for hosted, client in (iris, wine):
        data = client.evaluation_keys_bytes()
        with SCHEMA.ServerKeyset.from_bytes(data, traversal_limit_in_words=len(data)) as keyset:
            for kind in ("lweBootstrapKeys", "lweKeyswitchKeys"):
                for key in getattr(keyset, kind):
                    size = sum(len(blob) for blob in key.payload.data)
                    assert size == payload_bytes(kind, key.info.to_dict())
        n_keys = sum(len(descriptions) for descriptions in hosted.wire.keys.values())
        assert 0 < len(data) - hosted.wire.key_bytes < 256 + 128 * n_keys
    assert blob_cut(10) == [10] and blob_cut(BLOB_BYTES + 8) == [BLOB_BYTES, 8]
    assert (
        payload_bytes(
            "lweKeyswitchKeys",
            {
                "compression": "none",
                "params": {"inputLweDimension": 2048, "levelCount": 3, "outputLweDimension": 800},
            },
        )
        == 2048 * 3 * 801 * 8
    )


def test_genuine_keys_and_queries_pass(iris, wine):
    for hosted, client in (iris, wine):
        hosted.wire.check_keys(client.evaluation_keys_bytes())
        hosted.wire.check_input(client.encrypt(hosted.model.encode(np.zeros(hosted.model.d))))


def test_another_data_sets_keys_and_queries_are_refused(iris, wine):
    (iris_hosted, iris_client), (wine_hosted, wine_client) = iris, wine
    another = "made for another circuit|this model's circuit needs"
    with pytest.raises(ForeignBytes, match=another):
        iris_hosted.wire.check_keys(wine_client.evaluation_keys_bytes())
    with pytest.raises(ForeignBytes, match=another):
        wine_hosted.wire.check_keys(iris_client.evaluation_keys_bytes())
    with pytest.raises(ForeignBytes, match="does not fit this model"):
        iris_hosted.wire.check_input(wine_client.encrypt(wine_hosted.model.encode(np.zeros(13))))


HEADER_EDITS = {
    "polynomial size": lambda k: setattr(
        k.lweBootstrapKeys[0].info.params,
        "polynomialSize",
        2 * k.lweBootstrapKeys[0].info.params.polynomialSize,
    ),
    "level count": lambda k: setattr(k.lweKeyswitchKeys[0].info.params, "levelCount", 3),
    "compression": lambda k: setattr(k.lweBootstrapKeys[0].info, "compression", "none"),
    "input key id": lambda k: setattr(k.lweBootstrapKeys[0].info, "inputId", 0),
    "key id": lambda k: setattr(k.lweKeyswitchKeys[0].info, "id", 1),
    "variance": lambda k: setattr(k.lweBootstrapKeys[0].info.params, "variance", 1e-30),
    "a key missing": lambda k: k.init("lweKeyswitchKeys", 0),
    "a packing key added": lambda k: k.init("packingKeyswitchKeys", 1),
}


@pytest.mark.parametrize("edit", HEADER_EDITS)
def test_keys_with_another_description_are_refused(iris, iris_keys, edit):
    """Each of these, in a key set that otherwise is the model's, killed concrete (SIGSEGV) or ran
    another circuit's parameters when measured; each is refused."""
    with pytest.raises(ForeignBytes):
        iris[0].wire.check_keys(_edited_keys(iris_keys, HEADER_EDITS[edit]))


def test_payloads_of_another_size_or_cut_are_refused(iris, iris_keys):
    """Same bytes cut into three blobs: concrete copies blob i at word i x (2^29 - 2) / 8 and writes
    outside its buffer (SIGSEGV measured). Truncated, extended and padded payloads too."""
    wire = iris[0].wire

    def recut(pieces):
        return lambda keyset: _cut(keyset.lweBootstrapKeys[0], pieces(_payload(keyset.lweBootstrapKeys[0])))

    for pieces in (
        lambda p: [p[:1000], p[1000:5000], p[5000:]],
        lambda p: [p, b""],
        lambda p: [p[:-8]],
        lambda p: [p + bytes(4096)],
    ):
        with pytest.raises(ForeignBytes, match="payload bytes"):
            wire.check_keys(_edited_keys(iris_keys, recut(pieces)))
    with pytest.raises(ForeignBytes, match="framing"):  # trailing bytes: concrete reads them anyway
        wire.check_keys(iris_keys + bytes(8))
    with pytest.raises(ForeignBytes, match=r"segment table|framing"):
        wire.check_keys(os.urandom(4096))


def test_payload_values_are_not_interpreted(iris, iris_keys):
    """Random bytes in the model's layout pass: concrete runs them and returns garbage to their
    sender (measured: no crash), so there is nothing to refuse."""

    def scramble(keyset):
        key = keyset.lweBootstrapKeys[0]
        _cut(key, [os.urandom(len(_payload(key)))])

    iris[0].wire.check_keys(_edited_keys(iris_keys, scramble))


@pytest.mark.parametrize(
    "edit",
    [
        lambda v: _cut(v, [_payload(v)[:48], _payload(v)[48:]]),  # killed concrete (SIGSEGV)
        lambda v: _cut(v, [_payload(v)[:-8]]),
        lambda v: v.rawInfo.shape.init("dimensions", 1),
        lambda v: setattr(v.typeInfo.lweCiphertext.encryption, "lweDimension", 771),
        lambda v: setattr(v.typeInfo.lweCiphertext, "compression", "none"),
    ],
)
def test_queries_of_another_type_or_cut_are_refused(iris, edit):
    hosted, client = iris
    query = client.encrypt(hosted.model.encode(np.zeros(hosted.model.d)))
    with pytest.raises(ForeignBytes):
        hosted.wire.check_input(_edited_value(query, edit))


def test_a_refusal_quotes_little_of_what_the_sender_chose(iris):
    """The refusal goes back in the call's status: a query with 5,000 dimensions is named, not
    echoed."""
    hosted, client = iris
    query = client.encrypt(hosted.model.encode(np.zeros(hosted.model.d)))
    huge = _edited_value(query, lambda v: v.rawInfo.shape.init("dimensions", 5000))
    with pytest.raises(ForeignBytes) as refusal:
        hosted.wire.check_input(huge)
    assert len(str(refusal.value)) < 300


def test_pointers_the_schema_does_not_list_never_reach_concrete(iris, iris_keys, with_unlisted_pointer):
    """Attack: concrete deep-copies every pointer of a message as it reads it, listed or not,
    while the checks read the listed fields only. A key set whose root carries 50 extra pointers
    aliasing its 20 MB bootstrap key would cost concrete 1 GB (8,000 fit the upload margin).
    The checks return the message re-encoded from what they checked, and only those bytes
    reach concrete: the genuine key set exactly, and a ciphertext without the extra field."""
    hosted, client = iris
    padded = with_unlisted_pointer(iris_keys, [bytes(4096)] * 3)
    assert len(padded) - len(iris_keys) < 64 * 1024  # within the upload margin
    assert hosted.wire.check_keys(padded) == iris_keys == hosted.wire.check_keys(iris_keys)
    query = client.encrypt(hosted.model.encode(np.zeros(hosted.model.d)))
    checked = hosted.wire.check_input(with_unlisted_pointer(query, [bytes(4096)]))
    assert checked == hosted.wire.check_input(query) and len(checked) < len(query)
    assert hosted.wire.check_input(checked) == checked
