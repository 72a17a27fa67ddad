"""Side-by-side decode benchmark; a thin wrapper around `yggc bench` (the harness is yggc/bench/).

    python tools/bench.py [-m VERIFIER -md DRAFTER] [--prompts 4] [-n 128] [--repeats 3] [--rows ...]

Run from a checkout, tools/train_pair.py's held-out prompts are the fallback when the shipped prompt
file is missing. See `yggc bench --help` for every flag.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_pair.heldout_prompts, the prompt fallback

from yggc.cli.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
