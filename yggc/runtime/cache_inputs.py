"""A compiled package that takes the KV caches as inputs (O2 and TensorRT buckets), bound to the model's own
cache: every bucket of a model, and its eager phases, read and write one cache."""
from __future__ import annotations

import torch


class CacheInputBucket:
    """A loaded package whose K/V caches are inputs, bound to the model's own cache tensors."""

    def __init__(self, runner, graph: torch.nn.Module):
        self.runner, self.caches = runner, graph.cache_tensors()

    def __call__(self, ids, pos, slots, mask):
        return self.runner(ids, pos, slots, mask, *self.caches)
