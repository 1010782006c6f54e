"""``petlab-analyst``: bind yourself to a sequence of analyses and reveal it tit for tat.

    petlab-analyst keygen --out analyst.pem
    petlab-analyst prepare analyses.json --key analyst.pem --out sequence.json
    petlab-analyst describe --server HOST:PORT --out controller.json
    petlab-analyst certify sequence.json --policy policy.json --key authority.pem \
        --controller controller.json --person ID [--valid-days 30]                  (the authority)
    petlab-analyst run sequence.json --server HOST:PORT

Domingo-Ferrer (PSD 2022), Sections 3 and 4.2. ``prepare`` validates every spec against
``protos/analysis.schema.json``, encodes the traces (equation (1)) and signs T_0. The sequence file
holds the analyses not yet revealed, so it is written owner-only. ``certify`` is the certification
authority's step (``crypto.chain.certification``): it checks that the traces commit to exactly the
specs in the file, checks them against a policy and co-signs T_0 with the analyst's key and the
scope (the controller's id, data set digest and rules' SHA-256 that ``describe`` fetches, an expiry
and the person the key belongs to), so the co-signature holds at that controller, on that data,
under those rules, for that person and until then only (the controller counts refusals and quotas
per person: a fresh key is not a fresh start). ``run`` opens a session and reveals one trace at a
time, stopping at the first abort.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from petlab.addresses import DEFAULT_SERVER, with_default_port
from petlab.errors import reading_input
from petlab.exit_status import run_program
from petlab.subcommands import add_commands, guarded, new_parser
from petlab.terminal_text import shown

# grpc, jsonschema, cryptography and the stubs are imported by the steps that use them, so that
# ``petlab-analyst --help`` answers at once
if TYPE_CHECKING:
    import grpc
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from petlab.protos import controller_pb2


@cache
def analysis_schema() -> dict:
    """``protos/analysis.schema.json``: what a spec must be."""
    return json.loads(resources.files("petlab.protos").joinpath("analysis.schema.json").read_text())


def keygen(out: Path) -> Path:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from petlab.crypto.chain.traces import private_key_pem, public_key_pem
    from petlab.owner_only import write_owner_only

    key = Ed25519PrivateKey.generate()
    write_owner_only(out, private_key_pem(key))
    public = out.with_suffix(".pub.pem")
    public.write_bytes(public_key_pem(key.public_key()))
    return public


def load_specs(path: Path) -> list[dict]:
    import jsonschema

    document = json.loads(path.read_text())
    specs = document["analyses"] if isinstance(document, dict) else document
    if not isinstance(specs, list) or not specs:
        raise ValueError(f'{path}: expected a non-empty list of analyses (or {{"analyses": [...]}})')
    validator = jsonschema.Draft202012Validator(analysis_schema())
    for number, spec in enumerate(specs, start=1):
        error = next(iter(sorted(validator.iter_errors(spec), key=lambda e: list(e.path))), None)
        if error is not None:
            where = "/".join(str(p) for p in error.path) or "the spec"
            raise ValueError(f"{path}: analysis {number} is invalid at {where}: {error.message}")
    return specs


def prepare(specs: list[dict], key: Ed25519PrivateKey) -> dict:
    from petlab.crypto.chain.certification import DOCUMENT_VERSION
    from petlab.crypto.chain.instructions import canonical_json
    from petlab.crypto.chain.traces import public_key_pem, seal

    sequence = seal([canonical_json(s) for s in specs], key)
    return {
        "version": DOCUMENT_VERSION,
        "analyst_public_key": public_key_pem(key.public_key()).decode(),
        "analyst_signature": sequence.analyst_signature.hex(),
        "authority_signature": None,
        "certification": None,
        "traces": [t.hex() for t in sequence.traces],
        "pointers": sequence.pointers,
        "specs": {p: s.decode() for p, s in sequence.specs.items()},
    }


def describe(channel: grpc.Channel, timeout: float = 30.0) -> dict:
    """The controller's description, what an authority's co-signature is bound to."""
    from petlab.protos import controller_pb2, controller_pb2_grpc

    reply = controller_pb2_grpc.AnalysisControllerStub(channel).Describe(
        controller_pb2.DescribeRequest(), timeout=timeout
    )
    return {
        "controller_id": reply.controller_id,
        "dataset_sha256": reply.dataset_sha256.hex(),
        "rules_sha256": reply.rules_sha256.hex(),
        "instruction_format": reply.instruction_format,
    }


def open_request(document: dict) -> controller_pb2.OpenSessionRequest:
    """The request that opens a session for a prepared (and perhaps certified) document."""
    from petlab.protos import controller_pb2

    certification = document.get("certification") or {}
    return controller_pb2.OpenSessionRequest(
        first_trace=bytes.fromhex(document["traces"][0]),
        analyst_public_key=document["analyst_public_key"].encode(),
        analyst_signature=bytes.fromhex(document["analyst_signature"]),
        authority_signature=bytes.fromhex(document["authority_signature"] or ""),
        authority_expires=int(certification.get("expires", 0)),
        person_id=str(certification.get("person_id", "")),
    )


def next_request(document: dict, session_id: str, j: int) -> controller_pb2.NextRequest:
    """The request that reveals trace ``j`` (1-based) of ``document`` and its analysis."""
    from petlab.protos import controller_pb2

    pointer = document["pointers"][j - 1]
    return controller_pb2.NextRequest(
        session_id=session_id,
        trace=bytes.fromhex(document["traces"][j]),
        pointer=pointer,
        spec=document["specs"][pointer].encode(),
    )


def run(document: dict, channel: grpc.Channel, timeout: float = 300.0, out=None) -> int:
    """Open a session and reveal the traces one by one; returns 0 if every analysis was released."""
    from petlab.crypto.chain.certification import check_version
    from petlab.protos import controller_pb2_grpc

    out = out or sys.stdout
    check_version(document)
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    opened = stub.OpenSession(open_request(document), timeout=timeout)
    for j in range(1, len(document["traces"])):
        reply = stub.Next(next_request(document, opened.session_id, j), timeout=timeout)
        if reply.WhichOneof("outcome") == "abort_reason":
            print(f"analysis {reply.position}: ABORTED: {shown(reply.abort_reason)}", file=out)
            print("the remaining analyses stay undisclosed", file=out)
            return 3
        print(f"analysis {reply.position}: {shown(reply.result_json)}", file=out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """``petlab-analyst``'s parser (also read by ``petlab.cli_reference``)."""
    parser = new_parser("petlab-analyst", __doc__)
    commands = add_commands(parser)
    c = commands.add_parser("keygen", help="make an Ed25519 key pair (private PEM written 0600)")
    c.add_argument("--out", type=Path, default=Path("analyst.pem"), help="the private key file to write")
    c = commands.add_parser("prepare", help="encode and sign a sequence of analyses")
    c.add_argument("analyses", type=Path, help="a JSON file with the list of analyses")
    c.add_argument("--key", type=Path, required=True, help="the analyst's private key (PEM)")
    c.add_argument("--out", type=Path, default=Path("sequence.json"), help="the sealed sequence to write")
    c = commands.add_parser("certify", help="(certification authority) check a sequence and co-sign T_0")
    c.add_argument("sequence", type=Path, help="the sealed sequence (co-signed in place)")
    c.add_argument("--policy", type=Path, required=True, help="the authority's policy (JSON)")
    c.add_argument("--key", type=Path, required=True, help="the authority's private key")
    c.add_argument(
        "--controller", type=Path, required=True, help="the controller's description (from describe)"
    )
    c.add_argument("--valid-days", type=float, default=30.0, help="how long the co-signature holds")
    c.add_argument("--person", required=True, help="the person the analyst's key belongs to")
    describe_command = commands.add_parser(
        "describe", help="fetch a controller's id and data set and rules digests"
    )
    describe_command.add_argument("--out", type=Path, help="write the description here (default: print it)")
    run_command = commands.add_parser("run", help="open a session and reveal the sequence tit for tat")
    run_command.add_argument(
        "sequence", type=Path, nargs="?", default=Path("sequence.json"), help="the co-signed sequence"
    )
    for c in (describe_command, run_command):
        c.add_argument(
            "--server",
            type=with_default_port,
            default=DEFAULT_SERVER,
            help="HOST:PORT of the data owner's server (a HOST alone means port 50051)",
        )
        c.add_argument("--tls-ca", type=Path, help="CA certificate to verify the server (enables TLS)")
        c.add_argument("--tls-cert", type=Path, help="client certificate, for mutual TLS")
        c.add_argument("--tls-key", type=Path, help="client private key, for mutual TLS")
        c.add_argument(
            "--timeout",
            type=float,
            default=300.0 if c is run_command else 30.0,
            help="per-call deadline, seconds",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded("petlab-analyst", lambda: _run_command(args))


def _read_json(path: Path):
    """A JSON file the user named; malformed JSON is bad input (exit 2), a missing one too."""
    with reading_input(str(path)):
        return json.loads(path.read_text())


@contextlib.contextmanager
def told_where(args: argparse.Namespace) -> Iterator[None]:
    """A call that finds no server at ``--server`` fails with the address and what to do."""
    from petlab.client.channel import unavailable

    try:
        yield
    except Exception as exc:
        replacement = unavailable(exc, args.server)
        if replacement is None:
            raise
        raise replacement from exc


def _run_command(args: argparse.Namespace) -> int:
    from petlab.client.channel import make_channel
    from petlab.crypto.chain.certification import certify, check_version
    from petlab.crypto.chain.traces import load_private_key
    from petlab.owner_only import write_owner_only

    if args.command == "keygen":
        print(f"private key {args.out} (0600), public key {keygen(args.out)}")
    elif args.command == "prepare":
        with reading_input(str(args.analyses)):
            specs = load_specs(args.analyses)
        with reading_input(str(args.key)):
            key = load_private_key(args.key.read_bytes())
        document = prepare(specs, key)
        write_owner_only(args.out, json.dumps(document, indent=2).encode())
        count, first = len(document["pointers"]), document["traces"][0][:16]
        print(f"{count} analyses sealed into {args.out}; T_0 = {first}...")
    elif args.command == "certify":
        sequence, policy, controller = (_read_json(p) for p in (args.sequence, args.policy, args.controller))
        with reading_input(str(args.key)):
            key = load_private_key(args.key.read_bytes())
        with reading_input(str(args.sequence)):
            document = certify(sequence, policy, key, controller, args.valid_days * 86400, person=args.person)
        write_owner_only(args.sequence, json.dumps(document, indent=2).encode())
        expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(document["certification"]["expires"]))
        controller_id = document["certification"]["controller_id"]
        print(f"co-signed {args.sequence} for {args.person} at controller {controller_id}, until {expires}")
    elif args.command == "describe":
        with make_channel(args.server, args.tls_ca, args.tls_cert, args.tls_key) as channel, told_where(args):
            text = json.dumps(describe(channel, args.timeout), indent=2)
        if args.out:
            args.out.write_text(text + "\n")
            print(f"controller description written to {args.out}")
        else:
            print(
                "\n".join(shown(line) for line in text.split("\n"))
            )  # JSON escapes controls; our line breaks stay
    else:
        document = _read_json(args.sequence)
        with reading_input(str(args.sequence)):
            check_version(document)
            open_request(document)  # every field the session needs is checked before it opens
        with make_channel(args.server, args.tls_ca, args.tls_cert, args.tls_key) as channel, told_where(args):
            return run(document, channel, args.timeout)
    return 0


def program() -> NoReturn:
    """The console script: :func:`main`, its exit status kept after concrete's runtime has run
    (``petlab.exit_status``)."""
    run_program(main)


if __name__ == "__main__":
    program()
