"""Where the CPU kernels' software prefetch of the next chunk of weights lands: L1 or L2.

The AVX512-BF16 GEMM (avx512_bf16_gemm, micro_gemm.ENTRY) and the tied head (yggc/artifacts/kernels/tied_head.cpp)
read a chunk of weights while they prefetch the next one, so a core holds two chunks at once (18 KB each for both
kernels). Where two fit the core's L1 data cache, the prefetch goes to L1 (_MM_HINT_T0); where they do not, an
L1 prefetch evicts the lines the kernel reads next and the prefetch goes to L2 (_MM_HINT_T1), from where the
kernel's own loads bring each line in once. On a Zen 4 (32 KB L1D) that is L2, on a Zen 5 (48 KB L1D) L1, the level
the kernels were tuned with; tools/bench_weight_stream.py compares the levels (docs/benchmarks/cpu-verify-curve.md).
"""
from __future__ import annotations

import torch

L1 = "_MM_HINT_T0"
L2 = "_MM_HINT_T1"


def l1d_bytes() -> int:
    """The L1 data cache of one core, as Inductor's GEMM template reads it for its own blocking (0: unknown)."""
    return int(torch.cpu.get_capabilities().get("l1d_cache_size", 0))


def hint(chunk_bytes: int, l1d: int | None = None) -> str:
    """The _mm_prefetch hint for a kernel that reads a chunk of `chunk_bytes` while it prefetches the next:
    L1 where both fit in `l1d` bytes (this core's L1 data cache by default), else L2."""
    l1d = l1d_bytes() if l1d is None else l1d
    return L1 if 0 < 2 * chunk_bytes <= l1d else L2
