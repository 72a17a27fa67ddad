"""The models the rows run on, loaded on first use, and the compiled bundle they share (cached per pair)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from ..bundle import environment, model_hashes, validate_bundle
from ..errors import YggcError
from ..plan.shape import TreeShape
from ..runtime import loading
from ..runtime.drafters import load_drafter, speculative_decoder
from ..runtime.speculative import SpeculativeDecoder
from .runners import require_transformers
from .suite import BenchConfig, log


def model_key(model: Path) -> str:
    """Cache key of a checkpoint folder's exports (OpenVINO IR, GGUF): its weights and config.json hashes."""
    return hashlib.sha256(json.dumps(model_hashes(model), sort_keys=True).encode()).hexdigest()[:16]


def pair_key(cfg: BenchConfig) -> str:
    """Cache key of a compiled bundle for this pair, dtype, max_seq and toolchain (not the shape)."""
    env = environment("cpu", cfg.dtype)
    parts = [model_hashes(cfg.verifier), model_hashes(cfg.drafter), cfg.dtype, cfg.max_seq, env]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_bundles(cfg: BenchConfig) -> list[Path]:
    return sorted(cfg.bundle_cache.glob(f"{pair_key(cfg)}-*/manifest.json"), key=lambda p: p.stat().st_mtime)


def compile_bundle_subprocess(cfg: BenchConfig, shape: TreeShape, out: Path) -> None:
    """`yggc compile` in a child process, so the compiler's memory stays out of this one's RSS."""
    log(f"compiling a bundle for {shape.short} into {out} (a few minutes, once per pair and shape)")
    cmd = [sys.executable, "-m", "yggc.cli", "compile", "-m", str(cfg.verifier), "-md", str(cfg.drafter),
           "--depth", str(shape.depth), "--width", str(shape.width), "--verify", str(shape.verify),
           "--dtype", cfg.dtype, "--max-seq", str(cfg.max_seq), "-o", str(out), "--overwrite"]
    if subprocess.run(cmd).returncode != 0:
        raise YggcError(f"compiling the bundle failed (command: {' '.join(cmd)}); pass --bundle or --rows without "
                        "yggc-ar-compiled,yggc-full")


def resolve_bundle(cfg: BenchConfig, shape: Callable[[], TreeShape]) -> Path:
    """--bundle, else a cached bundle (quick: any shape; otherwise the tuned tree shape), else compile one."""
    if cfg.bundle is not None:
        return cfg.bundle
    found = cached_bundles(cfg)
    if cfg.quick:
        if not found:
            raise YggcError("no compiled bundle for this pair in the cache, and --quick does not compile one")
        return found[-1].parent
    want = shape()
    out = cfg.bundle_cache / f"{pair_key(cfg)}-d{want.depth}w{want.width}v{want.verify}"
    try:
        validate_bundle(out)
        return out
    except YggcError:
        compile_bundle_subprocess(cfg, want, out)
    return out


class Models:
    """Everything the rows run on, loaded on first use so each row's RSS increment shows what it added."""

    def __init__(self, cfg: BenchConfig, tune: Callable[[str], TreeShape]):
        self.cfg, self.dtype, self._tune = cfg, loading.parse_dtype(cfg.dtype), tune

    @cached_property
    def hf_verifier(self):
        require_transformers()
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.cfg.verifier, dtype=self.dtype).eval()

    @cached_property
    def hf_drafter(self):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.cfg.drafter, dtype=self.dtype).eval()

    @cached_property
    def verifier(self) -> loading.LoadedModel:
        return loading.load(self.cfg.verifier, self.dtype, self.cfg.max_seq)

    @cached_property
    def drafter(self) -> loading.LoadedModel:
        return load_drafter(self.cfg.drafter, self.verifier, self.dtype)

    @cached_property
    def runtime(self):
        from ..runtime import Runtime

        path = resolve_bundle(self.cfg, lambda: self._tune("yggc-tree-static"))
        log(f"bundle {path}")
        return Runtime.load(path)

    def spec_decoder(self, shape: TreeShape) -> SpeculativeDecoder:
        v, d = self.verifier, self.drafter
        return speculative_decoder(v.graph, d.graph, v.layout, shape)
