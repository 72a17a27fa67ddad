#!/usr/bin/env python3
"""How the CPU's GEMM library handles the small-M products that tree verification is made of.

A verify step at width W multiplies [W, K] activations by every weight matrix [N, K]. On a memory-bound
CPU that should cost about what W = 1 costs (the weights are read once either way); whether it does
depends on the BLAS path torch picks for each formulation. This times, per width, the three ways to
write y = x W^T - F.linear (what nn.Linear and Inductor's extern mm use), (W @ x^T)^T, and
x @ W^T with W^T stored contiguously - plus F.linear in bfloat16, on one model's shapes, and reports
the effective weight-read bandwidth (GB/s) beside the ms.

    python tools/bench_gemm_layouts.py --threads 2                 # SmolLM2-135M's shapes
    python tools/bench_gemm_layouts.py --shapes 576x49152 --widths 1,2,3,4,8
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

SMOLLM2 = ("576x576", "576x192", "576x1536", "1536x576", "576x49152")  # K x N: q/o, k/v, gate/up, down, head


def median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def formulations(x: torch.Tensor, w: torch.Tensor, w_t: torch.Tensor) -> dict:
    xb, wb = x.bfloat16(), w.bfloat16()
    return {"F.linear": lambda: torch.nn.functional.linear(x, w), "(W@x^T)^T": lambda: (w @ x.t()).t(),
            "x@W^T(contig)": lambda: x @ w_t, "bf16 F.linear": lambda: torch.nn.functional.linear(xb, wb)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SMOLLM2), help="KxN weight shapes (default: SmolLM2-135M's)")
    ap.add_argument("--widths", default="1,2,3,4,8,16", help="activation rows M (default 1,2,3,4,8,16)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per cell; the median is shown")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.backends.cpu.get_cpu_capability()}; ms (weight-read GB/s, float32 bytes)")
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        w = torch.randn(n, k)
        w_t = w.t().contiguous()
        print(f"\nK={k} N={n} ({w.numel() * 4 / 1e6:.1f} MB float32)")
        for m in (int(v) for v in args.widths.split(",")):
            cells = {name: median_ms(fn, args.repeats) for name, fn in formulations(torch.randn(m, k), w, w_t).items()}
            print(f"  M={m:<3d} " + "  ".join(f"{name} {ms:7.3f} ({w.numel() * 4 / ms / 1e6:5.1f})"
                                             for name, ms in cells.items()))


if __name__ == "__main__":
    main()
