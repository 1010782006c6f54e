"""The Paillier baseline room's one option and its flag.

The interactive Paillier baseline answers distances and labels for any query and indices: a
caller can reconstruct the training set from a handful of calls. It is off unless the owner asks
for it, for experiments only.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from petlab.server.common.environment import add_env_switch


@dataclass(frozen=True)
class PaillierOptions:
    enable_paillier_baseline: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PaillierOptions:
        return cls(enable_paillier_baseline=args.enable_paillier_baseline)


def add_arguments(group: argparse._ActionsContainer) -> None:
    add_env_switch(
        group,
        "--enable-paillier-baseline",
        "also serve the interactive Paillier baseline; it reveals distances and labels, so a caller "
        "can reconstruct the training set (experiments only)",
    )
