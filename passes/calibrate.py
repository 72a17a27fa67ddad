"""Calibration, for pipeline.py's calibrate pass: greedy decoding on the user's calibration text, recording every
draft tree.

For each candidate width W the pair decodes a few windows of the calibration text with the largest
tree of that width (depth D_max, every node verified) through the already-lowered forward buckets.
Each iteration's tree is kept with the verifier's continuation after its root, which prices every
(D <= D_max, W, V) shape at once (yggc/plan/calibration.py). At a temperature (`yggc compile --temp`) the pair decodes the same windows by
sampling, and each iteration's tree is kept with every node's exact probability of being accepted by the
T > 0 rule, which prices every smaller shape of that width by expectation.
"""
from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from ..artifacts.cache_layout import CacheLayout
from ..artifacts.timing import median_ms
from ..errors import YggcError
from ..plan.calibration import TreeSample, acceptance_rates, as_tree_sample
from ..plan.depth_predictor import root_features
from ..plan.shape import TreeShape
from ..runtime.draft import Draft, DraftRequest
from ..runtime.drafters import speculative_decoder
from ..runtime.speculative import SpeculativeDecoder
from ..tree.block_verification import block_prefix_expected_accepted
from ..tree.recursive_rejection import acceptance_probs
from ..tree.sampling import SamplingParams, next_token

MIN_PROMPT_TOKENS = 4


@dataclass(frozen=True)
class CalibrationSpec:
    files: tuple[Path, ...]
    n_prompts: int = 16      # windows of the calibration text decoded per width
    prompt_tokens: int = 64  # tokens per window
    new_tokens: int = 64     # greedy tokens decoded after each window
    max_depth: int = 8       # D_max: deepest tree priced
    widths: tuple[int, ...] = (1, 2, 4)
    pin_depth: int | None = None   # --depth given with --calib: only this depth competes
    pin_verify: int | None = None  # --verify given with --calib: only this verify width competes
    temperature: float = 0.0  # --temp: also price the shapes for sampling at this temperature
    probe: bool = True  # also profile the probe widths first (O1: a package each), for cost-curve points in 2..32


def read_calibration_text(files: tuple[Path, ...]) -> list[tuple[Path, str]]:
    """Each file as UTF-8 text, with one clear error for a missing, unreadable or empty file."""
    texts = []
    for path in files:
        if not path.is_file():
            raise YggcError(f"calibration file {path} does not exist; pass text files to --calib")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise YggcError(f"calibration file {path} is not UTF-8 text; pass plain text files to --calib") from None
        if not text.strip():
            raise YggcError(f"calibration file {path} is empty; pass text the model will see to --calib")
        texts.append((path, text))
    return texts


