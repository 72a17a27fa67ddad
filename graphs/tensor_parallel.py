"""Tensor-parallel Llama-family graphs on torch.distributed (Megatron-style; gloo on CPU, NCCL on GPUs).

Each of `world` ranks holds a LlamaGraph of its own slice, built from a local config with 1/world of the
attention heads, KV heads and MLP width, so its KV cache holds only its KV heads:
  - q/k/v and gate/up are split by output (column-parallel): each rank computes its heads and its slice
    of the MLP width, with no communication (a model with fewer KV heads than ranks replicates each KV
    head on the ranks whose query heads share it);
  - the attention output and down projections are split by input (row-parallel): each rank's partial
    sum is all-reduced (a forward hook on the layer; biases are added on rank 0 only);
  - the LM head is split by vocabulary rows (padded to a multiple of world) and the logits all-gathered,
    so every rank ends each forward with the full [W, vocab] logits and the decode loop above it runs
    unchanged and identically on every rank;
  - embeddings and norms are replicated.
The forward signature is the single-process graph's; launch one process per rank (torchrun) after
torch.distributed.init_process_group.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from .checkpoint import _check_dir, empty_graph, load_config, read_hf_tensors, to_graph_state
from .config import CheckpointError, ModelConfig
from .llama import LlamaGraph


def local_config(cfg: ModelConfig, world: int) -> ModelConfig:
    """One rank's share of the heads, KV heads and MLP width; one clear error where they do not divide."""
    if cfg.moe is not None:
        raise CheckpointError(f"tensor parallelism does not support {cfg.model_type} (MoE) verifiers yet; run it "
                              "on one process")
    kv_ok = cfg.n_kv_heads % world == 0 or world % cfg.n_kv_heads == 0  # fewer KV heads: each rank keeps one
    for name, n, ok in (("attention heads", cfg.n_heads, cfg.n_heads % world == 0),
                        ("key/value heads", cfg.n_kv_heads, kv_ok),
                        ("intermediate_size", cfg.intermediate_size, cfg.intermediate_size % world == 0)):
        if not ok:
            raise CheckpointError(f"{name} ({n}) do not split over {world} ranks; use a tensor-parallel degree "
                                  "that divides them")
    return dataclasses.replace(cfg, n_heads=cfg.n_heads // world, n_kv_heads=max(1, cfg.n_kv_heads // world),
                               intermediate_size=cfg.intermediate_size // world)


def _rows(t: torch.Tensor, rank: int, parts: int) -> torch.Tensor:
    n = t.shape[0] // parts
    return t[rank * n:(rank + 1) * n]


def _kv_rows(t: torch.Tensor, cfg: ModelConfig, rank: int, world: int) -> torch.Tensor:
    """This rank's KV heads; with fewer KV heads than ranks, the one KV head its query heads share."""
    if cfg.n_kv_heads >= world:
        return _rows(t, rank, world)
    return _rows(t, rank // (world // cfg.n_kv_heads), cfg.n_kv_heads)


def shard_state(state: dict[str, torch.Tensor], cfg: ModelConfig, rank: int, world: int) -> dict[str, torch.Tensor]:
    """The full graph state (to_graph_state's names) -> rank's slices under the same names."""
    q_rows, kv_rows = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out = {}
    for name, t in state.items():
        if name.endswith("attn.wqkv.weight") or name.endswith("attn.wqkv.bias"):
            q, k, v = t.split([q_rows, kv_rows, kv_rows])
            out[name] = torch.cat([_rows(q, rank, world), *(_kv_rows(x, cfg, rank, world) for x in (k, v))])
        elif name.endswith("mlp.w13.weight") or name.endswith("mlp.w13.bias"):
            gate, up = t.chunk(2)
            out[name] = torch.cat([_rows(gate, rank, world), _rows(up, rank, world)])
        elif name.endswith("attn.wo.weight") or name.endswith("mlp.w2.weight"):
            out[name] = _rows(t.t(), rank, world).t().contiguous()  # the input columns of this rank's heads
        elif name.endswith("attn.wo.bias") or name.endswith("mlp.w2.bias"):
            out[name] = t if rank == 0 else torch.zeros_like(t)  # added once, by the all-reduce
        else:
            out[name] = t
    return out


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
        self.register_buffer("weight", weight, persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        part = (h @ self.weight.t()).float()  # [W, n]
        n = part.shape[-1]
        padded = nn.functional.pad(part, (self.rank * n, (self.world - 1 - self.rank) * n))  # [W, world * n]
        full = sum_over_ranks(padded)
        in_vocab = torch.arange(full.shape[-1], device=full.device) < self.vocab  # [world * n]
        return torch.where(in_vocab, full, 0.0)[:, : self.vocab].to(h.dtype)  # [W, V], a new buffer


def head_rows(weight: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rows [rank * n, (rank + 1) * n) of the LM head, n = ceil(V / world), zero rows past V."""
    n = math.ceil(weight.shape[0] / world)
    rows = weight[rank * n:(rank + 1) * n]
    return torch.cat([rows, rows.new_zeros(n - rows.shape[0], rows.shape[1])]) if rows.shape[0] < n else rows


def load_tp_model(model_dir: str | Path, n_slots: int, dtype: torch.dtype = torch.float32,
                  device: str | torch.device = "cpu", rank: int | None = None, world: int | None = None) -> LlamaGraph:
    """This rank's LlamaGraph of a checkpoint split `world` ways (default: the initialised process group's)."""
    rank = dist.get_rank() if rank is None else rank
    world = dist.get_world_size() if world is None else world
    path = _check_dir(model_dir)
    full = load_config(path)
    graph = empty_graph(local_config(full, world), n_slots, dtype, device)
    state = to_graph_state(read_hf_tensors(path), full)
    state = {k: v.to(dtype) for k, v in shard_state(state, full, rank, world).items()}
    head = state.pop("lm_head.weight", state["embed.weight"])  # tied: the embedding's rows
    missing = set(graph.state_dict()) - set(state) - {"lm_head.weight"}
    if missing:
        raise CheckpointError(f"{path}: weight {sorted(missing)[0]!r} is missing")
    graph.load_state_dict(state, strict=False)
    graph.lm_head = VocabParallelHead(head_rows(head, rank, world).to(device), full.vocab_size, rank, world)
    for layer in graph.layers:
        layer.attn.wo.register_forward_hook(_all_reduce)
        layer.mlp.w2.register_forward_hook(_all_reduce)
    return graph.eval().requires_grad_(False)
