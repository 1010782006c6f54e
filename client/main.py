"""``petlab-client``: classify records with a data owner's model without revealing them.

petlab-client classify --server HOST:PORT --model iris --features 5.1,3.5,1.4,0.2
petlab-client classify --server HOST:PORT --model iris --csv rows.csv --stats
petlab-client paillier-classify ...   (the interactive, leaky baseline, for comparison)
petlab-client models --server HOST:PORT
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from petlab.addresses import DEFAULT_SERVER, with_default_port
from petlab.client.key_cache import default_cache_dir
from petlab.errors import BadInput, PetlabError, reading_input
from petlab.exit_status import run_program
from petlab.subcommands import add_commands, guarded, new_parser, quiet_dependency_warnings
from petlab.terminal_text import shown

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from petlab.client.call_stats import CallStats
    from petlab.client.knn_client import KnnRemote
    from petlab.protos import knn_pb2

# numpy, pandas, grpc and the protos are imported where used: --help and a usage error stay fast.


class UserError(BadInput):
    """A mistake in what the user asked for: one line on stderr and exit status 2."""


@dataclass(frozen=True)
class Records:
    """What the user asked to classify, read before any call: one record's values (``--features``)
    or a CSV's table (``--csv``); matched against the model's features once it is known."""

    features: list[float] | None = None
    frame: pd.DataFrame | None = None
    source: str = ""


def parse_features(text: str) -> list[float]:
    """``--features``'s comma-separated values as numbers; ``UserError`` naming the first value
    that is not a finite number."""
    values = []
    for position, part in enumerate(text.split(","), start=1):
        try:
            value = float(part)
        except ValueError:
            value = float("nan")
        if not math.isfinite(value):
            raise UserError(
                f"--features: value {position}, {part.strip()!r}, is not a finite number "
                "(give the record's values as comma-separated numbers, e.g. 5.1,3.5,1.4,0.2)"
            )
        values.append(value)
    return values


def read_records(args) -> Records:
    """The records of ``--features`` or ``--csv``, checked as far as they can be without the
    model: every value a number, the CSV readable (``UserError`` naming the value or file)."""
    if args.features is not None:
        return Records(features=parse_features(args.features), source="--features")
    import pandas as pd

    with reading_input("--csv"):  # missing, unreadable, empty or malformed: bad input
        frame = pd.read_csv(args.csv)
    return Records(frame=frame, source=str(args.csv))


def read_rows(args, info: knn_pb2.ModelInfo, records: Records | None = None) -> np.ndarray:
    """``records`` (read from ``args`` when not given) as the model's feature rows."""
    import numpy as np

    records = records or read_records(args)
    if records.features is not None:
        row = records.features
        if len(row) != info.d:
            raise UserError(
                f"--features: model {info.name} takes {info.d} finite features "
                f"({', '.join(info.feature_names)}), got {len(row)}"
            )
        return within_bounds(np.array([row]), info, args.allow_outside_bounds)
    frame = records.frame
    assert frame is not None
    names = list(info.feature_names)
    if all(name in frame.columns for name in names):
        frame = frame[names]
    else:
        frame = frame.select_dtypes("number").iloc[:, : info.d]
    if frame.shape[1] != info.d or frame.isna().any().any() or not np.isfinite(frame.to_numpy(float)).all():
        raise UserError(
            f"{records.source}: need {info.d} numeric feature columns without gaps "
            f"(named {', '.join(names)}, or the first {info.d} numeric columns)"
        )
    return within_bounds(frame.to_numpy(dtype=float), info, args.allow_outside_bounds)


