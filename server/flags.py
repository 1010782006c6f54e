"""Every flag of ``petlab-server serve``, in one argument group per room (``--help`` shows them
apart): the server as a whole (address, TLS, threads and time limits), the encrypted k-NN models,
the analysis controller, and the callers (bearer tokens and per-owner quotas). Each flag's default
comes from ``$PETLAB_<FLAG>`` (``server.common.environment``). :func:`serve_options` composes the
parsed flags into ``ServerOptions``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from petlab.crypto.knn.config import check_rounding
from petlab.crypto.knn.families import ALGORITHMS, DEFAULT_ALGORITHM
from petlab.crypto.knn.model import KnnSettings, check_error_budget
from petlab.crypto.knn.thermo.plan import DistanceChoice
from petlab.dask_cluster import add_cluster_arguments, spec_from_args
from petlab.server.app import ServerOptions
from petlab.server.common.admission import ServiceLimits
from petlab.server.common.environment import add_env_option, add_env_switch, env
from petlab.server.common.transport import ConnectionLimits
from petlab.server.knn.datasets import BUNDLED


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Every ``serve`` flag, in one argument group per room (``--help`` shows them apart)."""
    serve = parser.add_argument_group("server: address, TLS, threads and time limits")
    add_env_option(serve, "--host", str, "127.0.0.1", "address to listen on")
    add_env_option(serve, "--port", int, 50051, "port; 0 picks a free one")
    add_env_option(serve, "--port-file", Path, None, "write the bound port here once serving")
    add_env_option(
        serve,
        "--data-dir",
        Path,
        Path("petlab-data"),
        "compiled models, registered keys, controller sessions",
    )
    add_env_option(
        serve,
        "--workers",
        int,
        4,
        "threads for the k-NN room's work (evaluations, key checks and storage) and the Paillier "
        "baseline; a call waiting on its peer holds none",
    )
    add_env_option(serve, "--tls-cert", Path, None, "the server's certificate (PEM), with --tls-key")
    add_env_option(serve, "--tls-key", Path, None, "the server's private key (PEM)")
    add_env_option(
        serve, "--tls-client-ca", Path, None, "require client certificates signed by this CA (mutual TLS)"
    )
    add_env_switch(serve, "--allow-insecure", "plaintext on a non-loopback address")
    add_env_option(serve, "--controller-threads", int, 2, "threads for the analysis controller's decisions")
    add_env_option(
        serve,
        "--call-seconds",
        float,
        900.0,
        "server-side time limit of every call, health watches included; a call still running is "
        "cancelled (it must cover the slowest key upload you accept)",
    )
    add_env_option(
        serve,
        "--send-seconds",
        float,
        5.0,
        "a health watcher that has not taken one status this long is dropped",
    )
    add_env_option(
        serve,
        "--max-streams-per-connection",
        int,
        100,
        "concurrent calls on one connection, advertised to peers (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)",
    )
    add_env_option(
        serve,
        "--max-connections",
        int,
        4096,
        "connections held at once; more are closed as they arrive (lowered to fit the descriptor limit)",
    )
    add_env_option(
        serve,
        "--handshake-seconds",
        float,
        10.0,
        "a connection that has not finished its TLS/HTTP/2 handshake this long is closed",
    )
    add_env_option(
        serve,
        "--connection-idle-seconds",
        float,
        300.0,
        "a connection with no call this long is closed (GOAWAY)",
    )
    add_env_option(
        serve,
        "--connection-age-seconds",
        float,
        3600.0,
        "connections are renewed after this long (GOAWAY; calls in flight get --call-seconds to end)",
    )
    add_env_option(serve, "--grace", float, 30.0, "seconds to drain in-flight calls on shutdown")
    add_knn_arguments(parser.add_argument_group("encrypted k-NN models"))
    add_analysis_arguments(parser.add_argument_group("analysis controller"))
    add_identity_arguments(parser.add_argument_group("callers: bearer tokens and per-owner quotas"))


