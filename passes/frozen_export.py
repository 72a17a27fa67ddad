"""The module an O2 package is exported from: a graph's forward with its weights frozen in and its KV
caches as inputs, laid out so that the package holds each weight once.

Caches as inputs: a mutated buffer is frozen into the package as a constant (the whole [KV, n_slots, hd]
cache of every layer, 47 MB for SmolLM2 at 2048 slots), copied at load and never used once the
runtime binds its own cache; as inputs they cost nothing in the package.

Linear weights registered transposed ([in, out], contiguous) and flat (no dots in the name): Inductor's
C++ GEMM template repacks each weight into its blocked layout and drops the original only when the GEMM
reads the weight constant itself, not a view of it, and the constant's name equals its FX get_attr
target (torch 2.13, cpp_gemm_template.prune_tensors). nn.Linear reads weight.t(), a view, and a nested
module's targets are dotted paths, so every original weight stayed in the package beside its packed
copy: twice the weights on disk, in the load-time copy and in RSS.
"""
from __future__ import annotations

import itertools

import torch
from torch import nn


def flat_name(fqn: str) -> str:
    return fqn.replace(".", "_")


def linear_only_weights(graph: nn.Module) -> set[int]:
    """ids of the parameters that only nn.Linear layers read as their weight (a tied embedding is not one)."""
    linear = {id(m.weight) for m in graph.modules() if isinstance(m, nn.Linear)}
    elsewhere = {id(p) for m in graph.modules() if not isinstance(m, nn.Linear) for p in m.parameters(recurse=False)}
    return linear - elsewhere


class _Method(nn.Module):
    """graph.<method> as a module's forward, for torch.func.functional_call."""

    def __init__(self, graph: nn.Module, method: str):
        super().__init__()
        self.graph, self.method = graph, method

    def forward(self, *args):
        return getattr(self.graph, self.method)(*args)


class FrozenForward(nn.Module):
    """(the method's inputs, e.g. input_ids [W], position_ids [W], cache_slots [W], attn_mask [W, S]; then
    k0, v0, k1, v1, ...; then the `fed` tensors) -> graph.<method>(...) with the caches passed in (method:
    "forward" -> logits, "forward_features", or an EAGLE-3 head's "forward_embedded"). `unused`: parameters the
    method never reads, left out of the package. `fed`: parameters passed in after the caches instead of
    frozen in (a table the runtime shares with another model), one input per tensor whatever its names.
    Holds transposed copies of the linear weights: build it for an export only."""

    def __init__(self, graph: nn.Module, method: str = "forward", unused: tuple[str, ...] = (),
                 fed: tuple[str, ...] = ()):
        super().__init__()
        self.__dict__["call"] = _Method(graph, method)  # not a submodule: its tensors are registered below
        caches, transpose = {id(t) for t in graph.cache_tensors()}, linear_only_weights(graph)
        caches |= {id(t) for name, t in graph.named_parameters() if name in unused}  # `method` never reads them
        fed_ids = [id(t) for name, t in graph.named_parameters() if name in fed]
        self.fed: list[list[str]] = [[] for _ in fed_ids]  # per fed input: every "graph." name it goes by
        self.sources: dict[str, str] = {}  # "graph." + the graph's tensor name -> this module's attribute
        self.transposed: set[str] = set()
        registered: dict[int, str] = {}  # tied tensors are registered once
        for fqn, t in itertools.chain(graph.named_parameters(remove_duplicate=False),
                                      graph.named_buffers(remove_duplicate=False)):
            if id(t) in fed_ids:
                self.fed[fed_ids.index(id(t))].append("graph." + fqn)
            if id(t) in caches or id(t) in fed_ids:
                continue
            if id(t) not in registered:
                registered[id(t)] = name = flat_name(fqn)
                if id(t) in transpose:
                    self.register_parameter(name, nn.Parameter(t.t().contiguous(), requires_grad=False))
                    self.transposed.add(name)
                elif isinstance(t, nn.Parameter):
                    self.register_parameter(name, t)
                else:
                    self.register_buffer(name, t, persistent=False)
            self.sources["graph." + fqn] = registered[id(t)]

    def graph_tensor(self, attr: str) -> torch.Tensor:
        t = getattr(self, attr)
        return t.t() if attr in self.transposed else t  # [out, in] again, as nn.Linear expects

    def forward(self, *inputs):
        """The method's inputs, then the caches (k0, v0, k1, v1, ...), then the fed tensors."""
        tensors = {fqn: self.graph_tensor(attr) for fqn, attr in self.sources.items()}
        if self.fed:
            inputs, fed = inputs[:-len(self.fed)], inputs[-len(self.fed):]
            tensors.update({fqn: t for names, t in zip(self.fed, fed) for fqn in names})
        return torch.func.functional_call(self.call, tensors, inputs, tie_weights=False)
