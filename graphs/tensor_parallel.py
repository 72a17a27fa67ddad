"""Tensor-parallel Llama-family graphs on torch.distributed (Megatron-style; gloo on CPU, NCCL on GPUs).

Each of `world` ranks holds a LlamaGraph of its own slice, built from a local config with 1/world of the
attention heads, KV heads and MLP width, so its KV cache holds only its KV heads:
  - q/k/v and gate/up are split by output (column-parallel): each rank computes its heads and its slice
    of the MLP width, with no communication (a model with fewer KV heads than ranks replicates each KV
    head on the ranks whose query heads share it);
  - the attention output and down projections are split by input (row-parallel): each rank's partial
    sum is all-reduced (a forward hook on the layer; biases are added on rank 0 only);
  - a mixture-of-experts layer splits every expert (and the shared expert) the same way and all-reduces
    the whole block's output once; the router is replicated, so every rank picks the same experts and
    runs the same torch.cond branches;
  - the LM head is split by vocabulary rows (padded to a multiple of world) and the ranks' logits summed
    into place, so every rank ends each forward with the full [W, vocab] logits and the decode loop above
    it runs unchanged and identically on every rank;
  - embeddings, norms and routers are replicated.
The forward signature is the single-process graph's; launch one process per rank (torchrun) after
torch.distributed.init_process_group.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from .checkpoint import _check_dir, empty_graph, load_config, read_hf_tensors, to_graph_state
from .config import CheckpointError, ModelConfig
from .llama import LlamaGraph
from .moe import MoeFeedForward


def local_config(cfg: ModelConfig, world: int) -> ModelConfig:
    """One rank's share of the heads, KV heads and MLP widths (every expert's too); one clear error where they
    do not divide."""
    kv_ok = cfg.n_kv_heads % world == 0 or world % cfg.n_kv_heads == 0  # fewer KV heads: each rank keeps one
    checks = [("attention heads", cfg.n_heads, cfg.n_heads % world == 0), ("key/value heads", cfg.n_kv_heads, kv_ok),
              ("intermediate_size", cfg.intermediate_size, cfg.intermediate_size % world == 0)]
    if cfg.moe is not None:  # every expert is split like a dense MLP; the router stays whole on every rank
        checks += [(name, n, n % world == 0) for name, n in (("expert intermediate size", cfg.moe.expert_size),
                                                             ("shared expert size", cfg.moe.shared_expert_size))]
    for name, n, ok in checks:
        if not ok:
            raise CheckpointError(f"{name} ({n}) do not split over {world} ranks; use a tensor-parallel degree "
                                  "that divides them")
    moe = cfg.moe and dataclasses.replace(cfg.moe, expert_size=cfg.moe.expert_size // world,
                                          shared_expert_size=cfg.moe.shared_expert_size // world)
    return dataclasses.replace(cfg, n_heads=cfg.n_heads // world, n_kv_heads=max(1, cfg.n_kv_heads // world),
                               intermediate_size=cfg.intermediate_size // world, moe=moe)


ROW_SPLIT = {"q_proj", "gate_proj", "up_proj", "w1", "w3"}  # column-parallel: this rank's output rows
KV_SPLIT = {"k_proj", "v_proj"}
COLUMN_SPLIT = {"o_proj", "down_proj", "w2"}  # row-parallel: this rank's input columns (w1/w2/w3: Mixtral experts)
Cut = tuple[int, int, int]  # (dim, start, stop) of a checkpoint tensor


def rank_cut(cfg: ModelConfig, rank: int, world: int) -> Callable[[str, list[int]], Cut | None]:
    """What rank reads of each checkpoint tensor (HF name, shape) -> a cut, or None for the whole tensor."""
    n_vocab = math.ceil(cfg.vocab_size / world)
    kv_group = rank // (world // cfg.n_kv_heads) if cfg.n_kv_heads < world else None  # a shared KV head

    def cut(name: str, shape: list[int]) -> Cut | None:
        proj, kind = ("", *name.split("."))[-2:]  # "...self_attn.q_proj.weight" -> q_proj, weight
        if name.endswith("lm_head.weight"):
            return 0, rank * n_vocab, min(cfg.vocab_size, (rank + 1) * n_vocab)
        if proj in KV_SPLIT and kv_group is not None:
            return 0, kv_group * cfg.head_dim, (kv_group + 1) * cfg.head_dim
        if proj in ROW_SPLIT | KV_SPLIT:
            n = shape[0] // world
            return 0, rank * n, (rank + 1) * n
        if proj in COLUMN_SPLIT and kind == "weight":
            n = shape[1] // world
            return 1, rank * n, (rank + 1) * n
        return None  # embeddings, norms, routers; a row-parallel bias, which rank 0 alone adds

    return cut


def _bias_once(state: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """A row-parallel layer's bias is added once, after the all-reduce: rank 0 keeps it, the others zero it."""
    if rank == 0:
        return state
    return {k: torch.zeros_like(v) if k.endswith(("attn.wo.bias", "w2.bias")) else v for k, v in state.items()}


