import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from petlab.owner_only import UnsafeDirectory
from petlab.server.common.callers import OwnerQuota
from petlab.server.knn.key_store import (
    KeyForAnotherModel,
    KeyNotFound,
    KeyStore,
    KeyTooLarge,
    MalformedKeyId,
    OwnerQuotaExceeded,
    OwnerUsage,
    UploadMismatch,
)
from petlab.server.knn.key_warmup import WarmupStore


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def upload(store, data: bytes, model="iris", chunks=None):
    pieces = chunks if chunks is not None else [data[i : i + 7] for i in range(0, len(data), 7)]
    return store.put(model, "tester", len(data), hashlib.sha256(data).hexdigest(), iter(pieces))


def test_roundtrip_permissions_and_restart(tmp_path):
    store = KeyStore(tmp_path / "keys", max_bytes=1000, idle_seconds=60)
    stored = upload(store, b"evaluation keys" * 3)
    assert store.read(stored.key_id, "iris") == b"evaluation keys" * 3
    assert (tmp_path / "keys" / f"{stored.key_id}.bin").stat().st_mode & 0o777 == 0o600
    store.close()
    again = KeyStore(tmp_path / "keys", max_bytes=1000, idle_seconds=60)
    assert again.read(stored.key_id, "iris") == b"evaluation keys" * 3


def test_lookup_errors(tmp_path):
    store = KeyStore(tmp_path, max_bytes=1000, idle_seconds=60)
    stored = upload(store, b"abc")
    with pytest.raises(MalformedKeyId):
        store.read("nope", "iris")
    with pytest.raises(KeyNotFound, match="upload your evaluation keys again"):
        store.read("0" * 32, "iris")
    with pytest.raises(KeyForAnotherModel, match="registered for model 'iris'"):
        store.read(stored.key_id, "wine")


def test_truncated_or_corrupted_uploads_leave_nothing(tmp_path):
    store = KeyStore(tmp_path, max_bytes=1000, idle_seconds=60)
    data = b"0123456789" * 5
    digest = hashlib.sha256(data).hexdigest()
    with pytest.raises(UploadMismatch, match="ended after 20 of the announced 50"):
        store.put("iris", "t", 50, digest, iter([data[:20]]))
    with pytest.raises(UploadMismatch, match="SHA-256"):
        store.put("iris", "t", 50, digest, iter([data[:49] + b"X"]))
    with pytest.raises(UploadMismatch, match="more than the announced"):
        store.put("iris", "t", 10, hashlib.sha256(data[:10]).hexdigest(), iter([data]))

    def crashing():
        yield data[:10]
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        store.put("iris", "t", 50, digest, crashing())
    assert store.entries() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite"]


def test_cap_and_least_recently_used_eviction(tmp_path):
    clock = Clock()
    store = KeyStore(tmp_path, max_bytes=100, idle_seconds=1e6, clock=clock)
    with pytest.raises(KeyTooLarge, match="exceed"):
        upload(store, b"x" * 101)
    first = upload(store, b"a" * 40)
    clock.now += 1
    second = upload(store, b"b" * 40)
    clock.now += 1
    store.mark_used(first.key_id)  # an evaluation used it: first is now the most recently used
    clock.now += 1
    third = upload(store, b"c" * 40)
    remaining = {k.key_id for k in store.entries()}
    assert remaining == {first.key_id, third.key_id}
    assert second.key_id not in remaining and store.total_bytes() == 80


def test_idle_keys_expire(tmp_path):
    clock = Clock()
    store = KeyStore(tmp_path, max_bytes=100, idle_seconds=10, clock=clock)
    stored = upload(store, b"k" * 5)
    clock.now += 9
    store.mark_used(stored.key_id)
    clock.now += 9
    assert store.expire() == []
    clock.now += 11
    assert store.expire() == [stored.key_id]
    with pytest.raises(KeyNotFound):
        store.read(stored.key_id, "iris")


def test_restart_cleans_orphans(tmp_path):
    store = KeyStore(tmp_path, max_bytes=100, idle_seconds=10)
    stored = upload(store, b"k" * 5)
    store.close()
    (tmp_path / ".upload-deadbeef").write_bytes(b"half")
    (tmp_path / ("f" * 32 + ".bin")).write_bytes(b"no row")
    (tmp_path / f"{stored.key_id}.bin").unlink()
    again = KeyStore(tmp_path, max_bytes=100, idle_seconds=10)
    assert again.entries() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite"]


