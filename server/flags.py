"""Every flag of ``petlab-server serve``, in one argument group per room (``--help`` shows them
apart). Each room states its own flags and their defaults beside its options type
(``server.common.options``, ``server.knn.options``, ``server.controller.options``,
``server.paillier.options``); this module only places them in the groups and composes the parsed
flags into ``ServerOptions`` (:func:`serve_options`). Each flag's default comes from
``$PETLAB_<FLAG>`` (``server.common.environment``)."""

from __future__ import annotations

import argparse

from petlab.server.app import ServerOptions
from petlab.server.common import options as common
from petlab.server.controller import options as controller
from petlab.server.knn import options as knn
from petlab.server.paillier import options as paillier


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Every ``serve`` flag, in one argument group per room (``--help`` shows them apart)."""
    common.add_server_arguments(parser.add_argument_group("server: address, TLS, threads and time limits"))
    models = parser.add_argument_group("encrypted k-NN models")
    knn.add_arguments(models)
    paillier.add_arguments(models)  # served over the k-NN models' training points
    knn.add_placement_arguments(models)
    controller.add_arguments(parser.add_argument_group("analysis controller"))
    callers = parser.add_argument_group("callers: bearer tokens and per-owner quotas")
    common.add_caller_arguments(callers)
    knn.add_owner_arguments(callers)


def serve_options(args: argparse.Namespace) -> ServerOptions:
    """``ServerOptions`` from parsed flags; ``ValueError`` for a bad combination."""
    return ServerOptions(
        data_dir=args.data_dir,
        common=common.CommonOptions.from_args(args),
        knn=knn.KnnOptions.from_args(args),
        controller=controller.ControllerOptions.from_args(args),
        paillier=paillier.PaillierOptions.from_args(args),
    )
