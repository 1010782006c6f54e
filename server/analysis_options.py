"""How a data owner serves binding analysis sequences from the command line: who may analyse, and
with which output-checking rules (issue 14).

* ``--analysis-data FILE.csv``: the controller's confidential records.
* ``--analysts FILE|DIR``: the allow-list, Ed25519 public keys in PEM (one file holding several
  PEM blocks, or a directory of ``*.pem`` files). History, released query sets and refusals are
  kept per key, so the allow-list is what makes that control mean something: a fresh key per
  question would otherwise start every session with an empty history.
* ``--authority-key PEM``: a certification authority; a key outside the allow-list may analyse with
  the authority's co-signature on its T_0 and key.
* ``--open-analysis``: neither, anyone may analyse (local demos only). Without it, the server
  refuses to serve analysis data with neither an allow-list nor an authority.
* ``--rules FILE.toml``: output-checking thresholds under a ``[rules]`` table, the fields of
  :class:`~petlab.server.output_checking.Rules` (defaults: acro's ``default.yaml`` values plus
  the stricter quantile and regression rules).
* ``--analysis-cooldown-seconds``: after an abort, the identity opens no session for that long.
* ``--controller-id``: the name a certification authority's co-signature is bound to (with the
  data set's and the rules' SHA-256 and an expiry; ``crypto.trace_chain.CertificationScope``).
  Default: a random id made once and kept in the data directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
import secrets
import tomllib
from collections.abc import Callable
from pathlib import Path

from petlab.crypto.instructions import canonical_json
from petlab.crypto.trace_chain import MAX_CONTROLLER_ID, load_public_key, public_key_bytes
from petlab.server.output_checking import Rules

_PEM_BLOCK = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)


def add_analysis_arguments(serve: argparse.ArgumentParser, env: Callable[[str, object], object]) -> None:
    serve.add_argument(
        "--analysis-data",
        type=Path,
        default=env("ANALYSIS_DATA", None),
        help="[PETLAB_ANALYSIS_DATA] CSV of confidential records for analysis sequences",
    )
    serve.add_argument(
        "--analysts",
        type=Path,
        default=env("ANALYSTS", None),
        help="[PETLAB_ANALYSTS] allow-list: PEM public keys (a file or a directory of *.pem)",
    )
    serve.add_argument(
        "--authority-key",
        type=Path,
        default=env("AUTHORITY_KEY", None),
        help="[PETLAB_AUTHORITY_KEY] certification authority's public key (PEM)",
    )
    serve.add_argument(
        "--open-analysis",
        action="store_true",
        default=str(env("OPEN_ANALYSIS", "")).lower() in {"1", "true", "yes"},
        help="[PETLAB_OPEN_ANALYSIS=1] let any key analyse (local demos only)",
    )
    serve.add_argument(
        "--rules",
        type=Path,
        default=env("RULES", None),
        help="[PETLAB_RULES] output-checking rules (TOML, a [rules] table)",
    )
    serve.add_argument(
        "--analysis-cooldown-seconds",
        type=float,
        default=float(str(env("ANALYSIS_COOLDOWN_SECONDS", 3600))),
        help="[PETLAB_ANALYSIS_COOLDOWN_SECONDS] no new session for an identity this long "
        "after one of its analyses was withheld",
    )
    serve.add_argument(
        "--controller-id",
        default=env("CONTROLLER_ID", None),
        help="[PETLAB_CONTROLLER_ID] the name certification authorities bind co-signatures to "
        "(default: a random id kept in the data directory)",
    )


@dataclasses.dataclass(frozen=True)
class ControllerIdentity:
    """What an authority's co-signature names (``petlab-analyst describe`` fetches it)."""

    controller_id: str
    dataset_sha256: bytes
    rules_sha256: bytes


def controller_identity(
    data_path: Path, rules: Rules, data_dir: Path, controller_id: str | None
) -> ControllerIdentity:
    """The digests of the data file's bytes and of the rules' canonical JSON, and the id: the one
    given, or one made at random on first start and kept (owner-only) in ``data_dir``."""
    if controller_id is None:
        stored = data_dir / "controller-id"
        if not stored.exists():
            descriptor = os.open(stored, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(f"controller-{secrets.token_hex(8)}\n")
        controller_id = stored.read_text().strip()
    if not 1 <= len(controller_id.encode()) <= MAX_CONTROLLER_ID:
        raise ValueError(f"a controller id is 1 to {MAX_CONTROLLER_ID} bytes of UTF-8")
    digest = hashlib.sha256()
    with data_path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    rules_digest = hashlib.sha256(canonical_json(dataclasses.asdict(rules))).digest()
    return ControllerIdentity(controller_id, digest.digest(), rules_digest)


def load_analysts(path: Path) -> frozenset[bytes]:
    """Raw Ed25519 public keys of the allow-list (module docstring); every block must be a valid
    key (small-order and non-canonical keys are refused by ``load_public_key``)."""
    files = sorted(path.glob("*.pem")) if path.is_dir() else [path]
    keys = set()
    for file in files:
        blocks = _PEM_BLOCK.findall(file.read_bytes())
        if not blocks:
            raise ValueError(f"{file}: no PEM public key")
        for block in blocks:
            keys.add(public_key_bytes(load_public_key(block)))
    if not keys:
        raise ValueError(f"{path}: the analyst allow-list is empty")
    return frozenset(keys)


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