def test_unverified_upload_never_evicts_other_keys(tmp_path):
    """Attack: junk announcing the whole cap, to push every stored key out (LRU) before it is found
    not to be keys. Eviction waits for the caller's verification."""
    store = KeyStore(tmp_path, max_bytes=100, idle_seconds=1e6)
    victim = upload(store, b"v" * 60)
    junk = b"\0" * 100

    def not_keys(path):
        raise ValueError("not evaluation keys")

    with pytest.raises(UploadMismatch, match="not usable evaluation keys"):
        store.put("iris", "attacker", len(junk), hashlib.sha256(junk).hexdigest(), [junk], verify=not_keys)
    assert [k.key_id for k in store.entries()] == [victim.key_id]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["index.sqlite", f"{victim.key_id}.bin"])
    # a verified upload may evict, as before
    good = b"g" * 100
    stored = store.put(
        "iris", "owner", len(good), hashlib.sha256(good).hexdigest(), [good], verify=lambda p: None
    )
    assert [k.key_id for k in store.entries()] == [stored.key_id]


@contextmanager
def upload_in_flight(store, owner: str, data: bytes) -> Iterator[list]:
    """While the block runs, ``owner``'s upload of ``data`` is in flight: a thread streams its first
    10 bytes and holds the rest. After the block the rest is sent and the thread joined; the yielded
    list then holds the stored key (empty if the upload failed)."""
    entered, release = threading.Event(), threading.Event()
    outcome: list = []

    def held_chunks():
        yield data[:10]
        entered.set()
        release.wait(10)
        yield data[10:]

    digest = hashlib.sha256(data).hexdigest()
    worker = threading.Thread(
        target=lambda: outcome.append(store.put("iris", owner, len(data), digest, held_chunks()))
    )
    worker.start()
    try:
        assert entered.wait(10)
        yield outcome
    finally:
        release.set()
        worker.join(10)


def test_staging_bytes_count_against_the_cap(tmp_path):
    """Attack: uploads in flight were not counted, so 8 concurrent uploads of the cap each could
    fill 8x the cap of disk. An announced size is reserved while the upload streams."""
    store = KeyStore(tmp_path, max_bytes=100, idle_seconds=1e6)
    data = b"s" * 70
    digest = hashlib.sha256(data).hexdigest()
    with upload_in_flight(store, "a", data) as outcome, pytest.raises(KeyTooLarge, match="busy"):
        store.put("iris", "b", 70, digest, [data])
    assert len(outcome) == 1 and outcome[0].size == 70
    again = store.put("iris", "b", 70, digest, [data])  # the reservation was released
    assert again.size == 70


# ------------------------------------------------------------------ owners and quotas


def put_as(store, owner: str, data: bytes, verify=lambda path: None):
    return store.put("iris", owner, len(data), hashlib.sha256(data).hexdigest(), [data], verify=verify)


def test_an_owner_cannot_evict_or_use_another_owners_keys(tmp_path):
    """Attack: with callers identified, owner A fills the store with verified keys. B's key stays,
    A's own least recently used keys make room for A, and A cannot use B's key id (it is answered
    as unknown, like any other)."""
    clock = Clock()
    store = KeyStore(tmp_path, 90, 1e6, clock, quota=OwnerQuota(max_bytes=60, max_keys=3))
    bob = put_as(store, "bob", b"b" * 40)
    clock.now += 1
    alice_first = put_as(store, "alice", b"a" * 35)
    clock.now += 1
    alice_second = put_as(store, "alice", b"A" * 35)  # over alice's 60: her first key goes
    kept = {k.key_id for k in store.entries()}
    assert kept == {bob.key_id, alice_second.key_id} and alice_first.key_id not in kept
    with pytest.raises(KeyNotFound, match="unknown or expired key id"):
        store.read(bob.key_id, "iris", owner="alice")
    assert store.read(bob.key_id, "iris", owner="bob") == b"b" * 40
    # alice's largest allowed upload does not fit beside bob's key: refused, bob's key stays
    with pytest.raises(KeyTooLarge, match="other callers' keys"):
        put_as(store, "alice", b"z" * 60)
    assert bob.key_id in {k.key_id for k in store.entries()}