def sum_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The elementwise sum of `t` over every rank. Traced (torch.export, torch.compile): a functional collective,
    which stays in the graph and runs from the compiled code. Eager: c10d's in-place all-reduce."""
    if torch.compiler.is_compiling():
        return funcol.all_reduce(t, "sum", dist.group.WORLD)
    dist.all_reduce(t)
    return t


def _all_reduce(module: nn.Module, inputs, output: torch.Tensor) -> torch.Tensor:
    """Sum the ranks' partial outputs, in float32 (bf16 partial sums would round once more per rank)."""
    return sum_over_ranks(output.float()).to(output.dtype)


class VocabParallelHead(nn.Module):
    """This rank's rows of the LM head ([n, hidden], n = ceil(V / world), zero-padded) -> the full [W, V] logits.

    The ranks' column blocks meet by an all-reduce of zero-padded [W, world * n] logits, and the result is
    copied out by a select, never returned as the collective's own buffer. In a compiled package, Gloo's
    worker thread drops its reference to that buffer a moment after the wait; once Python holds the tensor
    too, dropping it needs the GIL, which the package's caller keeps for the whole call, and its next
    collective then waits forever. (An all-gather's work holds such tensors whatever the graph does next.)
    """

    def __init__(self, weight: torch.Tensor, vocab: int, rank: int, world: int):
        super().__init__()
        self.vocab, self.rank, self.world = vocab, rank, world
        self.weight = nn.Parameter(weight, requires_grad=False)  # a weight like any other (counted, exported)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        part = (h @ self.weight.t()).float()  # [W, n]
        n = part.shape[-1]
        padded = nn.functional.pad(part, (self.rank * n, (self.world - 1 - self.rank) * n))  # [W, world * n]
        full = sum_over_ranks(padded)
        in_vocab = torch.arange(full.shape[-1], device=full.device) < self.vocab  # [world * n]
        return torch.where(in_vocab, full, 0.0)[:, : self.vocab].to(h.dtype)  # [W, V], a new buffer


def head_rows(state: dict[str, torch.Tensor], cfg: ModelConfig, rank: int, world: int) -> torch.Tensor:
    """This rank's n = ceil(V / world) rows of the LM head (the embedding's, if tied), zero rows past V."""
    n = math.ceil(cfg.vocab_size / world)
    rows = state.pop("lm_head.weight", None)  # untied: read already cut to these rows
    if rows is None:
        rows = state["embed.weight"][rank * n:(rank + 1) * n]
    return torch.cat([rows, rows.new_zeros(n - rows.shape[0], rows.shape[1])]) if rows.shape[0] < n else rows


def load_tp_model(model_dir: str | Path, n_slots: int, dtype: torch.dtype = torch.float32,
                  device: str | torch.device = "cpu", rank: int | None = None, world: int | None = None) -> LlamaGraph:
    """This rank's LlamaGraph of a checkpoint split `world` ways (default: the initialised process group's)."""
    rank = dist.get_rank() if rank is None else rank
    world = dist.get_world_size() if world is None else world
    path = _check_dir(model_dir)
    full = load_config(path)
    graph = empty_graph(local_config(full, world), n_slots, dtype, device)
    state = to_graph_state(read_hf_tensors(path, rank_cut(full, rank, world)), full)  # only this rank's slices
    state = {k: v.to(dtype) for k, v in _bias_once(state, rank).items()}
    head = head_rows(state, full, rank, world)
    missing = set(graph.state_dict()) - set(state) - {"lm_head.weight"}
    if missing:
        raise CheckpointError(f"{path}: weight {sorted(missing)[0]!r} is missing")
    graph.load_state_dict(state, strict=False)
    graph.lm_head = VocabParallelHead(head.to(device), full.vocab_size, rank, world)
    for layer in graph.layers:  # the row-parallel outputs: attention's, and the whole feed-forward's
        layer.attn.wo.register_forward_hook(_all_reduce)
        (layer.mlp if isinstance(layer.mlp, MoeFeedForward) else layer.mlp.w2).register_forward_hook(_all_reduce)
    return graph.eval().requires_grad_(False)