def within_bounds(rows: np.ndarray, info: knn_pb2.ModelInfo, allow: bool) -> np.ndarray:
    """``rows``, refused (``UserError``) when a value lies outside the model's public feature range
    (the quantizer maps it to the range's end: the row classified would not be the row given),
    unless ``allow``, then a warning on stderr. The range is public (the server's ``ModelInfo``)."""
    import numpy as np

    if not len(info.feature_lows) == len(info.feature_highs) == rows.shape[1]:
        return rows  # a server that publishes no range: nothing to check against
    low, high = np.array(info.feature_lows), np.array(info.feature_highs)
    outside = (rows < low) | (rows > high)
    if not outside.any():
        return rows
    row, column = (int(i) for i in np.argwhere(outside)[0])
    where = f"row {row + 1}: " if len(rows) > 1 else ""
    message = (
        f"{where}{info.feature_names[column]} = {rows[row, column]:g} lies outside model {info.name}'s "
        f"public range [{low[column]:g}, {high[column]:g}] ({int(outside.any(axis=1).sum())} row(s) "
        "affected); it would be clipped to the range"
    )
    if not allow:
        raise UserError(message + ": check the value, or pass --allow-outside-bounds")
    print(f"petlab-client: warning: {message}", file=sys.stderr)
    return rows


def print_stats(stats: list[CallStats], header: str) -> None:
    print(f"# {header}", file=sys.stderr)
    print(f"# {'call':<14} {'latency s':>10} {'bytes sent':>12} {'bytes received':>15}", file=sys.stderr)
    for s in stats:
        print(
            f"# {s.method:<14} {s.seconds:>10.3f} {s.bytes_sent:>12} {s.bytes_received:>15}", file=sys.stderr
        )


def _model_info(remote: KnnRemote, name: str) -> knn_pb2.ModelInfo:
    info = next((m for m in remote.models() if m.name == name), None)
    if info is None:
        names = ", ".join(m.name for m in remote.models())
        raise UserError(f"the server hosts no model named {name!r} (it hosts: {names})")
    return info