def serve_options(args: argparse.Namespace) -> ServerOptions:
    """``ServerOptions`` from parsed flags; ``ValueError`` for a bad combination."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    server: dict[str, Any] = {
        "data_dir": args.data_dir,
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_ca": args.tls_client_ca,
        "allow_insecure": args.allow_insecure,
        "controller_threads": args.controller_threads,
        "call_seconds": args.call_seconds,
        "send_seconds": args.send_seconds,
        "connections": ConnectionLimits(
            streams_per_connection=args.max_streams_per_connection,
            connections=args.max_connections,
            handshake_seconds=args.handshake_seconds,
            idle_seconds=args.connection_idle_seconds,
            age_seconds=args.connection_age_seconds,
        ),
    }
    return ServerOptions(**server, **knn_options(args), **analysis_options(args), **caller_options(args))


def add_knn_arguments(serve: argparse._ActionsContainer) -> None:
    """The encrypted k-NN room: which models, the circuit settings, the key store's caps, admission
    slots and where evaluations run (``--cluster`` / ``--local-workers``, ``--partitions``)."""
    serve.add_argument(
        "--model",
        action="append",
        default=None,
        help=f"a model to host: {', '.join(BUNDLED)}, or NAME=FILE.csv; repeatable "
        "[env PETLAB_MODEL, comma-separated]",
    )
    add_env_option(serve, "--label-column", str, "label", "the label column of CSV models")
    serve.add_argument(
        "--bounds",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="public per-feature ranges of model NAME (CSV: feature,low,high); required for CSV models; "
        "repeatable [env PETLAB_BOUNDS, comma-separated]",
    )
    add_env_option(
        serve, "--n", _points, 40, "training points kept per model ('all': the whole training set)"
    )
    add_env_option(serve, "--k", int, 3, "neighbours")
    add_env_option(serve, "--bits", int, 4, "bits per quantized feature")
    serve.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=env("ALGORITHM", DEFAULT_ALGORITHM),
        help="encrypted k-NN circuit family [env PETLAB_ALGORITHM]",
    )
    add_env_option(
        serve,
        "--distance",
        str,
        "",
        "thermo family: the distance SCALE,CAP[,LOOKUP_BITS] (crypto.knn.thermo.plan.DistanceChoice; "
        "default: from d and bits)",
    )
    add_env_option(
        serve,
        "--global-p-error",
        _error_budget,
        None,
        "error budget: the probability, strictly between 0 and 1, that an encrypted answer may differ "
        "from the clear k-NN answer (concrete's global_p_error; published to clients; default: the "
        "family's, 1e-4 for thermo)",
    )
    add_env_option(
        serve,
        "--rounding",
        _rounding,
        "exact",
        "thermo family: how distances' low bits are dropped, exact or approximate (concrete's "
        "approximate rounding: faster, but a distance may land one step off, outside the error budget; "
        "published to clients; one circuit only, no --partitions)",
    )
    add_env_option(serve, "--key-idle-hours", float, 24.0, "registered keys unused this long expire")
    add_env_option(
        serve,
        "--key-memory-mb",
        float,
        1024.0,
        "evaluation key sets kept deserialised in memory, MiB at their stored size (40 MiB for an "
        "Iris key set): room for the callers being served",
    )
    add_env_option(
        serve,
        "--key-cap-mb",
        float,
        None,
        "all stored keys together, MiB (default: --key-owners x --owner-max-keys x the largest "
        "model's key set)",
    )
    add_env_option(
        serve,
        "--key-owners",
        int,
        16,
        "owners the default key caps make room for, each with --owner-max-keys key sets",
    )
    add_env_option(
        serve,
        "--upload-slots",
        int,
        2,
        "concurrent key uploads; more are refused at once (RESOURCE_EXHAUSTED)",
    )
    add_env_option(
        serve,
        "--evaluation-slots",
        int,
        3,
        "evaluations admitted at once, one query at a time, shared fairly between callers (at most "
        "--workers)",
    )
    add_env_option(
        serve,
        "--evaluation-waiting",
        int,
        32,
        "callers under their fair share that may wait for an evaluation slot (a waiting call holds "
        "no thread; 0: such callers are refused at once)",
    )
    add_env_option(
        serve,
        "--evaluation-wait-seconds",
        float,
        30.0,
        "longest wait for an evaluation slot; then RESOURCE_EXHAUSTED with a retry hint",
    )
    add_env_option(
        serve, "--upload-first-chunk-seconds", float, 10.0, "an upload with no chunk by then is cancelled"
    )
    add_env_option(
        serve, "--upload-min-kib-per-second", float, 256.0, "slower uploads are cancelled after a 10 s grace"
    )
    add_env_switch(
        serve,
        "--enable-paillier-baseline",
        "also serve the interactive Paillier baseline; it reveals distances and labels, so a caller "
        "can reconstruct the training set (experiments only)",
    )
    add_cluster_arguments(serve)  # --cluster ADDRESS | --local-workers N: evaluations on Dask
    add_env_option(
        serve,
        "--partitions",
        int,
        0,
        "split one query's work over this many partitions of each training set (crypto.knn.split); "
        "0: one per cluster worker with --cluster/--local-workers, else 1 (the whole circuit in process)",
    )


def knn_options(args: argparse.Namespace) -> dict[str, Any]:
    """The k-NN room's fields of ``server.app.ServerOptions``; ``ValueError`` for a bad combination."""
    bounds = {}
    for item in args.bounds or [b for b in str(env("BOUNDS", "")).split(",") if b]:
        name, _, path = item.partition("=")
        if not name or not path:
            raise ValueError(f"--bounds takes NAME=FILE, got {item!r}")
        bounds[name] = Path(path)
    cluster = spec_from_args(args)
    if args.rounding != "exact" and (args.partitions > 1 or cluster.enabled):
        raise ValueError("--rounding approximate runs one whole circuit: drop --partitions and the cluster")
    return {
        "models": args.model or [m for m in str(env("MODEL", "")).split(",") if m],
        "settings": KnnSettings(
            n=args.n,
            k=args.k,
            bits=args.bits,
            algorithm=args.algorithm,
            distance=DistanceChoice.parse(args.distance) if args.distance else None,
            global_p_error=args.global_p_error,
            rounding=args.rounding,
        ),
        "label_column": args.label_column,
        "bounds": bounds,
        "key_idle_seconds": args.key_idle_hours * 3600,
        "key_cap_bytes": None if args.key_cap_mb is None else int(args.key_cap_mb * (1 << 20)),
        "key_owners": args.key_owners,
        "key_memory_bytes": int(args.key_memory_mb * (1 << 20)),
        "enable_paillier_baseline": args.enable_paillier_baseline,
        "cluster": cluster,
        "partitions": args.partitions,
        "limits": ServiceLimits(
            upload_slots=args.upload_slots,
            evaluation_slots=args.evaluation_slots,
            evaluation_waiting=args.evaluation_waiting,
            evaluation_wait_seconds=args.evaluation_wait_seconds,
            first_chunk_seconds=args.upload_first_chunk_seconds,
            min_bytes_per_second=args.upload_min_kib_per_second * 1024,
            owner_upload_slots=args.owner_upload_slots,
            owner_evaluation_slots=args.owner_evaluation_slots,
        ),
    }


