"""The controller's configuration from the data owner's files: the analysts' allow-list (keys and the
persons they belong to), the
output-checking rules, and the identity a certification authority's co-signature is bound to
(the controller id, the data set's and the rules' digests). ``server.controller.options`` names the
flags that point at these files.

The data set's published digest is keyed: HMAC-SHA256 of the data file's bytes under 32 random bytes
kept owner-only in the data directory (``dataset-digest-key``). A plain SHA-256 of the file is a
function of the records alone, so an analyst who knows every record but one could hash the file with
each candidate value of the last one and read it off ``Describe``. The keyed digest still changes
whenever the file does (a co-signature binds the data version) and is stable while the key is kept;
it says nothing else about the records. The plain SHA-256 keys the release history in the owner's
database only (``history_key``); it is never published or logged."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
import secrets
import tomllib
from pathlib import Path

from petlab.crypto.chain.instructions import canonical_json
from petlab.crypto.chain.traces import MAX_CONTROLLER_ID, check_person_id, load_public_key, public_key_bytes
from petlab.server.controller.output_checking import Rules

_PEM_BLOCK = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)
_PERSON_LABEL = re.compile(rb"^#\s*person:\s*(.+?)\s*$", re.M)


@dataclasses.dataclass(frozen=True)
class ControllerIdentity:
    """What an authority's co-signature names (``petlab-analyst describe`` fetches it)."""

    controller_id: str
    dataset_sha256: bytes  # published: the keyed digest of the data file (module docstring)
    rules_sha256: bytes
    history_key: bytes  # SHA-256 of the data file: keys the release history; owner-only, never published


def controller_identity(
    data_path: Path, rules: Rules, data_dir: Path, controller_id: str | None
) -> ControllerIdentity:
    """The keyed digest of the data file's bytes (module docstring), the digest of the rules'
    canonical JSON, and the id: the one given, or one made at random on first start and kept
    (owner-only) in ``data_dir``, as the digest's key is."""
    if controller_id is None:
        controller_id = _owner_secret(
            data_dir / "controller-id", lambda: f"controller-{secrets.token_hex(8)}"
        )
    if not 1 <= len(controller_id.encode()) <= MAX_CONTROLLER_ID:
        raise ValueError(f"a controller id is 1 to {MAX_CONTROLLER_ID} bytes of UTF-8")
    key = bytes.fromhex(_owner_secret(data_dir / "dataset-digest-key", lambda: secrets.token_hex(32)))
    if len(key) != 32:
        raise ValueError(f"{data_dir / 'dataset-digest-key'}: not a 32-byte key in hex")
    plain, keyed = hashlib.sha256(), hmac.new(key, digestmod=hashlib.sha256)
    with data_path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            plain.update(block)
            keyed.update(block)
    rules_digest = hashlib.sha256(canonical_json(dataclasses.asdict(rules))).digest()
    return ControllerIdentity(controller_id, keyed.digest(), rules_digest, plain.digest())


def _owner_secret(path: Path, make) -> str:
    """The text kept in ``path``: written owner-only (0600, never through a symbolic link) from
    ``make()`` on first use."""
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(f"{make()}\n")
    return path.read_text().strip()


def load_analysts(path: Path) -> dict[bytes, str]:
    """Raw Ed25519 public keys of the allow-list, each with its person (``flags``): a directory of
    ``*.pem`` files, one per person named by the file's stem, or one file whose blocks may each follow
    a ``# person: NAME`` line. Every block must be a valid key (small-order and non-canonical keys
    are refused by ``load_public_key``); a key listed for two persons is an error."""
    files = sorted(path.glob("*.pem")) if path.is_dir() else [path]
    keys: dict[bytes, str] = {}
    for file in files:
        text = file.read_bytes()
        blocks = list(_PEM_BLOCK.finditer(text))
        if not blocks:
            raise ValueError(f"{file}: no PEM public key")
        start = 0
        for block in blocks:
            labels = _PERSON_LABEL.findall(text[start : block.start()])
            person = check_person_id(labels[-1].decode().strip() if labels else file.stem)
            key = public_key_bytes(load_public_key(block.group(0)))
            if keys.setdefault(key, person) != person:
                raise ValueError(f"{file}: a key is listed for two persons, {keys[key]!r} and {person!r}")
            start = block.end()
    if not keys:
        raise ValueError(f"{path}: the analyst allow-list is empty")
    return keys


def load_rules(path: Path | None) -> Rules:
    if path is None:
        return Rules()
    try:
        table = tomllib.loads(path.read_text()).get("rules", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the rules file {path}: {exc}") from None
    known = {f.name: f.type for f in dataclasses.fields(Rules)}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown rules {unknown}; known: {sorted(known)}")
    if "quantile_probabilities" in table:
        table["quantile_probabilities"] = tuple(float(p) for p in table["quantile_probabilities"])
        if not all(0 < p < 1 for p in table["quantile_probabilities"]):
            raise ValueError(f"{path}: quantile probabilities must lie strictly inside (0, 1)")
    return Rules(**table)


def check_identity_gate(analysts: Path | None, authority_key: Path | None, open_analysis: bool) -> None:
    if analysts is None and authority_key is None and not open_analysis:
        raise ValueError(
            "serving analysis data needs registered analysts: --analysts FILE|DIR (an allow-list of "
            "public keys) or --authority-key PEM (certified keys), or --open-analysis for a local demo"
        )
