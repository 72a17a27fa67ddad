#!/usr/bin/env python3
"""Does a verify GEMM's arithmetic overlap its weight stream? yggc's AVX512-BF16 micro-kernel, alone.

The kernel and entry Inductor's GEMM template gets on AVX512-BF16 CPUs without AMX (passes/kernels/avx512_bf16_gemm.py
and micro_gemm.py, rendered as a compile renders them) run in a small C++ harness (tools/weight_stream.cpp) over
`--mb` MB of packed bf16 weights (SmolLM2's linear layers are 212 MB), two threads each streaming its half, at each
row count: at most 10 rows a pass, split evenly, two passes in chunks of k pairs, the next weights prefetched from
PREFETCH_ROWS rows. Beside it the arithmetic alone: the same row passes of the kernel over one 36 KB block per
thread that stays in L1, nothing prefetched. `--chunk-pairs` renders the entry with other chunk sizes (0: none) and
`--hints` with other prefetch levels (_MM_HINT_T0 into L1, _MM_HINT_T1 into L2, ...), every pair timed in turn.
Printed, per row count, medians over `--repeats` rounds: the stream's time, the arithmetic's,
the 1-row stream's (the weights at the memory's speed), and how much of the shorter of the two extra parts the
stream hid: overlap = (T(1) + arithmetic - T(R)) / min(T(1), arithmetic) (1: fully hidden, 0: they add).

    python tools/bench_weight_stream.py --rows 1,8,16 --mb 212 --repeats 15
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from torch.utils import cpp_extension
from yggc.passes.kernels import avx512_bf16_gemm, micro_gemm

HARNESS = Path(__file__).with_name("weight_stream.cpp")
MAX_ROWS = 16  # the harness's row buffers
COMPILED_HINT = avx512_bf16_gemm.ENTRY_OPTIONS["prefetch_hint"]  # the level a compile here renders


def render_kernel(chunk_pairs: int, hint: str = COMPILED_HINT) -> str:
    """avx512_bf16_gemm's kernel and entry (yggc_gemm) as a compile renders them, on raw bf16 bits, with passes
    over a block in chunks of `chunk_pairs` k pairs (0: none) and the next weights prefetched with `hint`."""
    block_m, block_n, _ = avx512_bf16_gemm.BLOCKINGS[0]
    declaration = ("template <bool accum>\ninline void yggc_gemm(const uint16_t* __restrict__ A, "
                   "const uint16_t* __restrict__ B, float* __restrict__ C, int64_t M, int64_t N, int64_t K, "
                   "int64_t lda, int64_t ldb, int64_t ldc)")
    options = {"kernel_name": "yggc_gemm", "declare_kernel": declaration, "kernel": {"assert_function": "YGGC_CHECK"},
               "input_t": "uint16_t", "input2_t": "uint16_t", "output_t": "float", "restrict_keyword": "__restrict__",
               "block_m": block_m, "block_n": block_n, **avx512_bf16_gemm.ENTRY_OPTIONS, "chunk_pairs": chunk_pairs,
               "prefetch_hint": hint}
    return micro_gemm.render(avx512_bf16_gemm.KERNEL, options)


def build(folder: Path, chunk_pairs: int, hint: str = COMPILED_HINT) -> Path:
    """The harness with the rendered kernel, compiled with the kernel library's flags. -> the executable."""
    folder.mkdir()
    kernel = folder / "kernel.h"
    kernel.write_text(render_kernel(chunk_pairs, hint))
    out = folder / "weight_stream"
    command = ["g++", "-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-std=c++20",
               f'-DKERNEL_SOURCE="{kernel}"',
               *(f"-I{p}" for p in cpp_extension.include_paths()), str(HARNESS), "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench_weight_stream: building the harness with g++ failed: {last}")
    return out


def check(executable: Path) -> tuple[float, bool]:
    """-> (the worst relative error of rows 1..16 against a float64 reference, whether every row's bits are the
    same at every row count)."""
    worst, invariant = subprocess.run([executable, "check"], capture_output=True, text=True, check=True).stdout.split()
    return float(worst), invariant == "1"


def time_rows(executables: list[Path], megabytes: int, rows: list[int], repeats: int) -> list[dict]:
    """-> per executable, median ms per (rows, "stream" | "arithmetic"); the executables take turns, round by round."""
    samples = [defaultdict(list) for _ in executables]
    for _ in range(repeats):
        for executable, into in zip(executables, samples):
            out = subprocess.run([executable, "time", str(megabytes), *map(str, rows), "1"], capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                m, mode, ms = line.split()
                into[int(m), mode].append(float(ms))
    return [{key: statistics.median(values) for key, values in into.items()} for into in samples]


def overlap(t1: float, arithmetic: float, t: float) -> float:
    """The share of the shorter of the weight stream (t1) and the arithmetic that the R-row stream (t) hid."""
    return (t1 + arithmetic - t) / min(t1, arithmetic)


def parse_rows(text: str) -> list[int]:
    rows = sorted({int(r) for r in text.split(",")} | {1})
    if rows[-1] > MAX_ROWS or rows[0] < 1:
        raise argparse.ArgumentTypeError(f"rows must be 1..{MAX_ROWS}, got {text}")
    return rows


def parse_chunks(text: str) -> list[int]:
    return [int(c) for c in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_weight_stream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=parse_rows, default=[1, 8, 16], help="row counts, 1..16 (1 is always timed)")
    parser.add_argument("--mb", type=int, default=212, help="MB of weights streamed per call (default SmolLM2's 212)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--chunk-pairs", type=parse_chunks, default=[avx512_bf16_gemm.CHUNK_PAIRS],
                        help="entries to compare: k pairs per chunk of the passes over a block, 0 for none "
                             f"(default: the compiled {avx512_bf16_gemm.CHUNK_PAIRS})")
    parser.add_argument("--hints", type=lambda t: t.split(","), default=[COMPILED_HINT],
                        help="prefetch levels to compare, e.g. _MM_HINT_T0,_MM_HINT_T1 (default: the one compiled "
                             "here, passes/kernels/prefetch.py)")
    args = parser.parse_args(argv)
    if torch.backends.cpu.get_cpu_capability() != "AVX512" or not torch.cpu._is_avx512_bf16_supported():
        parser.error("this CPU has no AVX512-BF16: the kernel measured here is not the one its compiles use")
    with tempfile.TemporaryDirectory() as tmp:
        entries = [(c, h) for h in args.hints for c in args.chunk_pairs]
        executables = [build(Path(tmp) / f"chunk{c}{h}", c, h) for c, h in entries]
        checks = [check(e) for e in executables]
        times = time_rows(executables, args.mb, args.rows, args.repeats)
    for (chunk, hint), (worst, invariant), by in zip(entries, checks, times):
        print(f"\nentry with chunks of {chunk or 'all'} k pairs, prefetch {hint}: worst relative error {worst:.2g} "
              "against float64, "
              f"rows bit-identical at every row count: {'yes' if invariant else 'NO'}\n")
        t1 = by[1, "stream"]
        print("| rows | stream ms | arithmetic alone ms | stream - T(1) ms | overlap |")
        print("|---|---|---|---|---|")
        for m in args.rows:
            t, arithmetic = by[m, "stream"], by[m, "arithmetic"]
            print(f"| {m} | {t:.3f} | {arithmetic:.3f} | {t - t1:+.3f} | {overlap(t1, arithmetic, t):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
