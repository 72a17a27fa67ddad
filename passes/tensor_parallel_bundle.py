"""Compiling one bundle on N tensor-parallel ranks (`yggc compile --tp N`, or under torchrun).

Every rank runs the same compile pipeline in lockstep: the verifier's buckets and verify phase are its own
(its slice of the weights, the all-reduces and the vocab gather inside the compiled graph), so each rank
lowers and profiles those itself; the drafter is replicated, so rank 0 alone lowers its packages. Rank 0
owns the bundle: it opens the hidden directory every rank writes into, and it alone writes the JSON files
and the manifest, which lists each rank's verifier buckets with their "rank".
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ..bundle.manifest import BucketSpec
from ..errors import YggcError
from ..runtime.tp_processes import rank_world
from .write_bundle import BundleWriter


def barrier() -> None:
    """Wait for every rank (files another rank lowers are read after this)."""
    if dist.is_initialized():
        dist.barrier()


def split_file(rel: str, rank: int) -> str:
    """artifacts/verifier_w1.pt2 -> artifacts/verifier_w1.rank{rank}.pt2"""
    stem, dot, ext = rel.rpartition(".")
    return f"{stem}.rank{rank}{dot}{ext}"


def every_rank(buckets: list[BucketSpec], world: int) -> list[BucketSpec]:
    """Rank 0's buckets -> the manifest's: each split bucket once per rank, under that rank's file."""
    out = []
    for b in buckets:
        if b.rank is None:
            out.append(b)
            continue
        out += [replace(b, rank=r, file=b.file.replace(".rank0.", f".rank{r}.")) for r in range(world)]
    return out


class RankFiles:
    """What a rank other than 0 writes through: files into rank 0's directory; JSON and the manifest are
    rank 0's, so those calls do nothing here."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, rel: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, rel: str, obj: Any) -> None:
        pass

    def copy_model_dir(self, src, name: str, weights: bool = True) -> None:
        pass

    def finish(self, manifest_fields) -> None:
        pass


@contextmanager
def bundle_writer(out: Path, overwrite: bool):
    """A BundleWriter on one process; on several, rank 0's, whose directory (or whose one-line error) every
    rank receives, and which commits only after every rank has finished."""
    rank, world = rank_world()
    if world == 1:
        with BundleWriter(out, overwrite) as w:
            yield w
        return
    if rank:
        root = [None, None]
        dist.broadcast_object_list(root, src=0)
        if root[1]:
            raise YggcError(root[1])
        yield RankFiles(Path(root[0]))
        barrier()
        return
    announced = False
    try:
        with BundleWriter(out, overwrite) as w:  # entering checks the output path: a one-line error
            dist.broadcast_object_list([str(w.root), None], src=0)
            announced = True
            yield w
            barrier()
    except YggcError as e:
        if not announced:
            dist.broadcast_object_list([None, str(e)], src=0)
        raise
