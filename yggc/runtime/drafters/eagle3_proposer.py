"""The EAGLE-3 proposer (eagle3.txt): an EAGLE-3 head drafting the same EGT as the standalone proposer, verified and
accepted by the same loop; what differs is what the drafter reads, and that verification hands it features.

The head's cache row p pairs the verifier's feature at position p with the token at p + 1. So at the
top of an iteration with the root at verifier slot n, the head holds rows 0..n-2 and `pending` pairs
(the accepted path of the last verify: its rows' verifier features and the tokens after them, the
root's last) go to slots n-len..n-1. The last pending pair is tree node 0: tree node i sits at head slot
n-1+i and RoPE position n-1+depth, and is fed its parent's output feature. Each head step rewrites the
accepted path with the verifier's own features, so the head needs no K/V moves.
"""
from __future__ import annotations

import torch
from torch import nn

from ...artifacts.cache_layout import CacheLayout, causal_rows
from ...artifacts.timing import NoTrace
from ...plan.shape import TreeShape
from ...tree.egt import egt_from_root, egt_frontier, egt_step
from ...tree.sampled_egt import RANK_ACCEPTANCE
from ...tree.token_tree import tree_mask
from .. import model_drafting, prompt_cache
from ..autoregressive import PREFILL_CHUNK
from ..draft import Draft, DraftRequest
from ..loading import model_device
from ..verify_phase import GreedyVerifyPhase


def unfused(features: torch.Tensor) -> torch.Tensor:
    """The features as they come: the verifier's package already ran the head's fc on them."""
    return features


class Eagle3DraftPhase(nn.Module):
    """The EGT draft phase of an EAGLE-3 head, one fixed-shape module like DraftPhase."""

    def __init__(self, head: nn.Module, depth: int, width: int, vocab: int, trash: int, step=None, fuse=None,
                 draft_space: bool = False):
        super().__init__()
        self.head_model, self.depth, self.width, self.vocab, self.trash = head, depth, width, vocab, trash
        # defaults: what an O1 bundle compiles (Eagle3Kind.draft_phase), the head's graph and its own fc; a decoder
        # passes its O2 package as `step` and Eagle3Proposer.fuse (nothing where the verifier's package ran fc);
        # an O2 bundle compiles the head's graph with `unfused` (Eagle3Kind.frozen_draft_phase). A compiled phase
        # (draft_space) reads the logits of the draft vocabulary alone (a sixth of SmolLM2's) and maps the chosen
        # columns to token ids; the decoder's phase reads the whole vocabulary's, -inf outside the draft vocabulary
        if draft_space and step is not None:
            raise ValueError("a draft_space phase steps through the head's draft_forward; pass no step")
        self.draft_space = draft_space
        step = head.draft_forward if draft_space else step
        self.__dict__["step"] = head if step is None else step
        self.__dict__["fuse"] = head.fuse if fuse is None else fuse

    def cache_tensors(self) -> list[torch.Tensor]:
        """The head's K/V, which a package of this phase takes as inputs (O2)."""
        return self.head_model.cache_tensors()

    def feature_width(self) -> int:
        """Width of the features the phase takes: the verifier's taps, or the head's hidden size once fused."""
        fc = self.head_model.fc
        return fc.out_features if self.fuse is unfused else fc.in_features

    def head(self, tokens, features, root_row, n, view_slots, *caches) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed the pending pairs (tokens [P], verifier features [P, F], or [P, H] fused; rows past root_row are
        padding and go to the trash slot), the last real one at slot n-1 -> (root logits [vocab], root output
        feature [H]; the logits as columns() says). caches: the head's K/V where a package takes them as inputs
        (O2), else none."""
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        slots = torch.where(rows <= root_row, n - 1 - root_row + rows, self.trash)  # position = slot
        mask = view_slots[None, :] <= slots[:, None]
        logits, out = self.step(tokens, self.fuse(features), slots, slots, mask, *caches)
        pick = root_row.view(1)
        return logits.index_select(0, pick)[0], out.index_select(0, pick)[0]

    def columns(self) -> torch.Tensor | None:
        """The token of each logits column where the step's logits cover the draft vocabulary alone."""
        return self.head_model.draft_ids if self.draft_space else None

    def export_inputs(self, max_seq: int, device: str) -> tuple[tuple[torch.Tensor, ...], int]:
        """Example inputs for torch.export, and the index of view_slots (its length is the dynamic dim)."""
        P, F = self.depth + 1, self.feature_width()
        long = {"dtype": torch.long, "device": device}
        return (torch.zeros(P, **long), torch.zeros(P, F, dtype=self.head_model.fc.weight.dtype, device=device),
                torch.tensor([0, 1], **long), torch.arange(max_seq, device=device)), 3

    def forward(self, tokens, features, meta, view_slots, *caches):
        """tokens [P] (the root at meta[0]), features [P, F], meta [2] = (root row, root slot n), view_slots [S]
        (caches: as head()) -> tree tokens, parents, depth [N] long, cum_logp [N], ancestors [N, N]; N = 1 + D*W."""
        root_row, n = meta[0], meta[1]
        base, view = n - 1, view_slots.shape[0]  # tree node i at head slot base + i
        root_logits, root_out = self.head(tokens, features, root_row, n, view_slots, *caches)
        N = 1 + self.depth * self.width
        feats = root_out.new_zeros(N, root_out.shape[0]).index_copy(0, root_row.new_zeros(1), root_out[None])
        ids = self.columns()
        state = egt_from_root(tokens.index_select(0, root_row.view(1)), root_logits, self.depth, self.width, self.vocab,
                              ids)
        for _ in range(self.depth - 1):
            f = egt_frontier(state)
            logits, out = self.step(f.tokens, feats[state.parents[f.ids]], base + f.depth, base + f.ids,
                                    tree_mask(base, f.mask, view), *caches)
            feats = feats.index_copy(0, f.ids, out)
            state = egt_step(state, torch.log_softmax(logits, -1), ids)
        return state.tokens, state.parents, state.depth, state.cum_logp, state.anc


