"""`python -m yggc ...` (and so `torchrun ... -m yggc ...`) runs the `yggc` command."""
import sys

from .cli.main import main

sys.exit(main())
