"""Where tree code may run in NumPy instead of torch: eager decoding on the CPU.

The tree work around the model calls (EGT growth, pruning, masks, the greedy walk) is written as fixed-shape
torch code so that at O1 it compiles into the phases' single calls. Run eagerly, that code is many small torch
ops per iteration, and each pays torch's dispatch with cold caches, since the model call before it has just
streamed the weights through them; NumPy does the same work in a fraction of that time
(docs/benchmarks/host-costs.md).
egt_host.py holds the NumPy twin of EGT growth and verify_host.py the verify side's (plain Python over the few
kept nodes, fewer calls still); where the process has loaded the kernel library, two C++ ops
(artifacts/kernels/verify_tree.cpp) do the verify side's work instead. Tests check each bit for bit against the
torch code.
"""
from __future__ import annotations

import numpy as np
import torch


def eager_cpu(t: torch.Tensor) -> bool:
    """True for a CPU tensor outside tracing, export and compilation: where NumPy may stand in for torch."""
    return t.device.type == "cpu" and not (torch.compiler.is_compiling() or torch.compiler.is_exporting())


def tree_mask(n: int, anc: np.ndarray, view: int) -> np.ndarray:
    """token_tree.tree_mask: rows see slots < n and their ancestors (tree node j at slot n + j).
    anc [R, N] -> [R, view] bool."""
    mask = np.zeros((anc.shape[0], view), dtype=bool)
    mask[:, :n] = True
    width = max(0, min(anc.shape[1], view - n))
    mask[:, n:n + width] = anc[:, :width]
    return mask


def ancestor_rows(parents: list[int]) -> np.ndarray:
    """TokenTree.ancestor_mask for parents that precede their children (-1: the root): row i is its parent's row
    and i itself. [N] -> [N, N] bool, one row copy per node instead of log2(N) squarings of an [N, N] matrix."""
    anc = np.zeros((len(parents), len(parents)), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            anc[i] = anc[p]
        anc[i, i] = True
    return anc