class FeatureVerifyPhase(GreedyVerifyPhase):
    """Greedy verification that also hands over the verifier's features of the accepted path's rows."""

    hands_over_rows = True

    def score(self, tokens, positions, slots, mask):
        logits, features = self.verifier.forward_features(tokens, positions, slots, mask)
        return logits, (features,)


def prefill_features(verifier, ids: list[int], layout: CacheLayout, chunk: int = PREFILL_CHUNK, start: int = 0):
    """Verifier prefill of `ids` at slots start.. that keeps every row's features -> (last logits [vocab],
    features [len(ids), F])."""
    feats, logits = [], None
    for c0 in range(start, start + len(ids), chunk):
        part = ids[c0 - start:c0 - start + chunk]
        slots = torch.arange(c0, c0 + len(part))
        logits, f = verifier.forward_features(torch.tensor(part), slots, slots, causal_rows(slots, layout.view(c0 + len(part))))
        feats.append(f)
    return logits[-1], torch.cat(feats)


def prefill_pairs(step, fuse, tokens: list[int], features: torch.Tensor, layout: CacheLayout,
                  chunk: int = PREFILL_CHUNK, start: int = 0):
    """Head rows start..start+len-1: (features [len, F] of positions p, the token at p + 1), through `step` (the
    head's graph or its compiled model) after `fuse` (the head's fc, or nothing where the verifier fused them)."""
    for c0 in range(0, len(tokens), chunk):
        part = tokens[c0:c0 + chunk]
        slots = torch.arange(start + c0, start + c0 + len(part))
        step(torch.tensor(part), fuse(features[c0:c0 + len(part)]), slots, slots,
             causal_rows(slots, layout.view(start + c0 + len(part))))


