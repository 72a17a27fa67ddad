"""The physical floor of `yggc bench` and the verify step timed against it.

* floor: verifier weight bytes / measured memory bandwidth, the least time a verifier step that reads
  every weight can take here. The bandwidth is the fastest of a full read and a copy of a large
  tensor (main memory) and a repeated read of a weights-sized tensor (the caches, when the weights
  fit in them: then the main-memory floor would not be a floor). Medians, at the rows' thread count.
  "verify ms" is the median verify call inside one extra decode of the first prompt (the decoder's
  call is wrapped by a timer): the one-token step for AR rows, the verify phase (pruning, tree-masked
  verifier forward, acceptance, KV compaction) for greedy speculative rows, the V+1-row verifier
  forward when sampling; "x floor" is its ratio to the row's own floor: a weights-sized read timed just before
  and just after that decode (the faster of the two), since a shared machine's memory speed moves within minutes.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ..artifacts.timing import median_ms
from ..graphs import block_quant
from ..runtime.autoregressive import AutoregressiveDecoder
from ..runtime.runtime import Runtime
from ..tree.sampling import SamplingParams
from .model_cache import Models
from .rows import Row, median, sampling_params
from .suite import BenchConfig


def read_gbs(n_bytes: int, repeats: int = 7) -> float:
    """GB/s of a full read (sum) of `n_bytes` of float32, median; repeated, so it stays in cache if it fits."""
    a = torch.ones(max(n_bytes // 4, 1))
    return 4 * a.numel() / median_ms(lambda: a.sum(), repeats, warmup=2) / 1e6


def copy_gbs(n_bytes: int, repeats: int = 7) -> float:
    """GB/s of a copy (bytes read + bytes written) of `n_bytes` of float32, median."""
    a = torch.ones(max(n_bytes // 4, 1))
    b = torch.empty_like(a)
    return 8 * a.numel() / median_ms(lambda: b.copy_(a), repeats, warmup=2) / 1e6


def weight_bytes(module: torch.nn.Module, formats: dict[str, str] | None = None) -> int:
    """Parameter bytes (tied weights once); the KV cache buffers are not weights. A linear layer that streams blocks
    counts the bytes of its blocks in their format (graphs/block_quant.py: 34 bytes per 32 weights for q8_0, 18 for
    q4_0, 20 for q4_1) instead of its float weight's: the layers of `formats` ({layer: format}, e.g. a bundle's
    manifest.block_formats), by default those of the module's block_linears (passes/quant_linear.py)."""
    if formats is None:
        formats = {name: b.fmt for name, b in (getattr(module, "block_linears", None) or {}).items()}
    blocked = {id(module.get_submodule(name).weight): fmt for name, fmt in formats.items()}
    total = 0
    for p in module.parameters():  # each shared parameter once
        fmt = blocked.get(id(p))
        if fmt is None:
            total += p.numel() * p.element_size()
        else:
            rows, cols = block_quant.block_shape(fmt, *p.shape)
            total += rows * cols
    return total


def streamed_verifier_bytes(rt: Runtime) -> int:
    """Of a loaded bundle's verifier, its layers counted in the formats the bundle's packages stream them in."""
    return weight_bytes(rt.verifier.graph, rt.manifest.block_formats)


def verifier_weight_bytes(m: Models) -> int:
    """Of the verifier as the rows ran it (a yggc graph if one is loaded, else transformers' model)."""
    loaded = m.__dict__  # cached_property values; nothing new is loaded here unless nothing was
    if "verifier" in loaded:
        return weight_bytes(loaded["verifier"].graph)
    if "runtime" in loaded:
        return streamed_verifier_bytes(loaded["runtime"])
    if "hf_verifier" in loaded:
        return weight_bytes(loaded["hf_verifier"])
    return weight_bytes(m.verifier.graph)


class CallTimer:
    """Stands in for a decoder's model/phase attribute and times the calls whose input has `width` rows."""

    def __init__(self, fn: Callable, width: int | None):
        self.fn, self.width, self.ms = fn, width, []

    def __call__(self, *args, **kw):
        t0 = time.perf_counter()
        out = self.fn(*args, **kw)
        if self.width is None or args[0].shape[0] == self.width:
            self.ms.append(1000 * (time.perf_counter() - t0))
        return out

    def __getattr__(self, name: str):  # cfg, move_kv, ... of the wrapped model
        return getattr(self.fn, name)


def verify_hook(decoder, greedy: bool) -> tuple[str, int | None]:
    """(attribute, input width) of the call that verifies: the one-token step of an AR decoder, the
    fused prune+verify+accept phase of a greedy speculative decoder, else its verifier at V+1 rows."""
    if isinstance(decoder, AutoregressiveDecoder):
        return "model", 1
    if greedy and hasattr(decoder, "run_verify"):
        return "run_verify", None
    return "verifier", decoder.shape.verify + 1


def verify_step_ms(row: Row, prompt: list[int], n: int, params: SamplingParams) -> float | None:
    """Median verify-step time inside one extra (unsampled) decode of `prompt`."""
    attr, width = verify_hook(row.decoder, params.greedy)
    original = getattr(row.decoder, attr)
    timer = CallTimer(original, width)
    setattr(row.decoder, attr, timer)
    try:
        row.run(prompt, n, params)
    finally:
        setattr(row.decoder, attr, original)
    return median(timer.ms) if timer.ms else None


def physical_floor(cfg: BenchConfig, rows: list[Row], m: Models, prompt: list[int]) -> dict:
    params = sampling_params(cfg.temperature, 54321)
    wb = verifier_weight_bytes(m)
    for row in rows:
        if row.decoder is not None:
            before = read_gbs(wb)
            row.verify_ms = verify_step_ms(row, prompt, cfg.n_new, params)
            row.floor_ms = wb / max(before, read_gbs(wb)) / 1e6
    big = cfg.bandwidth_mb * 2**20
    bw = {"read_gbs": read_gbs(big), "copy_gbs": copy_gbs(big), "weights_read_gbs": read_gbs(wb)}
    # the fastest of them: main memory, or the caches when the weights fit there
    return {**bw, "mb": cfg.bandwidth_mb, "weight_bytes": wb, "floor_ms": wb / max(bw.values()) / 1e6}
