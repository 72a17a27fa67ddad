"""Starting the N local ranks of `--tp N` (what torchrun would start), each running the same command."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

Command = Callable[[argparse.Namespace], int]


def in_rank(command: Command, args: argparse.Namespace) -> int:
    from .noise import silence_third_party_noise  # a spawned rank starts with Python's default warning filters

    silence_third_party_noise()
    return command(args)


def launch_ranks(world: int, command: Command, args: argparse.Namespace) -> int:
    """Run `command(args)` on `world` local ranks -> rank 0's exit code."""
    from ..runtime.tp_processes import launch

    return launch(world, partial(in_rank, command, args))
