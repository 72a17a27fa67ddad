"""`yggc import MODEL.gguf -o DIR`: a GGUF file into a checkpoint folder (yggc.graphs.gguf_import)."""
from __future__ import annotations

import argparse
import sys

from .arg_types import Verbs


def add_parser(sub: Verbs) -> None:
    """`yggc import`: its flags; main runs it."""
    p = sub.add_parser(
        "import", help="convert a llama GGUF file into a checkpoint folder",
        description="Dequantize a llama-architecture GGUF file (F32/F16/BF16 and the common block quantizations) "
                    "into a Hugging Face-format folder: config.json, model.safetensors, tokenizer.json and "
                    "tokenizer_config.json (with the chat template). -m also takes a .gguf file directly.")
    p.add_argument("gguf", metavar="MODEL.gguf", help="the GGUF file")
    p.add_argument("-o", "--output", required=True, help="folder to write")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="stored weight dtype (default float32: the dequantized values exactly)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing folder at -o")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    """Convert the GGUF file into a checkpoint folder at -o -> the exit code."""
    from ..graphs.gguf_import import import_gguf

    out = import_gguf(args.gguf, args.output, args.dtype, args.overwrite)
    print(f"yggc import: wrote {out} (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)",
          file=sys.stderr)
    return 0