def calibration_prompts(texts: list[str], tokenizer, n_prompts: int, prompt_tokens: int) -> list[list[int]]:
    """Up to n_prompts windows of prompt_tokens, spread evenly over the concatenated calibration text."""
    ids = [t for text in texts for t in tokenizer.encode(text).ids]
    if len(ids) < MIN_PROMPT_TOKENS:
        raise YggcError(f"the calibration text is only {len(ids)} tokens; give --calib at least "
                        f"{MIN_PROMPT_TOKENS} (a few paragraphs of typical prompts)")
    size = min(prompt_tokens, len(ids))
    span = len(ids) - size
    count = max(1, min(n_prompts, span // max(1, size // 2) + 1))  # windows overlap by at most half
    starts = sorted({round(i * span / max(1, count - 1)) for i in range(count)}) if count > 1 else [0]
    return [ids[s:s + size] for s in starts]


def recording_decoder(verifier, drafter, layout: CacheLayout, shape: TreeShape
                      ) -> tuple[SpeculativeDecoder, list[tuple[int, Draft, torch.Tensor]]]:
    """The pair's greedy tree decoder (of the drafter's kind) and the list it appends (root slot, draft
    tree, root features) to on every iteration."""
    dec = speculative_decoder(verifier, drafter, layout, shape)
    drafts: list[tuple[int, Draft, torch.Tensor]] = []
    propose = dec.proposer.propose

    def recorded(request: DraftRequest) -> Draft:
        draft = propose(request)
        drafts.append((request.n, draft, root_features(dec.bonus_logits)))
        return draft

    dec.proposer.propose = recorded
    return dec, drafts


def record_width(verifier, drafter, layout: CacheLayout, prompts: list[list[int]], width: int,
                 spec: CalibrationSpec) -> list[TreeSample]:
    """Greedy decoding of every prompt with the D_max x W tree; one sample per iteration with a full
    continuation (the last iterations of a prompt see fewer than D_max tokens ahead and are dropped)."""
    shape = TreeShape(spec.max_depth, width, spec.max_depth * width)
    samples = []
    for prompt in prompts:
        dec, drafts = recording_decoder(verifier, drafter, layout, shape)
        seq = list(prompt) + [t for chunk in dec.stream(prompt, spec.new_tokens, SamplingParams()) for t in chunk]
        for n, draft, features in drafts:
            continuation = seq[n + 1: n + 1 + spec.max_depth]
            if len(continuation) == spec.max_depth:
                samples.append(as_tree_sample(draft.tree, width, continuation, features))
    return samples


def sampled_path_prob(draft: Draft, kept: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """[n_nodes] each drafted node's probability of being accepted at T > 0 (kept: every node, in the order
    the verifier saw them; probs [len(kept), vocab] its distributions there): recursive rejection sampling
    for a tree; for a chain the token-level rule (its tokens per iteration come from block_chain_accepted)."""
    if draft.q_rows is not None:
        rows = draft.q_rows  # [N, vocab] the drafter's distribution after each node
    else:  # a chain: node d was drawn from the distribution after node d - 1
        rows = torch.cat([draft.q, draft.q.new_zeros(1, draft.q.shape[1])])
    sub = draft.tree.subtree(kept)
    out = torch.zeros(draft.tree.n_nodes, dtype=torch.float64)
    out[kept.cpu()] = acceptance_probs(sub.tokens.cpu(), sub.parents.cpu(), probs.cpu(), rows[kept].cpu())
    return out


def block_chain_accepted(draft: Draft, kept: torch.Tensor, probs: torch.Tensor) -> torch.Tensor | None:
    """A sampled chain's [D + 1] expected drafts accepted by block verification (the runtime's chain rule) when its
    first v drafts are verified, v = 0..D (kept, probs as sampled_path_prob's); None for a tree."""
    if draft.q is None:
        return None
    return block_prefix_expected_accepted(draft.tree.subtree(kept).tokens[1:].cpu(), draft.q.cpu(), probs.cpu())


def record_width_sampled(verifier, drafter, layout: CacheLayout, prompts: list[list[int]], width: int,
                         spec: CalibrationSpec) -> tuple[list[TreeSample], float]:
    """Sampled decoding (seeded per window) of every prompt with the D_max x W tree at spec.temperature -> one
    sample per iteration, and the median ms of an iteration (host sampling work included)."""
    shape = TreeShape(spec.max_depth, width, spec.max_depth * width)
    samples, iteration_ms = [], []
    for seed, prompt in enumerate(prompts):
        dec = speculative_decoder(verifier, drafter, layout, shape)
        dec.on_sampled_verify = lambda draft, kept, probs: samples.append(
            as_tree_sample(draft.tree, width, [], path_prob=sampled_path_prob(draft, kept, probs),
                           chain_accepted=block_chain_accepted(draft, kept, probs)))
        for _ in dec.stream(prompt, spec.new_tokens, SamplingParams(spec.temperature, seed=seed)):
            pass
        if dec.stats.n_iterations:
            iteration_ms.append(1e3 * dec.stats.decode_s / dec.stats.n_iterations)
    return samples, statistics.median(iteration_ms) if iteration_ms else 0.0


def rank_acceptance(samples: list[TreeSample], ranks: int = 4) -> list[float]:
    """The chance that a node's i-th child (draw order: a node's children take ids in the order of its draws) is
    accepted once the node is, i = 1..ranks, over sampled trees (their path_prob): what a sampled tree prices its
    draws at (sampled_egt.RANK_ACCEPTANCE). A rank never drafted copies the rank above it."""
    hit, tried = [0.0] * ranks, [0.0] * ranks
    for sample in samples:
        seen: dict[int, int] = {}  # parent -> children so far
        parents, prob = sample.tree.parents[: sample.tree.n_nodes].tolist(), sample.path_prob.tolist()
        for node in range(1, sample.tree.n_nodes):
            rank = seen.get(parents[node], 0)
            seen[parents[node]] = rank + 1
            if rank < ranks:
                hit[rank] += prob[node]
                tried[rank] += prob[parents[node]]
    rates: list[float] = []
    for h, t in zip(hit, tried, strict=True):
        rates.append(h / t if t > 0 else rates[-1] if rates else 1.0)
    return [round(min(r, rates[i - 1] if i else r), 4) for i, r in enumerate(rates)]


def sample_token_ms(vocab: int, temperature: float) -> float:
    """Drawing one token from a verifier distribution at `temperature`: what plain decoding adds per step at
    T > 0, the sampling objective's baseline beside the verifier's step."""
    logits, params = torch.randn(vocab, generator=torch.Generator().manual_seed(0)), SamplingParams(temperature, seed=0)
    gen = params.generator()
    return median_ms(lambda: next_token(logits, params, gen), 50)


def calibrate(verifier, drafter, layout: CacheLayout, tokenizer, spec: CalibrationSpec,
              log=None, sampled: bool = False) -> tuple[list[TreeSample], dict]:
    """-> tree samples for every width, and the record written to calibration.json (sampled: decoded at
    spec.temperature, the record also holds each width's measured iteration ms)."""
    texts = read_calibration_text(spec.files)
    # a window, its new tokens and the largest tree must fit in the cache
    room = layout.max_seq - spec.new_tokens - 1 - spec.max_depth * max(spec.widths)
    if room < MIN_PROMPT_TOKENS:
        raise YggcError(f"--max-seq {layout.max_seq} leaves no room for calibration ({spec.new_tokens} new tokens and "
                        f"a {spec.max_depth}x{max(spec.widths)} tree); raise --max-seq or lower --calib-tokens")
    prompts = calibration_prompts([t for _, t in texts], tokenizer, spec.n_prompts, min(spec.prompt_tokens, room))
    samples, iteration_ms = [], {}
    for width in spec.widths:
        if sampled:
            got, iteration_ms[str(width)] = record_width_sampled(verifier, drafter, layout, prompts, width, spec)
        else:
            got = record_width(verifier, drafter, layout, prompts, width, spec)
        if not got:
            raise YggcError(f"calibration decoding produced no tree with {spec.max_depth} tokens after it at width "
                            f"{width}; raise --calib-tokens above {spec.max_depth}")
        samples += got
        if log:
            log(f"calibrated W={width}{f' at T={spec.temperature:g}' if sampled else ''}: {len(got)} trees")
    record = {"files": [{"name": p.name, "sha256": hashlib.sha256(t.encode()).hexdigest()} for p, t in texts],
              "n_prompts": len(prompts), "prompt_tokens": [len(p) for p in prompts],
              "new_tokens": spec.new_tokens, "max_depth": spec.max_depth, "widths": list(spec.widths),
              "n_trees": {str(w): sum(s.width == w for s in samples) for w in spec.widths},
              "acceptance_by_depth": {str(w): [round(p, 4) for p in acceptance_rates([s for s in samples if s.width == w])]
                                      for w in spec.widths}}
    if sampled:
        record |= {"temperature": spec.temperature, "iteration_ms": iteration_ms,
                   "token_ms": sample_token_ms(verifier.cfg.vocab_size, spec.temperature),
                   "rank_acceptance": rank_acceptance(samples)}
    return samples, record
