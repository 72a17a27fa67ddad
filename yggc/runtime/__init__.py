"""Decoding: Runtime, the autoregressive decoder and the speculative decode loop, the proposers and drafter kinds
(drafters/, one registry), the draft and verify phases, chat templates, the trace. Compiled buckets and their backends live below, in yggc.artifacts.

May import yggc.graphs, yggc.tree, yggc.plan, yggc.bundle and yggc.artifacts; never yggc.passes, yggc.bench,
yggc.serve or yggc.cli.
"""
__all__ = ["Runtime"]


def __getattr__(name: str):
    # `from yggc.runtime import Runtime` without importing every decoder for a submodule import
    if name == "Runtime":
        from .runtime import Runtime

        return Runtime
    raise AttributeError(f"module 'yggc.runtime' has no attribute {name!r}")
