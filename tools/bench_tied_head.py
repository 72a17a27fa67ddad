#!/usr/bin/env python3
"""The tied-head kernel (yggc::tied_head_v2, passes/tied_head.py) against the LM head O2 compiled before it:
Inductor's C++ GEMM template on the table repacked into its own blocks (a second copy of the table), in one
AOTInductor package with a dynamic row count M, as O2 lowers a verifier. SmolLM2-135M's head (49152 x 576,
bf16) by default. Calls interleaved in one process, medians; also reported: whether the two give the same
bits, the kernel's error against a float64 product, and whether its rows are the same whatever M.

    python tools/bench_tied_head.py --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.export import Dim
from yggc.graphs.packed_table import pack_table
from yggc.passes import kernel_library, tied_head
from yggc.passes.lower import inductor_config

from yggc.runtime import kernel_ops
from yggc.runtime.aoti_package import load_package

WIDTHS = (1, 2, 3, 4, 8, 16, 32, 64)


class TemplateHead(torch.nn.Module):
    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table_t = torch.nn.Parameter(table.t().contiguous(), requires_grad=False)  # [K, N], as O2 holds it

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [M, K] -> logits [M, N] float32
        return (x @ self.table_t).float()


def template_package(table: torch.Tensor, folder: Path):
    with torch.no_grad():
        program = torch.export.export(TemplateHead(table), (torch.zeros(4, table.shape[1], dtype=torch.bfloat16),),
                                      dynamic_shapes=({0: Dim("M", min=1, max=max(WIDTHS))},))
        path = torch._inductor.aoti_compile_and_package(program, package_path=str(folder / "head.pt2"),
                                                        inductor_configs=inductor_config("O2", "cpu"))
    return load_package(Path(path))


def time_round(fn, rounds: list[float], calls: int) -> None:
    """Append the mean ms of `calls` calls of fn to rounds."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    rounds.append((time.perf_counter() - start) / calls * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--columns", type=int, choices=(16, 64), help="columns per table block (default: this CPU's)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kernel_library.build()
    g = torch.Generator().manual_seed(0)
    table = (torch.randn(args.vocab, args.hidden, generator=g) * 0.05).bfloat16()
    packed = pack_table(table, args.columns or tied_head.table_columns())
    with tempfile.TemporaryDirectory() as tmp:
        template = template_package(table, Path(tmp))
        print(f"{torch.get_num_threads()} threads, head {args.vocab} x {args.hidden} bf16 "
              f"({table.numel() * 2 / 1e6:.1f} MB)")
        print("| M | template ms | tied_head ms | ratio | same bits | rel. error | rows invariant |")
        print("|---|---|---|---|---|---|---|")
        for m in WIDTHS:
            x = torch.randn(m, args.hidden, generator=g).bfloat16()
            ours = kernel_ops.tied_head(x, packed, args.vocab)
            exact = x.double() @ table.double().t()
            error = ((ours.double() - exact).abs().max() / exact.abs().max()).item()
            invariant = all(torch.equal(kernel_ops.tied_head(x[i:i + 1], packed, args.vocab)[0], ours[i])
                            for i in range(m))
            same = torch.equal(template(x), ours)
            t_template, t_ours = [], []
            for _ in range(args.rounds):
                time_round(lambda x=x: template(x), t_template, args.calls)
                time_round(lambda x=x: kernel_ops.tied_head(x, packed, args.vocab), t_ours, args.calls)
            a, b = statistics.median(t_template), statistics.median(t_ours)
            print(f"| {m} | {a:.3f} | {b:.3f} | {b / a:.3f} | {same} | {error:.1e} | {invariant} |", flush=True)


if __name__ == "__main__":
    main()
