"""The `yggc` command: argument parsing and thin command modules that call the runtime, the compile
passes and the benchmark. Nothing else in yggc imports it.
"""
from .main import main

__all__ = ["main"]