def build_parser() -> argparse.ArgumentParser:
    """``petlab-client``'s parser (also read by ``petlab.cli_reference``)."""
    parser = new_parser("petlab-client", __doc__)
    commands = add_commands(parser)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        type=with_default_port,
        default=DEFAULT_SERVER,
        help="HOST:PORT of the data owner's server (a HOST alone means port 50051)",
    )
    common.add_argument("--timeout", type=float, default=600.0, help="per-call deadline, seconds")
    common.add_argument("--tls-ca", type=Path, help="CA certificate to verify the server (enables TLS)")
    common.add_argument("--tls-cert", type=Path, help="client certificate, for mutual TLS")
    common.add_argument("--tls-key", type=Path, help="client private key, for mutual TLS")
    common.add_argument(
        "--token",
        default=os.environ.get("PETLAB_TOKEN") or None,
        help="bearer token for a server that identifies callers; prefer the variable, which other "
        "local users cannot read from the process list [env PETLAB_TOKEN]",
    )
    common.add_argument(
        "--insecure-token",
        action="store_true",
        help="send the bearer token even over a plaintext channel to a non-loopback server: anyone "
        "on the path can read it and act as you (without this, a token goes only over TLS or to "
        "a loopback address)",
    )
    commands.add_parser("models", parents=[common], help="list the server's models")
    for name, text in (
        ("classify", "encrypted k-NN: the server sees neither the record nor its class"),
        ("paillier-classify", "interactive Paillier baseline (leaks distances and neighbours)"),
    ):
        command = commands.add_parser(name, parents=[common], help=text)
        command.add_argument("--model", required=True, help="the model's name (see the models command)")
        rows = command.add_mutually_exclusive_group(required=True)
        rows.add_argument("--features", help="comma-separated feature values of one record")
        rows.add_argument("--csv", type=Path, help="a CSV of records, one class printed per row")
        command.add_argument("--stats", action="store_true", help="print latency and bytes per call")
        command.add_argument("--stats-json", type=Path, help="write per-call latency and bytes as JSON")
        command.add_argument(
            "--allow-outside-bounds",
            action="store_true",
            help="classify a value outside the model's public feature range (clipped to it, with a "
            "warning) instead of refusing it",
        )
        command.add_argument(
            "--cache-dir",
            type=Path,
            default=default_cache_dir(),
            help="key cache directory [env PETLAB_CLIENT_CACHE]",
        )
        command.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded("petlab-client", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    quiet_dependency_warnings()  # before concrete-python is imported (by the k-NN client)
    from petlab.client.channel import make_channel, unavailable

    records = read_records(args) if args.command != "models" else None  # before any call
    with reading_input():  # a malformed or exposed token
        channel = make_channel(
            args.server, args.tls_ca, args.tls_cert, args.tls_key, args.token, args.insecure_token
        )
    try:
        return run(args, channel, records)
    except PetlabError:
        raise  # told by guarded(), with its status
    except ValueError as exc:  # a server answer that fails validation (specs digest, quantizer)
        print(f"petlab-client: error: refusing the server's answer: {shown(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:
        replacement = unavailable(exc, args.server)  # no server there: say where, and what to do
        if replacement is None:
            raise
        raise replacement from exc
    finally:
        channel.close()


def _list_models(channel, timeout: float) -> int:
    """``petlab-client models``: each hosted model's public description and answer guarantee."""
    from petlab.client.knn_client import answer_guarantee
    from petlab.protos import knn_pb2, knn_pb2_grpc

    models = knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=timeout)
    for info in models.models:
        print(
            shown(
                f"{info.name}: {info.algorithm or 'paper'} algorithm, d={info.d}, {info.bits} bits, "
                f"classes {', '.join(info.class_names)}; {answer_guarantee(info)}"
            )
        )
    return 0


def run(args, channel, records: Records | None = None) -> int:
    from petlab.client.knn_client import KnnRemote, answer_guarantee, checked_class
    from petlab.client.paillier_client import cached_keypair, paillier_classify
    from petlab.progress import bar

    if args.command == "models":
        return _list_models(channel, args.timeout)
    remote = KnnRemote(channel, args.server, args.cache_dir, args.timeout, not args.quiet)
    info = _model_info(remote, args.model)
    rows = read_rows(args, info, records)  # every input checked before keys are made or uploaded
    if args.command == "classify":
        prepared = remote.prepare(args.model)
        if len(rows) == 1:
            classes = [remote.classify(prepared, rows[0])]
        else:
            classes = remote.classify_batch(prepared, rows)
        stats_header = f"encrypted k-NN; keygen {prepared.keygen_seconds:.1f} s (0 if cached)"
    else:
        keypair, keygen_seconds = cached_keypair(remote.key_directory(), remote.say)
        stats_header = f"Paillier baseline; keygen {keygen_seconds:.1f} s (0 if cached)"
        prepared = None
        classes = []
        quiet = args.quiet or len(rows) == 1
        with bar(total=len(rows), desc="classifying", unit="row", disable=quiet) as done:
            for row in rows:
                answer = paillier_classify(channel, info, row, keypair, remote.stats, args.timeout)
                classes.append(checked_class(answer, info))
                done.update()
    names = (prepared.info if prepared else info).class_names
    for cls in classes:
        print(shown(names[cls]))
    if prepared is not None:  # the encrypted answers' bound (the Paillier baseline computes in the clear)
        print(f"petlab-client: {answer_guarantee(prepared.info)}", file=sys.stderr)
    if args.stats:
        print_stats(remote.stats, stats_header)
    if args.stats_json:
        key_bytes = len(prepared.client.evaluation_keys_bytes()) if prepared else 0
        args.stats_json.write_text(
            json.dumps(
                {
                    "protocol": args.command,
                    "rows": len(rows),
                    "classes": [names[c] for c in classes],
                    "evaluation_key_bytes": key_bytes,
                    "calls": [asdict(s) for s in remote.stats],
                },
                indent=2,
            )
        )
    return 0


def program() -> NoReturn:
    """The console script: :func:`main`, its exit status kept after concrete's runtime has run
    (``petlab.exit_status``)."""
    run_program(main)


if __name__ == "__main__":
    program()
