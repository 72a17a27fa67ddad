#!/usr/bin/env python3
"""yggc's bf16 micro-kernels (passes/avx2_bf16_gemm.py, passes/avx512_bf16_gemm.py) against Inductor's own,
on a SmolLM2-shaped stack of bf16 linear layers compiled as O2 compiles a verifier: one AOTInductor package
with a dynamic row count M, weights frozen and packed. Both packages are timed in one process, calls
interleaved (medians); also reported: whether their outputs are bit-identical and whether each package's
rows are the same whatever M.

    python tools/bench_gemm_kernels.py --layers 2 --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.export import Dim
from yggc.passes.lower import CPU_GEMM_BACKENDS, INDUCTOR_CONFIGS, inductor_config

WIDTHS = (1, 2, 4, 8, 16, 32, 64)


class LinearStack(torch.nn.Module):
    """`layers` SmolLM2-135M blocks' linear layers (qkv, o, gate/up, down; attention left out) + the LM head."""

    def __init__(self, layers: int, hidden: int = 576, kv: int = 192, ffn: int = 1536, vocab: int = 49152):
        super().__init__()
        g = torch.Generator().manual_seed(0)

        def weight(k: int, n: int) -> torch.nn.Parameter:  # stored [in, out], as O2's frozen export holds them
            return torch.nn.Parameter((torch.randn(k, n, generator=g) / k ** 0.5).bfloat16(), requires_grad=False)

        self.hidden, self.ffn = hidden, ffn
        self.qkv = torch.nn.ParameterList(weight(hidden, hidden + 2 * kv) for _ in range(layers))
        self.o = torch.nn.ParameterList(weight(hidden, hidden) for _ in range(layers))
        self.gate_up = torch.nn.ParameterList(weight(hidden, 2 * ffn) for _ in range(layers))
        self.down = torch.nn.ParameterList(weight(ffn, hidden) for _ in range(layers))
        self.head = weight(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [M, hidden] -> logits [M, vocab]
        for qkv, o, gate_up, down in zip(self.qkv, self.o, self.gate_up, self.down):
            x = x + (rms(x) @ qkv)[:, :self.hidden] @ o
            gu = rms(x) @ gate_up
            x = x + (torch.nn.functional.silu(gu[:, :self.ffn]) * gu[:, self.ffn:]) @ down
        return rms(x) @ self.head


def rms(x: torch.Tensor) -> torch.Tensor:
    """The blocks' RMS norm (without a scale): it keeps a deep stack finite, as in the model, so the bit
    comparisons below compare numbers (without it 30 random blocks overflow to NaN, and NaN != NaN)."""
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def compile_package(module: torch.nn.Module, config: dict, path: Path):
    program = torch.export.export(module, (torch.zeros(4, module.hidden).bfloat16(),),
                                  dynamic_shapes=({0: Dim("M", min=1, max=max(WIDTHS))},))
    return torch._inductor.aoti_load_package(
        torch._inductor.aoti_compile_and_package(program, package_path=str(path), inductor_configs=config))


def rows_invariant(package, x: torch.Tensor) -> bool:
    full = package(x)
    return all(torch.equal(package(x[:m].clone()), full[:m]) for m in (1, 2, 3, 5, 8, 9, 17, 33))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2, help="blocks in the stack (SmolLM2 has 30)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    module = LinearStack(args.layers).eval()
    with tempfile.TemporaryDirectory() as tmp:
        # Inductor's kernels first: inductor_config() registers yggc's for the rest of the process
        inductor = compile_package(module, dict(INDUCTOR_CONFIGS["O2"], max_autotune_gemm_backends=CPU_GEMM_BACKENDS),
                                   Path(tmp) / "inductor.pt2")
        yggc = compile_package(module, inductor_config("O2", "cpu"), Path(tmp) / "yggc.pt2")
    x = torch.randn(max(WIDTHS), module.hidden, generator=torch.Generator().manual_seed(1)).bfloat16()
    mb = sum(p.numel() * p.element_size() for p in module.parameters()) / 1e6
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}; "
          f"{args.layers} blocks + head, {mb:.0f} MB of bf16 weights")
    print(f"bit-identical outputs: {torch.equal(inductor(x), yggc(x))}; rows invariant: inductor "
          f"{rows_invariant(inductor, x)}, yggc {rows_invariant(yggc, x)}")
    print("  M  inductor ms  yggc ms  yggc/inductor")
    with torch.inference_mode():
        for m in WIDTHS:
            xm, times = x[:m].clone(), {inductor: [], yggc: []}
            for _ in range(args.repeats):
                for package, ts in times.items():
                    t0 = time.perf_counter()
                    package(xm)
                    ts.append(time.perf_counter() - t0)
            a, b = (statistics.median(ts[1:]) * 1e3 for ts in times.values())
            print(f"{m:3d}  {a:11.3f}  {b:7.3f}  {b / a:13.2f}")


if __name__ == "__main__":
    main()
