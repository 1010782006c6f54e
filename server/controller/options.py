"""The analysis controller room's options, their flags and their defaults, in one place.

How a data owner serves binding analysis sequences from the command line: who may analyse, and
with which output-checking rules.

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
  :class:`~petlab.server.controller.output_checking.Rules` (defaults: acro's ``default.yaml`` values
  plus the stricter quantile and regression rules).
* ``--analysis-cooldown-seconds``, ``--analysis-refusal-budget``, ``--analysis-quota-per-day``:
  the person's policy (``people.PersonPolicy``, whose defaults they take): no analysis for that
  long after a refusal; after that many refusals the person is suspended until the data owner
  lifts it (``petlab-server persons lift PERSON``); analyses per person per rolling 24 hours.
* ``--analysis-audit-seconds``: the longest one audit may hold the shared history lock
  (``server/controller/audit_clock.py``).
* ``--controller-id``: the name a certification authority's co-signature is bound to (with the
  data set's keyed digest, the rules' SHA-256 and an expiry; ``crypto.chain.traces.CertificationScope``).
  Default: a random id made once and kept in the data directory.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from petlab.server.common.environment import add_env_option, add_env_switch
from petlab.server.controller.configuration import check_identity_gate
from petlab.server.controller.people import PersonPolicy
from petlab.server.controller.service import AUDIT_SECONDS


@dataclass(frozen=True)
class ControllerOptions:
    analysis_data: Path | None = None  # None: no controller is served
    analysis_domain: Path | None = None
    authority_key: Path | None = None
    analysts: Path | None = None
    open_analysis: bool = False
    rules: Path | None = None
    analysis_cooldown_seconds: float = PersonPolicy.cooldown_seconds
    analysis_refusal_budget: int = PersonPolicy.refusal_budget
    analysis_quota_per_day: int = PersonPolicy.analyses_per_day
    analysis_audit_seconds: float = AUDIT_SECONDS
    controller_id: str | None = None

    def check(self) -> None:
        """Refuse analysis data with no gate on who may analyse (``ValueError``)."""
        if self.analysis_data:
            check_identity_gate(self.analysts, self.authority_key, self.open_analysis)

    def policy(self) -> PersonPolicy:
        return PersonPolicy(
            self.analysis_refusal_budget, self.analysis_cooldown_seconds, self.analysis_quota_per_day
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ControllerOptions:
        return cls(
            analysis_data=args.analysis_data,
            analysis_domain=args.analysis_domain,
            authority_key=args.authority_key,
            analysts=args.analysts,
            open_analysis=args.open_analysis,
            rules=args.rules,
            analysis_cooldown_seconds=args.analysis_cooldown_seconds,
            analysis_refusal_budget=args.analysis_refusal_budget,
            analysis_quota_per_day=args.analysis_quota_per_day,
            analysis_audit_seconds=args.analysis_audit_seconds,
            controller_id=args.controller_id,
        )


def add_arguments(group: argparse._ActionsContainer) -> None:
    """The controller's flags (module docstring), defaults from :class:`ControllerOptions`."""
    default = ControllerOptions()
    _add_access_arguments(group, default)
    _add_policy_arguments(group, default)
    add_env_option(
        group,
        "--controller-id",
        str,
        default.controller_id,
        "the name certification authorities bind co-signatures to (default: a random id kept in "
        "the data directory)",
    )


def _add_access_arguments(group: argparse._ActionsContainer, default: ControllerOptions) -> None:
    """The data, its public domain, who may analyse it and the output-checking rules."""
    add_env_option(
        group,
        "--analysis-data",
        Path,
        default.analysis_data,
        "CSV of confidential records for analysis sequences",
    )
    add_env_option(
        group,
        "--analysis-domain",
        Path,
        default.analysis_domain,
        "public attribute domain of the analysis data (CSV: a column's name, then its values, per line)",
    )
    add_env_option(
        group,
        "--analysts",
        Path,
        default.analysts,
        "allow-list: PEM public keys (a file or a directory of *.pem)",
    )
    add_env_option(
        group, "--authority-key", Path, default.authority_key, "certification authority's public key (PEM)"
    )
    add_env_switch(group, "--open-analysis", "let any key analyse (local demos only)")
    add_env_option(group, "--rules", Path, default.rules, "output-checking rules (TOML, a [rules] table)")


def _add_policy_arguments(group: argparse._ActionsContainer, default: ControllerOptions) -> None:
    """What each person may do (``people.PersonPolicy``) and how long one audit may take."""
    add_env_option(
        group,
        "--analysis-cooldown-seconds",
        float,
        default.analysis_cooldown_seconds,
        "no analysis for a person this long after one of theirs was withheld",
    )
    add_env_option(
        group,
        "--analysis-refusal-budget",
        int,
        default.analysis_refusal_budget,
        "withheld analyses after which a person is suspended until `petlab-server persons lift`",
    )
    add_env_option(
        group,
        "--analysis-quota-per-day",
        int,
        default.analysis_quota_per_day,
        "analyses per person per rolling 24 hours",
    )
    add_env_option(
        group,
        "--analysis-audit-seconds",
        float,
        default.analysis_audit_seconds,
        "the longest one analysis's audit may hold the history lock; past it the step is answered "
        "UNAVAILABLE with a retry hint and nothing is recorded",
    )
