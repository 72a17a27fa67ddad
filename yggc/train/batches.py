"""Which items a training step reads: a pure function of the seed and the step, so that a resumed run reads the
batches an uninterrupted one would have."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

ROLES = ("verifier", "drafter")


def sample_batch(tokens: np.ndarray, seed: int, role: str, step: int, batch: int, seq_len: int) -> torch.Tensor:
    """Random windows of ``seq_len + 1`` tokens; a pure function of (seed, role, step)."""
    import torch

    rng = np.random.default_rng([seed, ROLES.index(role), step])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch)
    windows = np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(windows)


def batch_indices(n: int, seed: int, step: int, batch: int) -> list[int]:
    """Items of step `step`: consecutive slices of a fresh permutation of range(n) per epoch."""
    perms: dict[int, np.ndarray] = {}  # one permutation per epoch the step touches (at most two)
    out = []
    for k in range(step * batch, (step + 1) * batch):
        epoch, i = divmod(k, n)
        if epoch not in perms:
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(n)
        out.append(int(perms[epoch][i]))
    return out


@functools.lru_cache(maxsize=2)
def epoch_batches(lengths: tuple[int, ...], seed: int, epoch: int, batch: int, pool: int) -> tuple[tuple[int, ...], ...]:
    """The batches of one epoch: a fresh permutation of the items cut into pools of `pool` batches, each pool
    sorted by length and cut into batches, the epoch's batches then in a random order. Batches of similar lengths
    pad little; the n % batch items the permutation leaves last are not seen that epoch."""
    rng = np.random.default_rng([seed, epoch, 1])
    perm = rng.permutation(len(lengths))[:len(lengths) // batch * batch]
    out = []
    for start in range(0, len(perm), pool * batch):
        chunk = sorted(perm[start:start + pool * batch].tolist(), key=lambda i: (lengths[i], i))
        out += [tuple(chunk[i:i + batch]) for i in range(0, len(chunk), batch)]
    return tuple(out[i] for i in rng.permutation(len(out)))


def length_bucketed_indices(lengths: tuple[int, ...], seed: int, step: int, batch: int, pool: int = 16) -> list[int]:
    """Items of step `step`, in batches of similar lengths (epoch_batches); a pure function of the lengths, the seed
    and the step. Fewer items than a batch: batch_indices."""
    per_epoch = len(lengths) // batch
    if per_epoch == 0:
        return batch_indices(len(lengths), seed, step, batch)
    epoch, i = divmod(step, per_epoch)
    return list(epoch_batches(lengths, seed, epoch, batch, pool)[i])
