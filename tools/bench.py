"""Side-by-side decode benchmark; a thin wrapper around `yggc bench` (the harness is yggc/bench/).

    python tools/bench.py [-m VERIFIER -md DRAFTER] [--prompts 4] [-n 128] [--repeats 3] [--rows ...]

See `yggc bench --help` for every flag.
"""
from __future__ import annotations

import sys

from yggc.cli.bench import script_main

if __name__ == "__main__":
    sys.exit(script_main())
