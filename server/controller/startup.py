"""The analysis controller room at the server's start: its confidential data loaded once, its
public domain, rules, allow-list and identity, and the servicer over them (:func:`build_controller`).
``server.app`` composes the room with the others."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from petlab.crypto.chain.traces import load_public_key
from petlab.server.controller.configuration import controller_identity, load_analysts, load_rules
from petlab.server.controller.options import ControllerOptions
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.service import ControllerServicer
from petlab.server.controller.session_store import SessionStore

log = logging.getLogger("petlab.server")


def build_controller(
    options: ControllerOptions, data: Path, data_dir: Path
) -> tuple[ControllerServicer, SessionStore]:
    """The controller over the records in ``data`` (``--analysis-data``) and its session store,
    kept with its diagnostics under ``data_dir``."""
    analysis_data = load_analysis_data(data)
    rules = load_rules(options.rules)
    sessions = SessionStore(data_dir / "sessions.sqlite")
    servicer = ControllerServicer(
        analysis_data,
        sessions,
        rules,
        authority_key=load_public_key(options.authority_key.read_bytes()) if options.authority_key else None,
        analysts=load_analysts(options.analysts) if options.analysts else None,
        policy=options.policy(),
        identity=controller_identity(data, rules, data_dir, options.controller_id),
        diagnostics=data_dir / "controller-diagnostics.log",
        domain=analysis_domain(options.analysis_domain, analysis_data),
        audit_seconds=options.analysis_audit_seconds,
    )
    return servicer, sessions


def analysis_domain(path: Path | None, data: pd.DataFrame) -> PublicDomain:
    """The public attribute domain (``--analysis-domain``): the file given, else the shipped ACS
    2013 domain when the data has its columns; never one read off the records."""
    domain = PublicDomain.load(path) if path is not None else PublicDomain.shipped_for(data)
    if domain is None:
        raise ValueError(
            "the analysis data needs its public attribute domain: --analysis-domain FILE (one line "
            "per column: its name, then its values)"
        )
    return domain


def load_analysis_data(path: Path) -> pd.DataFrame:
    """The controller's confidential data: a CSV loaded once at start."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the analysis data {path}: {exc}") from exc
    if frame.empty:
        raise ValueError(f"the analysis data {path} has no records")
    # the columns only: the number of records is a figure of the data that the audit never saw
    log.info("controller data: columns %s", ", ".join(frame.columns))
    return frame
