"""The `yggc` command: main.py builds the parser from one module per verb (run, compile, import_gguf, inspect,
profile, bench, serve, pull, train), each holding its flags (add_parser) and its run (main), thin modules that
call the runtime, the compile passes, the benchmark, the server and the training jobs. Nothing else in yggc
imports it.
"""
from .main import main

__all__ = ["main"]