class _BadFlagValue(argparse.ArgumentTypeError, ValueError):
    """A flag value argparse reports with this message (a ``ValueError`` for ``$PETLAB_*`` values)."""


def _error_budget(text: str) -> float:
    """``--global-p-error``: a probability strictly between 0 and 1 (``check_error_budget``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # not a number: reported as check_error_budget reports it
    try:
        return check_error_budget(value)
    except ValueError:
        raise _BadFlagValue(
            f"the error budget must be a probability strictly between 0 and 1, got {text!r}"
        ) from None


def _rounding(text: str) -> str:
    """``--rounding``: exact or approximate (``crypto.knn.config.check_rounding``)."""
    try:
        return check_rounding(text)
    except ValueError:
        raise _BadFlagValue(f"rounding is 'exact' or 'approximate', got {text!r}") from None


def _points(text: str) -> int | None:
    """``--n``: a number of training points, or ``all`` (None: the whole training set)."""
    if text == "all":
        return None
    return int(text)  # ValueError: argparse reports an invalid --n value


def add_analysis_arguments(serve: argparse._ActionsContainer) -> None:
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
    * ``--analysis-audit-seconds``: the longest one audit may hold the shared history lock
      (``server/controller/audit_clock.py``).
    * ``--controller-id``: the name a certification authority's co-signature is bound to (with the
      data set's keyed digest, the rules' SHA-256 and an expiry; ``crypto.chain.traces.CertificationScope``).
      Default: a random id made once and kept in the data directory.
    """
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


def add_identity_arguments(serve: argparse._ActionsContainer) -> None:
    """How a data owner names callers and bounds what each may hold, from the command line (issue 15).

    * ``--tokens FILE``: bearer tokens, lines ``owner-name token`` (owner-only file; see
      :mod:`petlab.server.common.callers`). Every k-NN call must then carry a valid token.
    * With ``--tls-client-ca`` (mutual TLS) and no tokens, the client certificate names the owner.
    * ``--owner-cap-mb``, ``--owner-max-keys``: what one identified owner may store (bytes of keys plus
      its uploads in flight; number of key sets). ``--owner-upload-slots``,
      ``--owner-evaluation-slots``: its concurrent uploads and classifications.

    Without tokens or client certificates callers are anonymous and only the store-wide limits apply.
    """
    add_env_option(
        serve,
        "--tokens",
        Path,
        None,
        "bearer tokens, lines 'owner-name token', file mode 600: every k-NN call must carry "
        "'authorization: Bearer <token>'; keys and quotas are per owner",
    )
    add_env_option(
        serve,
        "--owner-cap-mb",
        float,
        None,
        "per identified owner: stored keys plus uploads in flight, MiB (at most --key-cap-mb; "
        "default: --owner-max-keys key sets of the largest model)",
    )
    add_env_option(
        serve, "--owner-max-keys", int, 4, "per identified owner: stored key sets (its oldest make room)"
    )
    add_env_option(serve, "--owner-upload-slots", int, 1, "per identified owner: concurrent key uploads")
    add_env_option(
        serve, "--owner-evaluation-slots", int, 1, "per identified owner: concurrent classifications"
    )


def caller_options(args: argparse.Namespace) -> dict[str, Any]:
    """The caller-identity fields of ``server.app.ServerOptions`` (the per-owner slots go to the
    k-NN room's ``ServiceLimits``)."""
    return {
        "tokens": args.tokens,
        "owner_cap_bytes": None if args.owner_cap_mb is None else int(args.owner_cap_mb * (1 << 20)),
        "owner_max_keys": args.owner_max_keys,
    }
