"""Stage 2 of ``yggc train eagle3``: the verifier's teacher-forced features of every training conversation, kept on
disk so that a resumed run reads them back instead of running the verifier again (on 2 CPU cores ~1 conversation
per second in float32: half an hour for the smollm2 preset's 2,000; several times that in bfloat16 where the CPU has
AVX512-BF16 or AMX).

The cache is one safetensors file per set of conversations, named by the sha256 of what determines its contents
(the verifier's config and weights files, the conversations' token ids and where their answers start), written
atomically. Features are stored in the dtype the verifier computed them in (bfloat16 ones as bfloat16: half the
bytes, the same values), and read back a conversation at a time from the memory-mapped file (MappedConversation),
so a run's memory holds the batches it trains on rather than every conversation's features.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..bundle import file_sha256
from ..graphs.llama import LlamaGraph
from .loop import progress
from .shards import Sample

FIELDS = ("tokens", "features", "final", "best")


@dataclass
class ConversationFeatures:
    """One conversation as the head trains on it: row p pairs the verifier's feature g_p with x_{p+1}."""

    tokens: torch.Tensor    # [T] long: x_{p+1}
    features: torch.Tensor  # [T, F] the verifier's dtype: g_p
    final: torch.Tensor     # [T, H] the verifier's dtype: the verifier's final hidden state at p + 1
    best: torch.Tensor      # [T] long: the verifier's argmax at p + 1 (a verifier token id)
    loss_from: int          # rows p >= loss_from predict answer tokens

    def __len__(self) -> int:
        return len(self.tokens)


class MappedConversation:
    """A ConversationFeatures whose tensors are read from the cache file when asked for (rows a..b of each field)."""

    def __init__(self, file: object, rows: tuple[int, int], loss_from: int):
        self._file, self._rows, self.loss_from = file, rows, loss_from

    def __len__(self) -> int:
        return self._rows[1] - self._rows[0]

    def _field(self, name: str) -> torch.Tensor:
        return self._file.get_slice(name)[self._rows[0]:self._rows[1]]

    tokens = property(lambda self: self._field("tokens"))
    features = property(lambda self: self._field("features"))
    final = property(lambda self: self._field("final"))
    best = property(lambda self: self._field("best"))


Conversation = ConversationFeatures | MappedConversation


def mapped_conversations(path: Path) -> list[MappedConversation]:
    """The conversations of a cache file, each read from the memory-mapped file when used."""
    from safetensors import safe_open

    file = safe_open(str(path), "pt")
    ends, starts = file.get_tensor("offsets").tolist(), file.get_tensor("loss_from").tolist()
    return [MappedConversation(file, (a, b), int(start)) for a, b, start in zip(ends, ends[1:], starts, strict=False)]


def extract(verifier: LlamaGraph, samples: list[Sample]) -> list[ConversationFeatures]:
    """Teacher-forced features of every conversation."""
    out = []
    with torch.inference_mode():
        for s in progress("features", iterable=samples):
            ids = torch.tensor(s.ids)
            pos = torch.arange(len(s.ids))
            logits, final, taps = verifier.run_layers(ids, pos, pos, pos[None, :] <= pos[:, None])
            feats = torch.cat(taps, -1)
            out.append(ConversationFeatures(ids[1:], feats[:-1], final[1:], logits[1:].argmax(-1),
                                            max(0, s.answer_start - 2)))
    return out


def verifier_digest(target: Path, dtype: str = "float32") -> str:
    """sha256 over the verifier's config and its tensors (each one's name, dtype, shape and values, in name order),
    and the dtype it runs in where that is not float32: what its features and answers depend on (read once a run).
    The weights files' own bytes are not hashed: the same tensors written again (another header, another order, on
    another machine) are the same verifier."""
    from safetensors import safe_open

    h = hashlib.sha256(f"config.json:{file_sha256(target / 'config.json')};".encode())
    for path in sorted(target.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in sorted(f.keys()):
                t = f.get_tensor(name).contiguous()
                h.update(f"{name}:{t.dtype}:{list(t.shape)};".encode())
                h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    digest = h.hexdigest()
    return digest if dtype == "float32" else f"{digest}:{dtype}"


def cache_key(verifier_id: str, samples: list[Sample]) -> str:
    """sha256 of the verifier's digest and of every conversation's ids and answer start."""
    h = hashlib.sha256(verifier_id.encode())
    for s in samples:
        h.update(f"{s.answer_start}:{','.join(map(str, s.ids))};".encode())
    return h.hexdigest()


def cached_extract(verifier: LlamaGraph, samples: list[Sample], verifier_id: str, cache_dir: Path
                   ) -> list[MappedConversation]:
    """extract()'s conversations, written to cache_dir once (verifier_id: verifier_digest of the verifier's folder)
    and read from there, memory-mapped, by this run and every later one."""
    from safetensors.torch import save_file

    if not samples:
        return []
    path = cache_dir / f"features-{cache_key(verifier_id, samples)[:32]}.safetensors"
    if not path.is_file():
        seqs = extract(verifier, samples)
        cache_dir.mkdir(parents=True, exist_ok=True)
        lengths = torch.tensor([0] + [len(s.tokens) for s in seqs])
        flat = {k: torch.cat([getattr(s, k) for s in seqs]) for k in FIELDS}
        flat |= {"offsets": lengths.cumsum(0), "loss_from": torch.tensor([s.loss_from for s in seqs])}
        tmp = path.with_suffix(".tmp")
        save_file({k: v.contiguous() for k, v in flat.items()}, str(tmp))
        tmp.rename(path)
    return mapped_conversations(path)
