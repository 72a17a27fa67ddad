"""`yggc` command line: the top-level parser built from the verb modules, dispatch, and errors as exit codes."""
from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..errors import USER_ERRORS
from . import bench, compile, import_gguf, inspect, profile, pull, run, serve, train
from .noise import silence_third_party_noise

# each verb's module: add_parser(sub) adds `yggc VERB`'s flags and sets args.main, main(args) runs it -> the exit code
VERBS = (run, compile, import_gguf, inspect, profile, bench, serve, pull, train)  # in `yggc --help` order


def build_parser() -> argparse.ArgumentParser:
    """The `yggc` parser: --version and one subcommand per module of VERBS."""
    parser = argparse.ArgumentParser(
        prog="yggc", description="Latency-optimal tree speculative decoding on a static-graph runtime.")
    parser.add_argument("--version", action="version", version=f"yggc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    return parser


def leave_ranks(completed: bool) -> None:
    """Started by torchrun: leave the process group the command joined, at a barrier after a completed one."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from ..runtime.tp_processes import leave

        leave(completed)


def main(argv: list[str] | None = None) -> int:
    silence_third_party_noise()
    args = build_parser().parse_args(argv)
    try:
        code = args.main(args)
        leave_ranks(completed=True)
        return code
    except USER_ERRORS as e:
        print(f"yggc: error: {e}", file=sys.stderr)
        leave_ranks(completed=False)
        return 2
    except KeyboardInterrupt:
        print("yggc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`yggc inspect B | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0

