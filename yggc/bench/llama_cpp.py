"""The llama.cpp rows of `yggc bench` (the optional extra yggc[llama-cpp]): plain decoding in llama-cpp-python.

* llama.cpp: the verifier's own weights exported to a GGUF of the bench dtype (F32 for float32, BF16 for
  bfloat16; yggc.graphs.gguf_export, cached per model under BenchConfig.llama_cpp_cache), so it decodes the
  weights every other row decodes.
* llama.cpp-gguf: a GGUF file as the user has it (--gguf FILE, or -m MODEL.gguf), e.g. SmolLM2's shipped
  Q4_1: what a llama.cpp user would run.

Both decode the prompt's token ids with Llama.generate (the context reset first, so no prefix is reused), greedy
(temp 0: llama.cpp's greedy sampler) or sampled at --temp with top-k, top-p, min-p and typical-p off and the
slot's seed, n tokens through EOS like the other rows. Threads: torch's count (--threads), for prompt and decode.
TPOT is the time from the first new token to the last over the tokens after the first, the other rows'
definition; each step emits one token.

llama_cpp is imported only when one of these rows is built: the other rows never load it.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from ..errors import YggcError
from ..graphs.gguf_export import export_gguf
from ..tree.sampling import SamplingParams
from .model_cache import model_key
from .rows import Result, Row, Runner
from .suite import BenchConfig, log

EXPORT_TYPES = {"float32": "F32", "bfloat16": "BF16"}  # bench dtype -> GGUF weight type of the llama.cpp row


def require_llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        raise YggcError("the llama.cpp rows need llama-cpp-python: pip install 'yggc[llama-cpp]' (it builds "
                        "llama.cpp from source, a few minutes), or leave llama.cpp,llama.cpp-gguf out of --rows") from None
    return llama_cpp


def cached_gguf(model: Path, cache: Path, dtype: str) -> Path:
    """`model` exported to a GGUF of the bench dtype in `cache`, written there first when absent."""
    from gguf import GGMLQuantizationType

    kind = EXPORT_TYPES[dtype]
    out = cache / f"{model_key(model)}-{kind}.gguf"
    if not out.is_file():
        log(f"exporting {model} to GGUF ({kind} weights) into {out} (once per model and dtype)")
        export_gguf(model, out, GGMLQuantizationType[kind])
    return out


def sampler_kwargs(params: SamplingParams) -> dict[str, float | int]:
    """Llama.generate's sampler: greedy, or plain temperature sampling (every truncation off)."""
    if params.greedy:
        return {"temp": 0.0}
    return {"temp": params.temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0}


def llama_cpp_runner(llm) -> Runner:
    def run(prompt: list[int], n: int, params: SamplingParams) -> Result:
        llm.reset()
        if not params.greedy:
            llm.set_seed(params.seed if params.seed is not None else 0)
        tokens, stamps = [], []
        for token in llm.generate(prompt, **sampler_kwargs(params)):
            stamps.append(time.perf_counter())
            tokens.append(int(token))
            if len(tokens) == n:
                break
        tpot = (stamps[-1] - stamps[0]) * 1000 / (n - 1) if n > 1 else float("nan")
        return Result(tokens, tpot, [1] * (n - 1))

    return run


def row_gguf(name: str, cfg: BenchConfig) -> Path:
    """The file a llama.cpp row decodes: the given one (llama.cpp-gguf), else the verifier's export."""
    if name == "llama.cpp":
        return cached_gguf(cfg.verifier, cfg.llama_cpp_cache, cfg.dtype)
    if cfg.gguf is None or not cfg.gguf.is_file():
        raise YggcError(f"--gguf {cfg.gguf} is not a file; pass the GGUF file llama.cpp-gguf should decode")
    return cfg.gguf


def llama_cpp_row(name: str, cfg: BenchConfig) -> Row:
    """The llama.cpp or llama.cpp-gguf row: its file resolved (or exported) and loaded."""
    path = row_gguf(name, cfg)
    llama_cpp = require_llama_cpp()
    threads = torch.get_num_threads()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=cfg.max_seq, n_batch=min(512, cfg.max_seq),
                          n_threads=threads, n_threads_batch=threads, verbose=False)
    kind = EXPORT_TYPES[cfg.dtype] if name == "llama.cpp" else gguf_weight_type(path)
    return Row(name, llama_cpp_runner(llm), f"llama-cpp-python {llama_cpp.__version__}, {kind} GGUF")


def gguf_weight_type(path: Path) -> str:
    """The GGML type most of a file's weights have (Q4_1 for SmolLM2's shipped file)."""
    from collections import Counter

    from gguf import GGUFReader

    counts = Counter(t.tensor_type.name for t in GGUFReader(path).tensors if len(t.shape) == 2)
    return counts.most_common(1)[0][0] if counts else "?"