def test_one_owners_exhausted_quota_leaves_others_alone(tmp_path):
    """A at its key count and with an upload in flight that uses its whole byte quota: A's next
    upload is refused, B's goes through."""
    store = KeyStore(tmp_path, 100, 1e6, quota=OwnerQuota(max_bytes=40, max_keys=2))
    data = b"s" * 40
    with upload_in_flight(store, "alice", data):
        with pytest.raises(OwnerQuotaExceeded, match="your uploads in flight"):
            put_as(store, "alice", b"x" * 5)
        assert store.usage("alice").uploading_bytes == 40
        assert put_as(store, "bob", b"y" * 40).owner == "bob"
    with pytest.raises(OwnerQuotaExceeded, match="exceed your quota"):
        put_as(store, "alice", b"x" * 41)
    assert store.usage("alice") == OwnerUsage(keys=1, stored_bytes=40, uploading_bytes=0)
    assert store.usage("bob") == OwnerUsage(keys=1, stored_bytes=40, uploading_bytes=0)


def test_key_count_quota_evicts_only_the_owners_oldest(tmp_path):
    clock = Clock()
    store = KeyStore(tmp_path, 1000, 1e6, clock, quota=OwnerQuota(max_bytes=1000, max_keys=2))
    other = put_as(store, "bob", b"o")
    ids = []
    for i in range(4):
        clock.now += 1
        ids.append(put_as(store, "alice", bytes([i])).key_id)
    assert {k.key_id for k in store.entries()} == {other.key_id, *ids[-2:]}


def test_lookups_do_not_keep_a_key_alive(tmp_path):
    """Only a successful evaluation (``mark_used``) moves the last-used time: a key looked up by
    calls that then fail (an invalid query naming its id) still expires."""
    clock = Clock()
    store = KeyStore(tmp_path, max_bytes=100, idle_seconds=10, clock=clock)
    stored = upload(store, b"k" * 5)
    for _ in range(2):
        clock.now += 4
        store.locate(stored.key_id, "iris")
        store.read(stored.key_id, "iris")
    clock.now += 3  # 11 s after the upload, 3 s after the last lookup
    assert store.expire() == [stored.key_id]


def test_announced_size_outside_the_window_is_refused_before_anything_is_reserved(tmp_path):
    store = KeyStore(tmp_path, max_bytes=1000, idle_seconds=60)
    data = b"k" * 50
    digest = hashlib.sha256(data).hexdigest()
    for window in ((60, 70), (10, 49)):
        with pytest.raises(UploadMismatch, match=r"are \d+ to \d+ bytes; the upload announces 50"):
            store.put("iris", "t", len(data), digest, iter([data]), size_window=window)
    with pytest.raises(KeyTooLarge):  # the caps come first: too large stays RESOURCE_EXHAUSTED
        store.put("iris", "t", 2000, digest, iter([data]), size_window=(10, 20))
    assert store.put("iris", "t", len(data), digest, iter([data]), size_window=(50, 51)).size == 50
    assert not list(tmp_path.glob(".upload-*"))


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_an_existing_directory_others_can_write_is_refused(tmp_path, mode):
    directory = tmp_path / "keys"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(UnsafeDirectory, match="writable by other users"):
        KeyStore(directory, max_bytes=100, idle_seconds=10)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(UnsafeDirectory, match="not a directory"):
        KeyStore(link, max_bytes=100, idle_seconds=10)


def test_warmup_files_never_follow_a_planted_link(tmp_path):
    """Attack by another local user (or anything that can write there): a link planted under a
    predictable staging name (``<key_id>.tmp``, opened with O_TRUNC) would make the server
    overwrite the link's target. Staging files have fresh random names (mkstemp:
    O_CREAT | O_EXCL | O_NOFOLLOW) and a link at the final name is replaced, not written through
    nor read."""
    store = WarmupStore(tmp_path / "warmup")
    precious = tmp_path / "precious"
    precious.write_bytes(b"precious")
    key_id = "ab" * 16
    (store.directory / f"{key_id}.tmp").symlink_to(precious)
    store.put(key_id, b"ciphertext")
    assert precious.read_bytes() == b"precious"
    assert store.get(key_id) == b"ciphertext"
    assert (store.directory / f"{key_id}.ct").stat().st_mode & 0o777 == 0o600
    target = store.directory / f"{key_id}.ct"
    target.unlink()
    target.symlink_to(precious)
    assert store.get(key_id) is None  # a link is not read through
    store.put(key_id, b"second")
    assert precious.read_bytes() == b"precious" and store.get(key_id) == b"second"
    store.keep_only(set())
    assert sorted(p.name for p in store.directory.iterdir()) == [f"{key_id}.tmp"]  # the planted link


def test_an_existing_warmup_directory_others_can_write_is_refused(tmp_path):
    directory = tmp_path / "warmup"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match="writable by other users"):
        WarmupStore(directory)
