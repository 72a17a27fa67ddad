"""`yggc serve` in a process of its own, through the real CLI, over the shipped demo pair as it is (its own
chat template), eager: a compiled bundle would take minutes.

    python serve_demo.py BUNDLE_DIR STEP_S [yggc serve flags ...]

BUNDLE_DIR holds only a manifest.json (serve reads its time), Runtime.load returns the eager runtime, and
each decoding iteration sleeps STEP_S seconds, so that a test finds a long request still decoding.
"""
import sys
import time

import torch

from yggc.artifacts.buckets import CompiledModel
from yggc.cli.main import main
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters, loading
from yggc.runtime.runtime import Runtime


def slowed(stream_tokens, step_s: float):
    def steps(*args, **kw):
        inner = stream_tokens(*args, **kw)
        try:
            for tokens in inner:
                time.sleep(step_s)
                yield tokens
        finally:
            inner.close()

    return steps


def demo_runtime(step_s: float) -> Runtime:
    verifier_dir, drafter_dir = loading.demo_pair_dirs()
    verifier, drafter = drafters.load_pair(verifier_dir, drafter_dir, torch.float32, 512)
    compiled = {"verifier": CompiledModel(verifier.graph, {}), "drafter": CompiledModel(drafter.graph, {})}
    runtime = Runtime(verifier_dir, None, verifier, drafter, compiled, TreeShape(3, 2, 5))
    runtime.stream_tokens = slowed(runtime.stream_tokens, step_s)
    return runtime


if __name__ == "__main__":
    bundle, step_s, *flags = sys.argv[1:]
    runtime = demo_runtime(float(step_s))
    Runtime.load = classmethod(lambda cls, path: runtime)
    sys.exit(main(["serve", bundle, "--port", "0", "--threads", "1", *flags]))
