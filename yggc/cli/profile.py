"""`yggc profile BUNDLE`: a bundle's measured stage latencies and fitted cost curves (the tables are inspect.py's,
the plot profile_plot.py's)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bundle import load_manifest
from ..errors import YggcError
from ..plan.bundle_plan import read_plan
from ..plan.bundle_profile import Profile
from .arg_types import Verbs
from .inspect import print_profile, print_speedups


def add_parser(sub: Verbs) -> None:
    """`yggc profile`: its flags; main runs it."""
    p = sub.add_parser("profile", help="show a bundle's measured stage latencies and cost curves")
    p.add_argument("bundle", help="a bundle written by `yggc compile`")
    p.add_argument("--plot", metavar="OUT.png", help="also draw the measured points and fitted curves")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    """Print the bundle's profile tables and measured speedups (and --plot them) -> the exit code."""
    load_manifest(args.bundle)  # a bundle, not any folder with a profile.json
    profile = Profile.load(args.bundle)
    if not profile:
        raise YggcError(f"{args.bundle} has no profile.json; re-run `yggc compile`")
    print_profile(profile)
    print_speedups(read_plan(args.bundle))
    if args.plot:
        from .profile_plot import plot_profile

        print(f"wrote {plot_profile(profile, Path(args.plot))}", file=sys.stderr)
    return 0