class Eagle3Proposer:
    """Proposer of an Eagle3Graph head (the verifier's feature_layers set to the head's). `drafter`: the head's
    graph, or the CompiledModel around its O2 package (an O1 bundle compiles the head inside the draft phase
    instead); the feature taps through the verifier's O2 features package, else eagerly (the verify phase has its
    own at O1)."""

    name = "eagle3"
    description = "an EAGLE-3 head"
    verify_phase_kind = FeatureVerifyPhase
    extra_nodes = 0

    def __init__(self, verifier, drafter, layout: CacheLayout, shape: TreeShape, draft_phase=None):
        self.verifier, self.drafter, self.layout = verifier, drafter, layout
        self.vocab, self.device = verifier.cfg.vocab_size, model_device(verifier)
        self.head = getattr(drafter, "graph", drafter)  # fuse, fc and the eagle config live on the graph
        verifier_graph = getattr(verifier, "graph", verifier)
        verifier_graph.feature_layers = self.head.eagle.feature_layers
        self.fused = getattr(verifier_graph, "feature_fc", None) is not None  # Eagle3Kind.fuse_in_verifier
        self.pending_features: torch.Tensor | None = None  # [P, F] verifier features of the pending pairs
        self.node_features: torch.Tensor | None = None  # [N, H] eager sampled drafting: each fed node's output
        self.phases = model_drafting.DraftPhases(self.make_phase, layout, self.device, shape, draft_phase)
        self.rank_rates: tuple[float, ...] | None = RANK_ACCEPTANCE
        self.trace = NoTrace()
        self.set_shape(shape)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The verifier's features [R, F] -> the head's input feature [R, H] (as they are where the verifier's
        package already ran fc)."""
        return features if self.fused else self.head.fuse(features)

    def make_phase(self, shape: TreeShape) -> nn.Module:
        return Eagle3DraftPhase(self.head, shape.depth, shape.width, self.vocab, self.layout.trash, self.drafter,
                                self.fuse)

    def set_shape(self, shape: TreeShape) -> None:
        self.shape = shape
        self.phases.set_shape(shape)

    def reusable(self, prompt_ids: list[int]) -> int:
        """The head's rows 0..c-2 pair the features of tokens[:c-1] with the tokens after them, so a head that
        holds c tokens of the prompt lets the verifier's prefill (which gives the features) start at c - 1."""
        return max(prompt_cache.reusable(self.drafter, prompt_ids, len(prompt_ids)) - 1, 0)

    def prefill(self, prompt_ids: list[int], start: int) -> torch.Tensor:
        logits, feats = prefill_features(self.verifier, prompt_ids[start:], self.layout, start=start)
        prefill_pairs(self.drafter, self.fuse, prompt_ids[start + 1:], feats[:-1], self.layout, start=start)
        self.pending_features = feats[-1:]  # paired with the first new token
        return logits

    def propose(self, request: DraftRequest) -> Draft:
        return model_drafting.propose(self, request)

    def accept(self, new: list[int], last_id: int, draft: Draft, moves: torch.Tensor,
               rows: tuple[torch.Tensor, ...]) -> list[int]:
        """The accepted path's features pair with the new tokens: every accepted row's pair, the bonus token's last
        (the head's rows hold draft features till then)."""
        self.pending_features = rows[0]
        return new

    def catch_up(self, pending: list[int], n: int) -> list[int]:
        """Pairs beyond the D + 1 a head step takes (a path through suffix drafts) go to the head now."""
        extra = len(pending) - (self.shape.depth + 1)
        if extra <= 0:
            return pending
        prefill_pairs(self.drafter, self.fuse, pending[:extra], self.pending_features[:extra], self.layout,
                      start=n - len(pending))
        self.pending_features = self.pending_features[extra:]
        return pending[extra:]

    # -- ModelSteps ------------------------------------------------------------------------------------
    def phase_inputs(self, pending: list[int], n: int) -> tuple[torch.Tensor, ...]:
        # at most D accepted + the bonus; more after a per-iteration switch to a shallower tree (eager phases only)
        P = max(self.shape.depth + 1, len(pending))
        tokens = torch.tensor(pending + [0] * (P - len(pending)))
        feats = self.pending_features  # None only before any prefill (profiling): the head reads zeros
        if feats is None:
            width = self.head.fc.out_features if self.fused else self.head.fc.in_features
            feats = torch.zeros(1, width, dtype=self.head.fc.weight.dtype)
        feats = torch.cat([feats, feats.new_zeros(P - feats.shape[0], feats.shape[1])])
        return tokens, feats, torch.tensor([len(pending) - 1, n]), self.phases.view_slots(n + self.shape.n_nodes)

    def root_logits(self, pending: list[int], n: int) -> torch.Tensor:
        tokens, feats, meta, view = self.phase_inputs(pending, n)
        logits, out = self.phases.module.head(tokens, feats, meta[0], meta[1], view)
        self.node_features = out.new_zeros(self.shape.n_nodes, out.shape[0])
        self.node_features[0] = out
        return logits

    def node_logits(self, tokens, parents, ids, depth, anc_rows, n: int, view: int) -> torch.Tensor:
        base = n - 1
        logits, out = self.drafter(tokens, self.node_features[parents], base + depth, base + ids,
                                   tree_mask(base, anc_rows, view))
        self.node_features[ids] = out
        return logits
