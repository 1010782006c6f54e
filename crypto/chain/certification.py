"""The certification authority's step (Domingo-Ferrer, PSD 2022, Section 4.2): read a sealed
sequence document as a controller would (:func:`committed_specs`: the specs its traces really
commit to), check them against the authority's policy (allowed analysis types, forbidden columns,
maximum length) and co-sign T_0 together with the analyst's key and the scope (the controller's id,
its data set's keyed digest, its rules' SHA-256, an expiry and the person the key belongs to;
:class:`~petlab.crypto.chain.traces.CertificationScope`). ``petlab-analyst certify`` runs it.
"""

from __future__ import annotations

import json
import time
from importlib import resources

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from petlab.crypto.chain.instructions import InvalidInstruction
from petlab.crypto.chain.traces import (
    CertificationScope,
    ChainState,
    authority_message,
    load_public_key,
    next_analysis,
    verify_seal,
)

DOCUMENT_VERSION = 3  # instruction format 2 (16-byte salts); co-signatures scoped to a person


def analysis_types() -> list[str]:
    """Every analysis type of ``protos/analysis.schema.json``: what a policy allows by default."""
    schema = json.loads(resources.files("petlab.protos").joinpath("analysis.schema.json").read_text())
    return list(schema["properties"]["type"]["enum"])


def check_version(document: dict) -> None:
    if document.get("version") != DOCUMENT_VERSION:
        raise ValueError(
            f"the sequence file is version {document.get('version')}; this petlab-analyst reads version "
            f"{DOCUMENT_VERSION}: prepare the sequence again"
        )


def committed_specs(document: dict) -> list[dict]:
    """Walk the whole chain as a controller would: the specs the traces really commit to."""
    check_version(document)
    traces = [bytes.fromhex(t) for t in document["traces"]]
    verify_seal(
        traces[0],
        load_public_key(document["analyst_public_key"].encode()),
        bytes.fromhex(document["analyst_signature"]),
    )
    revealed = {p: s.encode() for p, s in document["specs"].items()}
    state, specs = ChainState(traces[0]), []
    for trace in traces[1:]:
        state, spec = next_analysis(state, trace, revealed)
        specs.append(json.loads(spec))
    if not state.finished:
        raise InvalidInstruction("the traces do not end with a last instruction")
    return specs


def certify(
    document: dict,
    policy: dict,
    authority: Ed25519PrivateKey,
    controller: dict,
    valid_seconds: float = 30 * 86400,
    now: float | None = None,
    *,
    person: str,
) -> dict:
    """The certification authority's check and co-signature (Section 4.2), for the controller
    ``controller`` (``describe``'s output), ``valid_seconds`` from ``now``, and the ``person``
    whose key signed the sequence (the authority has checked who holds it)."""
    if valid_seconds <= 0:
        raise ValueError("the certification's validity must be positive")
    scope = CertificationScope.from_json(
        {
            **controller,
            "expires": int((time.time() if now is None else now) + valid_seconds),
            "person_id": person,
        }
    )
    specs = committed_specs(document)
    allowed = set(policy["allowed_types"] if "allowed_types" in policy else analysis_types())
    forbidden = set(policy.get("forbidden_columns", []))
    limit = int(policy.get("max_analyses", 1000))
    problems = []
    if len(specs) > limit:
        problems.append(f"{len(specs)} analyses, more than the policy's {limit}")
    for number, spec in enumerate(specs, start=1):
        if spec["type"] not in allowed:
            problems.append(f"analysis {number} is a {spec['type']}, which the policy does not allow")
        used = {spec[k] for k in ("rows", "columns", "value", "column", "outcome") if spec.get(k) is not None}
        used |= set(spec.get("predictors", [])) | set(spec.get("where", {}))
        if used & forbidden:
            problems.append(f"analysis {number} uses forbidden column(s) {sorted(used & forbidden)}")
    if problems:
        raise ValueError("the sequence does not comply with the policy: " + "; ".join(problems))
    analyst = load_public_key(document["analyst_public_key"].encode())
    signature = authority.sign(authority_message(bytes.fromhex(document["traces"][0]), analyst, scope))
    return {**document, "authority_signature": signature.hex(), "certification": scope.to_json()}
