"""Lower pass: one AOTInductor package per (model, width) bucket, cache view length S dynamic.

torch.export captures the graph's forward at a fixed width W; Inductor compiles it to C++ (CPU) or
Triton (CUDA) kernels. Weights and the KV cache stay out of the package so buckets share them.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch.export import Dim

from ..graphs import LlamaGraph
from ..plan.shape import HEAD_WIDTH
from ..runtime.draft_phase import DraftPhase
from ..runtime.verify_phase import GreedyVerifyPhase

# O1: weights stay out of the package and are shared by every bucket of a model.
# O2: weights frozen into each package (constant folding, max-autotune GEMM templates instead of MKL);
#     faster small-W steps, one weight copy per bucket, much longer compiles. The KV cache is shared either way.
INDUCTOR_CONFIGS = {"O1": {"aot_inductor.package_constants_in_so": False},
                    "O2": {"freezing": True, "max_autotune": True}}


def example_inputs(width: int, max_seq: int, device: str) -> tuple[torch.Tensor, ...]:
    # distinct tensors: export treats one tensor passed twice as aliased inputs
    ids, pos, slots = (torch.zeros(width, dtype=torch.long, device=device) for _ in range(3))
    return ids, pos, slots, torch.ones(width, max_seq, dtype=torch.bool, device=device)


def compile_program(module: torch.nn.Module, inputs: tuple, view_arg: tuple[int, int], max_seq: int,
                    out_path: Path, opt: str = "O1") -> Path:
    """Export `module` on `inputs` with the cache view length S dynamic (dim view_arg[1] of input
    view_arg[0]); compile to out_path."""
    view = Dim("S", min=2, max=max_seq)  # attention reads cache slots [0, S); S varies per call
    dynamic = tuple({view_arg[1]: view} if i == view_arg[0] else None for i in range(len(inputs)))
    program = torch.export.export(module, inputs, dynamic_shapes=dynamic)
    torch._inductor.aoti_compile_and_package(program, package_path=str(out_path), inductor_configs=INDUCTOR_CONFIGS[opt])
    return out_path


def lower_bucket(graph: LlamaGraph, width: int, max_seq: int, out_path: Path, device: str = "cpu",
                 opt: str = "O1") -> Path:
    """graph.forward at input width `width` -> out_path (.pt2)."""
    return compile_program(graph, example_inputs(width, max_seq, device), (3, 1), max_seq, out_path, opt)


def lower_draft_phase(phase: DraftPhase, max_seq: int, out_path: Path, device: str = "cpu", opt: str = "O1") -> Path:
    """The whole draft phase (head step, D-1 tree steps, top-W growth) -> one package."""
    long = {"dtype": torch.long, "device": device}
    inputs = (torch.zeros(HEAD_WIDTH, **long), torch.tensor([0, 1], **long), torch.arange(max_seq, device=device),
              torch.zeros(2, phase.depth, **long))
    return compile_program(phase, inputs, (2, 0), max_seq, out_path, opt)


def lower_verify_phase(phase: GreedyVerifyPhase, n_nodes: int, max_seq: int, out_path: Path,
                       device: str = "cpu", opt: str = "O1") -> Path:
    """Pruning, the verifier forward, greedy acceptance and KV compaction -> one package."""
    long = {"dtype": torch.long, "device": device}
    inputs = (torch.zeros(n_nodes, **long), torch.full((n_nodes,), -1, **long), torch.zeros(n_nodes, **long),
              torch.zeros(n_nodes, device=device), torch.eye(n_nodes, dtype=torch.bool, device=device),
              torch.tensor(0, **long), torch.arange(max_seq, device=device))
    return compile_program(phase, inputs, (6, 0), max_seq, out_path, opt)
