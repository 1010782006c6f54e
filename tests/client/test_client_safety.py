"""The device's side against a hostile server and hostile local users."""

from __future__ import annotations

import hashlib
import os

import pytest

from petlab.client.knn_client import _safe, verified_specs_digest
from petlab.owner_only import UnsafeDirectory, private_directory, write_owner_only

SPECS = b"client specs bytes"
DIGEST = hashlib.sha256(SPECS).hexdigest()


@pytest.mark.parametrize(
    "announced",
    ["../../../../tmp/pwned", "/etc/cron.d/x", DIGEST[:-1], DIGEST.upper(), "0" * 64, "", DIGEST + "0"],
)
def test_a_server_cannot_choose_the_key_directory(announced):
    """Attack: a cache path joining the server's specs_sha256[:16] unchecked would let '..' or an
    absolute value put the secret keys where the server liked. Only the client's own digest names
    the directory."""
    with pytest.raises(ValueError, match="do not match"):
        verified_specs_digest(SPECS, announced)
    assert verified_specs_digest(SPECS, DIGEST) == DIGEST


@pytest.mark.parametrize("name", ["..", ".", "...", "../x", "/abs", ""])
def test_server_and_model_names_stay_one_path_component(name):
    part = _safe(name)
    assert part not in {"", ".", ".."} and "/" not in part and part.strip(".")


def test_precreated_staging_file_does_not_capture_the_secret(tmp_path):
    """Attack: another local user pre-creates (or symlinks) a fixed staging name
    '.keys.bin.tmp' to read the secret key set as it is written. Staging is a fresh
    O_EXCL file with a random name; the attacker's file stays empty."""
    bait = tmp_path / "attacker-owned"
    bait.write_bytes(b"")
    (tmp_path / ".keys.bin.tmp").symlink_to(bait)
    write_owner_only(tmp_path / "keys.bin", b"SECRET KEY SET")
    assert bait.read_bytes() == b""
    assert (tmp_path / "keys.bin").read_bytes() == b"SECRET KEY SET"
    assert (tmp_path / "keys.bin").stat().st_mode & 0o777 == 0o600
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]
    assert leftovers == []


def test_shared_or_foreign_directories_are_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafeDirectory, match="writable by other users"):
        private_directory(shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(UnsafeDirectory, match="not a directory"):
        private_directory(link)
    fresh = private_directory(tmp_path / "a" / "b")
    assert fresh.stat().st_mode & 0o777 == 0o700
