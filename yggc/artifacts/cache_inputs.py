"""A compiled package that takes the KV caches as inputs (O2 and TensorRT buckets), bound to the model's own
cache: every bucket of a model, and its eager phases, read and write one cache."""
from __future__ import annotations

import torch


class CacheInputBucket:
    """A loaded package whose K/V caches are inputs, bound to the model's own cache tensors (and then to the
    `fed` tensors it takes after them: an embedding table it shares with an EAGLE-3 head)."""

    def __init__(self, runner, graph: torch.nn.Module, fed: tuple[torch.Tensor, ...] = ()):
        self.runner, self.caches = runner, (*graph.cache_tensors(), *fed)
        # the one buffer the bound caches are views of (graphs/llama.py's pool_caches), else None
        self.kv_pool = graph.pooled() if hasattr(graph, "pooled") else None

    def __call__(self, *inputs):
        return self.runner(*inputs, *self.caches)

    @property
    def verifies_trees(self) -> bool:
        """Whether the runner runs the greedy verify phase around this package in one call (verify_tree)."""
        return getattr(self.runner, "verify_tree", None) is not None

    def verify_tree(self, tree: tuple[torch.Tensor, ...], n: int, view: int, verify: int, depth: int,
                    per_row: bool) -> list[torch.Tensor]:
        """The greedy verify phase around this package in one call (runtime/verify_phase.py's forward_ops; the
        runner's verify_tree, where it has one), the verifier's K/V moved in kv_pool if the caches have one."""
        return self.runner.verify_tree(*tree, n, view, verify, depth, list(self.caches), self.kv_pool, per_row)


class HeadBucket(CacheInputBucket):
    """An EAGLE-3 head's O2 package (lowered from forward_embedded): the runtime gathers the token rows from the
    verifier's embedding, which the package does not hold."""

    def __init__(self, runner, head: torch.nn.Module):
        super().__init__(runner, head)
        self.embed = head.embed

    def __call__(self, ids, feature, pos, slots, mask):
        return self.runner(self.embed(ids), feature, pos, slots, mask, *self.caches)
