"""Decoding: Runtime, the autoregressive and speculative decoders, the fused draft/verify phases, the
KV cache layout, compiled buckets and their backends (Inductor, CUDA graphs, TensorRT), devices.

May import yggc.graphs, yggc.tree, yggc.plan and yggc.bundle; never yggc.passes, yggc.bench, yggc.serve or yggc.cli.
"""
__all__ = ["Runtime"]


def __getattr__(name: str):
    # `from yggc.runtime import Runtime` without importing every decoder for a submodule import
    if name == "Runtime":
        from .runtime import Runtime

        return Runtime
    raise AttributeError(f"module 'yggc.runtime' has no attribute {name!r}")
