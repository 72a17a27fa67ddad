#!/usr/bin/env python3
"""yggc::quant_linear_v1 from two sources, in one process: ms per call at widths 1..16 on SmolLM2-135M's shapes.

A shared VM's speed drifts between processes by more than a kernel change moves, so both sources are built into one
library (OLD's namespace renamed, yggc -> yggc_old) and registered as two ops, yggc_qbench::old and ::new; on random
weights of each format and shape, their outputs must be the same bits (a change may move speed, never bits), then
the two take turns call by call, every width and shape in each round. Printed: the median ms per call of each, and
NEW / OLD.

    git show OLD_COMMIT:yggc/artifacts/kernels/quant_linear.cpp > /tmp/quant_linear_old.cpp
    python tools/bench_quant_linear.py /tmp/quant_linear_old.cpp --threads 2 --rounds 40
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
import torch
from yggc.graphs import block_quant
from yggc.passes.kernels import kernel_library

NEW = Path(__file__).resolve().parents[1] / "yggc" / "artifacts" / "kernels" / "quant_linear.cpp"
# [N, K] of SmolLM2-135M's weights: o_proj, down_proj (in 1536), gate or up (out 1536), the tied head
SHAPES = [(576, 576), (576, 1536), (1536, 576), (49152, 576)]
REGISTER = """
#include <torch/library.h>
namespace yggc { at::Tensor quant_linear(const at::Tensor&, const at::Tensor&, int64_t, int64_t); }
namespace yggc_old { at::Tensor quant_linear(const at::Tensor&, const at::Tensor&, int64_t, int64_t); }
TORCH_LIBRARY(yggc_qbench, m) {
  m.def("old(Tensor x, Tensor packed, int format, int n) -> Tensor", &yggc_old::quant_linear);
  m.def("new(Tensor x, Tensor packed, int format, int n) -> Tensor", &yggc::quant_linear);
}
"""


def build(old: Path, where: Path) -> None:
    """One library with both sources' op; loaded into torch.ops.yggc_qbench."""
    renamed = where / "old.cpp"
    renamed.write_text(f'#define yggc yggc_old\n#include "{old.resolve()}"\n')
    (where / "register.cpp").write_text(REGISTER)
    out = where / "qbench.so"
    cmd = kernel_library.compile_command((renamed, NEW, where / "register.cpp"), out)
    cmd = [c for c in cmd if c != "-fvisibility=hidden"]  # the registration needs the ops' symbols
    subprocess.run(cmd, check=True)
    torch.ops.load_library(str(out))


def weights(fmt: str, n: int, k: int) -> torch.Tensor:
    w = np.random.default_rng(n + k).normal(0, 0.05, (n, k)).astype(np.float32)
    ggml = gguf.GGMLQuantizationType[block_quant.FORMATS[fmt].ggml_type]
    return block_quant.pack_blocks(torch.from_numpy(gguf.quants.quantize(w, ggml).copy()), fmt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path, help="the other quant_linear.cpp (e.g. an older commit's)")
    ap.add_argument("--formats", default="q4_1,q8_0")
    ap.add_argument("--widths", default="1,4,8,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        build(args.old, Path(tmp))
    ops = {"old": torch.ops.yggc_qbench.old, "new": torch.ops.yggc_qbench.new}
    widths = [int(w) for w in args.widths.split(",")]
    cases = []
    for fmt in args.formats.split(","):
        code = block_quant.FORMAT_CODES[fmt]
        for n, k in SHAPES:
            packed = weights(fmt, n, k)
            for w in widths:
                x = torch.randn(w, k, generator=torch.Generator().manual_seed(w)).to(torch.bfloat16)
                call = (x, packed, code, n)
                a, b = ops["old"](*call), ops["new"](*call)
                assert torch.equal(a.view(torch.int32), b.view(torch.int32)), f"{fmt} {n}x{k} W={w}: bits differ"
                cases.append((fmt, n, k, w, call))
    ms = {(c[:4], which): [] for c in cases for which in ops}
    for _ in range(args.rounds):
        for *key, call in cases:
            for which, op in ops.items():
                t0 = time.perf_counter()
                op(*call)
                ms[(tuple(key), which)].append(1000 * (time.perf_counter() - t0))
    print(f"{args.threads} threads, {args.rounds} rounds, median ms per call (noisy: a shared machine)")
    print("| format | N x K | W | old ms | new ms | new / old |\n|---|---|---|---|---|---|")
    for fmt, n, k, w, _ in cases:
        old, new = (statistics.median(ms[((fmt, n, k, w), which)]) for which in ops)
        print(f"| {fmt} | {n}x{k} | {w} | {old:.3f} | {new:.3f} | {new / old:.2f} |")


if __name__ == "__main__":
    main()
