"""How a data owner serves binding analysis sequences from the command line: who may analyse, and
with which output-checking rules (issue 14).

* ``--analysis-data FILE.csv``: the controller's confidential records.
* ``--analysis-domain FILE.csv``: the public attribute domain (``public_domain``; default: the
  shipped ACS 2013 domain when the data has its columns).
* ``--analysts FILE|DIR``: the allow-list, Ed25519 public keys in PEM, each with its person: a
  directory of ``*.pem`` files, one per person (the file's stem is the person), or one file whose
  PEM blocks may each follow a ``# person: NAME`` line (else the file's stem). Refusals, cool-downs
  and quotas are kept per person (``people``), so a fresh key is not a fresh start.
* ``--authority-key PEM``: a certification authority; a key outside the allow-list may analyse with
  the authority's co-signature on its T_0, its key and the person it belongs to.
* ``--open-analysis``: neither, anyone may analyse (local demos only). Without it, the server
  refuses to serve analysis data with neither an allow-list nor an authority.
* ``--rules FILE.toml``: output-checking thresholds under a ``[rules]`` table, the fields of
  :class:`~petlab.server.controller.output_checking.Rules` (defaults: acro's ``default.yaml`` values plus
  the stricter quantile and regression rules).
* ``--analysis-cooldown-seconds``: after a refusal, the person runs no analysis for that long.
* ``--analysis-refusal-budget``: after that many refusals the person is suspended until the data
  owner lifts it (``petlab-server persons lift PERSON``).
* ``--analysis-quota-per-day``: analyses per person per rolling 24 hours.
* ``--controller-id``: the name a certification authority's co-signature is bound to (with the
  data set's keyed digest, the rules' SHA-256 and an expiry; ``crypto.chain.traces.CertificationScope``).
  Default: a random id made once and kept in the data directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from petlab.server.common.environment import add_env_option, add_env_switch


def add_analysis_arguments(serve: argparse._ActionsContainer) -> None:
    add_env_option(serve, "--analysis-data", Path, None, "CSV of confidential records for analysis sequences")
    add_env_option(
        serve,
        "--analysis-domain",
        Path,
        None,
        "public attribute domain of the analysis data (CSV: a column's name, then its values, per line)",
    )
    add_env_option(
        serve, "--analysts", Path, None, "allow-list: PEM public keys (a file or a directory of *.pem)"
    )
    add_env_option(serve, "--authority-key", Path, None, "certification authority's public key (PEM)")
    add_env_switch(serve, "--open-analysis", "let any key analyse (local demos only)")
    add_env_option(serve, "--rules", Path, None, "output-checking rules (TOML, a [rules] table)")
    add_env_option(
        serve,
        "--analysis-cooldown-seconds",
        float,
        3600.0,
        "no analysis for a person this long after one of theirs was withheld",
    )
    add_env_option(
        serve,
        "--analysis-refusal-budget",
        int,
        3,
        "withheld analyses after which a person is suspended until `petlab-server persons lift`",
    )
    add_env_option(serve, "--analysis-quota-per-day", int, 1000, "analyses per person per rolling 24 hours")
    add_env_option(
        serve,
        "--analysis-audit-seconds",
        float,
        2.0,
        "the longest one analysis's audit may hold the history lock; past it the step is answered "
        "UNAVAILABLE with a retry hint and nothing is recorded",
    )
    add_env_option(
        serve,
        "--controller-id",
        str,
        None,
        "the name certification authorities bind co-signatures to (default: a random id kept in "
        "the data directory)",
    )


def analysis_options(args: argparse.Namespace) -> dict[str, Any]:
    """The controller room's fields of ``server.app.ServerOptions``."""
    return {
        "analysis_data": args.analysis_data,
        "analysis_domain": args.analysis_domain,
        "authority_key": args.authority_key,
        "analysts": args.analysts,
        "open_analysis": args.open_analysis,
        "rules": args.rules,
        "analysis_cooldown_seconds": args.analysis_cooldown_seconds,
        "analysis_refusal_budget": args.analysis_refusal_budget,
        "analysis_quota_per_day": args.analysis_quota_per_day,
        "analysis_audit_seconds": args.analysis_audit_seconds,
        "controller_id": args.controller_id,
    }
