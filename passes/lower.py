"""Lower pass: one AOTInductor package per (model, width) bucket, cache view length S dynamic.

torch.export captures the graph's forward at a fixed width W; Inductor compiles it to C++ (CPU) or
Triton (CUDA) kernels. Weights and the KV cache stay out of the package so buckets share them.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch.export import Dim

from ..graphs import LlamaGraph

INDUCTOR_CONFIGS = {"aot_inductor.package_constants_in_so": False}


def example_inputs(width: int, max_seq: int, device: str) -> tuple[torch.Tensor, ...]:
    # distinct tensors: export treats one tensor passed twice as aliased inputs
    ids, pos, slots = (torch.zeros(width, dtype=torch.long, device=device) for _ in range(3))
    return ids, pos, slots, torch.ones(width, max_seq, dtype=torch.bool, device=device)


def lower_bucket(graph: LlamaGraph, width: int, max_seq: int, out_path: Path, device: str = "cpu") -> Path:
    """Export graph.forward at input width `width` and compile it into `out_path` (.pt2)."""
    view = Dim("S", min=2, max=max_seq)  # attention reads cache slots [0, S); S varies per call
    program = torch.export.export(graph, example_inputs(width, max_seq, device),
                                  dynamic_shapes=(None, None, None, {1: view}))
    torch._inductor.aoti_compile_and_package(program, package_path=str(out_path), inductor_configs=INDUCTOR_CONFIGS)
    return out_path
