"""`yggc import MODEL.gguf -o DIR`: a GGUF file into a checkpoint folder (yggc.graphs.gguf_import)."""
from __future__ import annotations

import argparse
import sys


def import_command(args: argparse.Namespace) -> int:
    from ..graphs.gguf_import import import_gguf

    out = import_gguf(args.gguf, args.output, args.dtype, args.overwrite)
    print(f"yggc import: wrote {out} (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)",
          file=sys.stderr)
    return 0
