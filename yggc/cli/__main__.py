"""`python -m yggc.cli ...` runs the `yggc` command."""
import sys

from .main import main

sys.exit(main())
