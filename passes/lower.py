"""Lower pass: the models' forwards (and, at O1, the fused draft/verify phases) as AOTInductor packages.

torch.export captures the graph's forward; Inductor compiles it to C++ (CPU) or Triton (CUDA) kernels.
The cache view length S is always dynamic. How buckets map onto packages depends on the level:

O1: one package per (model, width) bucket; weights and the KV cache stay out of the packages, so every
    bucket of a model shares them, and the draft and verify phases are fused packages of their own.
O2: one package per model with the width W dynamic too (1..max_width), serving every bucket of that
    model. Weights are frozen into it and packed once for Inductor's C++ GEMM template (max-autotune),
    which keeps small-W steps at the memory floor where the BLAS library's small-M GEMMs are not
    (docs/benchmarks/cpu-verify-curve.md); the KV caches are its inputs (frozen_export.FrozenForward). The
    verify phase runs eagerly around it, so the verifier's weights exist once; an EAGLE-3 head's draft phase
    is one package of its own (lower_frozen_draft_phase), the head's layer frozen in a second time. On a CPU
    the packed constants are written beside the package (external_constants.py) and the runtime maps them
    instead of copying them.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
from torch.export import Dim

from ..artifacts import kernel_ops
from ..bundle.machine import device_kind
from ..bundle.manifest import OptLevel
from ..graphs import LlamaGraph
from ..graphs.eagle3 import Eagle3Graph
from ..graphs.llama import AttendFn, attend_rowwise, set_exported_attention
from ..graphs.moe import MoeFeedForward
from ..runtime.draft_phase import FrozenPhase
from ..runtime.verify_phase import GreedyVerifyPhase
from . import external_constants, package_cache, quant_linear, tied_head
from .frozen_export import FrozenForward
from .kernels import avx2_bf16_gemm, avx512_bf16_gemm, kernel_library

# O2's realize_opcount_threshold: a pointwise result costing more ops than this is written once instead of
# being inlined into every consumer. Inductor's CPU default (30) inlines RoPE'd queries and attention's
# masked scores into the loops over cache slots, recomputed per slot; at 16 they are written once, which made
# every verify width faster on SmolLM2 (docs/benchmarks/cpu-verify-curve.md).
INDUCTOR_CONFIGS = {OptLevel.O1: {"aot_inductor.package_constants_in_so": False},
                    OptLevel.O2: {"freezing": True, "max_autotune": True, "realize_opcount_threshold": 16}}
# O2 on a CPU: only Inductor's C++ GEMM template. Its K loop does not depend on the row count, so rows are
# batch-invariant; MKL's small-M kernels are neither invariant nor near the memory floor.
CPU_GEMM_BACKENDS = "CPP"
# An MoE graph's experts are torch.cond branches, whose weights reach the branch as operands, not frozen
# constants: the C++ template cannot pack them, so their GEMMs need the BLAS (ATen) choice too.
MOE_CPU_GEMM_BACKENDS = "CPP,ATEN"
O2_TUNE_WIDTH = 4  # the width O2's GEMM blocking is tuned at: a typical verify width, cheap at 1 too
# O2 on a CPU: a pointwise or norm kernel forks threads only where each gets this many elements at O2_TUNE_WIDTH rows
# (Inductor's default, 512, forks every one). A fork-join costs more than SmolLM2's 576-wide norms and 1536-wide
# SiLU take on one thread: its verifier then forks 4 times a layer instead of 11, the 1-row step gains and a 64-row
# prefill chunk loses a little (docs/benchmarks/cpu-verify-curve.md). Bits do not change.
CPU_MIN_CHUNK = 4096


def constants_beside(opt: OptLevel, device: str, sparse: bool = False) -> bool:
    """Whether the package's constants go beside it (external_constants.py): O2 on a CPU. Not an MoE graph's, whose
    ATen GEMMs may take oneDNN-packed weights, which are opaque tensors (compile_beside would compile it twice)."""
    return opt == OptLevel.O2 and device_kind(device) == "cpu" and not sparse


def inductor_config(opt: OptLevel, device: str, sparse: bool = False) -> dict:
    # no autotune tables or choice stats written to stderr: the CLI prints yggc's lines only
    config = dict(INDUCTOR_CONFIGS[opt], autotune_num_choices_displayed=0, max_autotune_report_choices_stats=False)
    if opt == OptLevel.O2 and device == "cpu":
        avx512_bf16_gemm.register()
        avx2_bf16_gemm.register()
        config["max_autotune_gemm_backends"] = MOE_CPU_GEMM_BACKENDS if sparse else CPU_GEMM_BACKENDS
        config["cpp.min_chunk_size"] = CPU_MIN_CHUNK
    return config


def exported_attention(device: str) -> AttendFn:
    """CPU: the attention kernel op (built and registered here), batch-invariant and several times faster
    than Inductor's loops over attend_rowwise's products; CUDA: attend_rowwise, compiled to Triton."""
    if device_kind(device) != "cpu":
        return attend_rowwise
    kernel_library.build()
    return kernel_ops.attend_rows


def example_inputs(width: int, max_seq: int, device: str) -> tuple[torch.Tensor, ...]:
    # distinct tensors: export treats one tensor passed twice as aliased inputs
    ids, pos, slots = (torch.zeros(width, dtype=torch.long, device=device) for _ in range(3))
    return ids, pos, slots, torch.ones(width, max_seq, dtype=torch.bool, device=device)


def view_dim(max_seq: int) -> Dim:
    return Dim("S", min=2, max=max_seq)  # attention reads cache slots [0, S); S varies per call


def compile_program(module: torch.nn.Module, inputs: tuple, dynamic: tuple | dict, out_path: Path, opt: OptLevel = OptLevel.O1,
                    device: str = "cpu") -> Path:
    """Export `module` on `inputs` with the `dynamic` dims (torch.export's dynamic_shapes); compile to out_path, or
    copy what an earlier compile of the same program made (the active package cache)."""
    graph = module.call if isinstance(module, FrozenForward) else module  # FrozenForward hides its graph
    attend = exported_attention(device)
    set_exported_attention(graph, attend)
    program = torch.export.export(module, inputs, dynamic_shapes=dynamic)
    sparse = any(isinstance(m, MoeFeedForward) for m in graph.modules())
    config = inductor_config(opt, device, sparse)
    cache = package_cache.active()  # the compile's (passes/package_cache.py); none outside one
    key = package_cache.program_key(program, config, device, weights_inside=opt == OptLevel.O2) if cache else ""
    if cache is None or not cache.fetch(key, out_path):
        if constants_beside(opt, device, sparse):
            external_constants.compile_beside(program, out_path, config)
        else:
            torch._inductor.aoti_compile_and_package(program, package_path=str(out_path), inductor_configs=config)
        if cache:
            cache.store(key, out_path)
    if attend is kernel_ops.attend_rows:  # the packages call the op: the runtime loads it from beside them
        kernel_library.install_beside(out_path)
    return out_path


def view_only(n_inputs: int, arg: int, dim: int, max_seq: int) -> tuple:
    """dynamic_shapes with only the cache view length (dim `dim` of input `arg`) dynamic."""
    return tuple({dim: view_dim(max_seq)} if i == arg else None for i in range(n_inputs))


def lower_bucket(graph: LlamaGraph, width: int, max_seq: int, out_path: Path, device: str = "cpu",
                 opt: OptLevel = OptLevel.O1) -> Path:
    """graph.forward at input width `width` -> out_path (.pt2)."""
    return compile_program(graph, example_inputs(width, max_seq, device), view_only(4, 3, 1, max_seq), out_path,
                           opt, device)


def lower_frozen(module: FrozenForward, graph: torch.nn.Module, inputs: tuple, max_width: int, max_seq: int,
                 out_path: Path, device: str, opt: str, fed: tuple[torch.Tensor, ...] = ()) -> Path:
    """A FrozenForward of `graph` whose method takes `inputs` (width-first, the attention mask last) at every
    width 1..max_width and cache view, the caches (clones: no aliasing) and then the module's `fed` tensors as
    static trailing inputs -> one package."""
    width = Dim("W", min=1, max=max_width)
    static = tuple(t.detach().clone() for t in (*graph.cache_tensors(), *fed))
    dims = (*({0: width} for _ in inputs[:-1]), {0: width, 1: view_dim(max_seq)}, *(None for _ in static))
    return compile_program(module, (*inputs, *static), {"inputs": dims}, out_path, opt, device)


def lower_model(graph: LlamaGraph, max_width: int, max_seq: int, out_path: Path, device: str = "cpu",
                opt: OptLevel = OptLevel.O2, features: bool = False, shared_table: tuple[torch.Tensor, ...] = ()) -> Path:
    """graph.forward (features: graph.forward_features) at every input width 1..max_width, weights frozen
    in and the caches as trailing inputs -> one package. A tied bf16 table is held once where tied_head applies;
    shared_table: (the packed table,) an EAGLE-3 head gathers its rows from, which the package then takes as its
    last input instead of holding it (DrafterKind.package_inputs). Layers the loader gave blocks (block_linears) read
    them through the quantized linear op (passes/quant_linear.py)."""
    packs, quantized = tied_head.applies(graph, device, opt), quant_linear.applies(graph, device, opt)
    if shared_table and not packs:
        raise ValueError("lower_model: a shared table needs a tied bf16 graph that tied_head applies to")
    with (tied_head.packed_table(graph, *shared_table) if packs else nullcontext(),
          quant_linear.quantized_layers(graph) if quantized else nullcontext()):
        module = FrozenForward(graph, "forward_features" if features else "forward",
                               fed=("embed.packed",) if shared_table else ())
        inputs = example_inputs(min(O2_TUNE_WIDTH, max_width), max_seq, device)
        return lower_frozen(module, graph, inputs, max_width, max_seq, out_path, device, opt, shared_table)


def lower_head_model(head: Eagle3Graph, max_width: int, max_seq: int, out_path: Path, device: str = "cpu",
                     opt: OptLevel = OptLevel.O2) -> Path:
    """An EAGLE-3 head's forward_embedded at every input width 1..max_width, weights frozen in (not the token
    embedding: the verifier's, gathered by the runtime) and the caches as trailing inputs -> one package:
    (embedded [W, H], feature [W, H], position_ids, cache_slots, attn_mask [W, S], k, v) -> (logits, feature)."""
    _, pos, slots, mask = example_inputs(min(O2_TUNE_WIDTH, max_width), max_seq, device)
    rows = torch.zeros(pos.shape[0], head.cfg.hidden_size, dtype=head.fc.weight.dtype, device=device)
    module = FrozenForward(head, "forward_embedded", unused=("embed.weight", "embed.packed"))
    return lower_frozen(module, head, (rows, rows.clone(), pos, slots, mask), max_width, max_seq, out_path, device,
                        opt)


def lower_draft_phase(phase: torch.nn.Module, max_seq: int, out_path: Path, device: str = "cpu",
                      opt: OptLevel = OptLevel.O1) -> Path:
    """The whole draft phase (head step, D-1 tree steps, top-W growth) of any drafter kind -> one package."""
    inputs, view_arg = phase.export_inputs(max_seq, device)
    return compile_program(phase, inputs, view_only(len(inputs), view_arg, 0, max_seq), out_path, opt, device)


def lower_frozen_draft_phase(phase: FrozenPhase, max_seq: int, out_path: Path, device: str = "cpu",
                             opt: OptLevel = OptLevel.O2) -> Path:
    """The whole draft phase with the drafter's weights frozen in, its caches and then its fed tables as static
    trailing inputs (clones: no aliasing) -> one package (O2)."""
    module = FrozenForward(phase.module, "forward", unused=phase.unused, fed=phase.fed)
    inputs, view_arg = phase.module.export_inputs(max_seq, device)
    static = tuple(t.detach().clone() for t in (*phase.module.cache_tensors(), *phase.fed_tensors()))
    dims = (*view_only(len(inputs), view_arg, 0, max_seq), *(None for _ in static))
    return compile_program(module, (*inputs, *static), {"inputs": dims}, out_path, opt, device)


def lower_verify_phase(phase: GreedyVerifyPhase, n_nodes: int, max_seq: int, out_path: Path,
                       device: str = "cpu", opt: OptLevel = OptLevel.O1) -> Path:
    """Pruning, the verifier forward, greedy acceptance and KV compaction -> one package."""
    long = {"dtype": torch.long, "device": device}
    inputs = (torch.zeros(n_nodes, **long), torch.full((n_nodes,), -1, **long), torch.zeros(n_nodes, **long),
              torch.zeros(n_nodes, device=device), torch.eye(n_nodes, dtype=torch.bool, device=device),
              torch.tensor(0, **long), torch.arange(max_seq, device=device))
    return compile_program(phase, inputs, view_only(len(inputs), 6, 0, max_seq), out_path, opt, device)
