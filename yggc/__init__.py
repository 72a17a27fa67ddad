"""yggc: latency-optimal tree speculative decoding on a static-graph runtime (after Yggdrasil)."""
__version__ = "0.1.0"
__all__ = ["Runtime", "__version__"]


def __getattr__(name: str):
    # `yggc.Runtime` without importing torch for `yggc --version` and the like
    if name == "Runtime":
        from .runtime.runtime import Runtime

        return Runtime
    raise AttributeError(f"module 'yggc' has no attribute {name!r}")
