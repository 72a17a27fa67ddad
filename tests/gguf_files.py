"""Tiny GGUF files for the tests, written by yggc's exporter (the `gguf` package's own writer, laid out
the way llama.cpp's converter writes a Hugging Face Llama checkpoint)."""
from __future__ import annotations

import json
from pathlib import Path

import gguf
from yggc.graphs.gguf_export import export_gguf


def write_gguf(hf_dir: Path, out: Path, quant: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
               chat_template: str | None = None) -> Path:
    """hf_dir -> a llama GGUF at out, 2-D weights as `quant`; chat_template is added to hf_dir's
    tokenizer_config.json first, so the file carries it."""
    if chat_template is not None:
        tok_cfg = hf_dir / "tokenizer_config.json"
        cfg = json.loads(tok_cfg.read_text()) if tok_cfg.is_file() else {}
        tok_cfg.write_text(json.dumps(cfg | {"chat_template": chat_template}))
    return export_gguf(hf_dir, out, quant)
