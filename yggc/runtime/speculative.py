"""Tree speculative decoding with a fixed Equal-Growth Tree shape (D, W, V), eager execution.

Cache invariant at the top of an iteration, for both models: the committed sequence minus its last
token (the root) is in the cache at slots 0..n-1; the root goes to slot n. Tree node i sits at slot
n + i while drafting; the verified subtree's row r sits at slot n + r in the verifier. After
acceptance the accepted path's K/V is moved to slots n+1.. so the caches read exactly as if each
model had decoded the accepted tokens itself. The drafter may lag one token (an accepted leaf it
never ran on); the next iteration's head step feeds it together with the new root.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import nullcontext

import torch

from ..artifacts.cache_layout import CacheLayout, prefill
from ..artifacts.timing import NoTrace
from ..errors import YggcError
from ..plan.depth_predictor import root_features
from ..plan.shape import HEAD_WIDTH, TreeShape
from ..tree.block_verification import verify_chain_block, verify_chain_tokenwise
from ..tree.egt import egt_frontier, egt_init, egt_step, egt_tree
from ..tree.prune import prune_topk
from ..tree.recursive_rejection import verify_tree_rrs
from ..tree.rules import ChainRule, TreeRule, sampling_rules
from ..tree.sampled_egt import RANK_ACCEPTANCE
from ..tree.sampling import SamplingParams, next_token, target_probs
from ..tree.token_tree import TokenTree, tree_mask
from ..tree.traversal import verify_tree_traversal
from ..tree.verification import verify_greedy, verify_tree_sampling
from . import prompt_cache
from .autoregressive import PREFILL_CHUNK, AutoregressiveDecoder, StopPolicy, check_prompt
from .constraint import Constraint, path_to
from .draft import Draft
from .draft_phase import DraftPhase, align_vocab
from .loading import device_scope, model_device
from .logprobs import TokenLogprob, token_logprobs
from .sampled_drafting import SampledDrafting
from .stats import DecodeStats
from .trace import StageTrace
from .verify_phase import GreedyVerifyPhase

# rules for a tree grown from drafter samples (T > 0, W > 1); point-mass verifies the greedy-grown tree instead
SAMPLED_TREE_RULES = {TreeRule.RRS: verify_tree_rrs, TreeRule.TRAVERSAL: verify_tree_traversal}


class SpeculativeDecoder(SampledDrafting):
    """Tree speculative decoding of one sequence: each iteration the drafter grows an Equal-Growth Tree of the
    current shape, the tree is pruned to V nodes, the verifier scores them in one call under a tree mask, and
    the accepted path (greedy: the verifier's argmax; T > 0: block verification for chains, RRS or traversal
    for trees) is committed and its K/V compacted. Greedy output equals AutoregressiveDecoder's token for token.
    The phases are the bundle's compiled ones where given (O1), else the same modules run eagerly."""

    def __init__(self, verifier, drafter, layout: CacheLayout, shape: TreeShape,
                 chain_rule: ChainRule = ChainRule.BLOCK, draft_phase=None, verify_phase=None,
                 tree_rule: TreeRule = TreeRule.RRS, policy=None):
        chain_rule, tree_rule = sampling_rules(chain_rule, tree_rule)
        self.verifier, self.drafter, self.layout = verifier, drafter, layout
        self.vocab, self.device = verifier.cfg.vocab_size, model_device(verifier)
        self.phases: dict[TreeShape, tuple] = {}  # shape -> (draft module, draft runner, verify runner, its module)
        # the bundle's compiled phases when it has them for this shape, else the same modules eagerly. An O1 bundle
        # compiles both, for its one shape (its models' buckets take that shape's widths only); an O2 one at most
        # the draft phase, and its models' packages take any width, so other shapes run eager phases
        self.fixed_shape = verify_phase is not None
        # (D, W) -> the bundle's compiled draft phase (O2: the plan's shape and the depth predictor's)
        self.compiled_drafts: dict[tuple[int, int], object] = {}
        if draft_phase is not None:
            self.compiled_drafts[(shape.depth, shape.width)] = draft_phase
        self.set_shape(shape, verify_phase)
        self.drafter_moves = self.no_moves  # [2, D] accepted K/V (src, dst) the drafter still has to move
        # greedy decoding picks each iteration's shape from the root's features (yggc/plan/depth_predictor.py)
        self.policy = policy
        self.bonus_logits: torch.Tensor | None = None  # [vocab] the verifier's logits that chose the current root
        self.views: dict[int, torch.Tensor] = {}  # view length -> arange(view), built once
        self.chain_rule = verify_chain_block if chain_rule == ChainRule.BLOCK else verify_chain_tokenwise
        self.tree_rule = tree_rule  # T > 0, W > 1: a SAMPLED_TREE_RULES key, or point-mass (greedy-grown tree)
        self.on_sampled_verify = None  # (draft, kept ids, verifier probs [V+1, vocab]) -> None: calibration's hook
        self.verifier_alone = AutoregressiveDecoder(verifier, layout)  # for the last tokens a tree cannot fit
        self.top_logprobs: int | None = None  # set: each chunk's tokens get their log-probabilities (logprobs.py)
        self.chunk_logprobs: list[TokenLogprob] = []  # of the tokens yielded last
        self.constraint: Constraint | None = None  # set: a grammar masks every verified row (constraint.py)
        self.new_logits: torch.Tensor | None = None  # [k+1, vocab] the verifier's rows that chose the new tokens
        self.drafter_covered = 0  # the drafter's cache holds seq[:drafter_covered] (noted for the prompt cache)
        self.stats = DecodeStats()
        self.trace = NoTrace()

    def enable_trace(self) -> StageTrace:
        """Time every iteration, phase and compiled model call from now on (`yggc run --trace`)."""
        self.trace = StageTrace()
        for label, model in (("verifier", self.verifier), ("drafter", self.drafter)):
            if hasattr(model, "trace_label"):  # a bundle's CompiledModel
                model.trace, model.trace_label = self.trace, label
        return self.trace

    def set_shape(self, shape: TreeShape, verify_phase=None) -> None:
        """Draft and verify with `shape` from the next iteration on (its eager phases are built once; it drafts
        through the compiled draft phase of its (D, W) where the bundle has one)."""
        if shape not in self.phases:
            if self.phases and self.fixed_shape:
                raise YggcError(f"this decoder runs compiled phases for one shape only, not {shape}; "
                                "per-iteration shapes need the O2 bundle's eager phases")
            self.shape = shape  # the phase makers read it
            module, verify_module = self.make_draft_phase(), self.make_verify_phase()
            draft_phase = self.compiled_drafts.get((shape.depth, shape.width), module)
            self.phases[shape] = (module, draft_phase, verify_phase or verify_module, verify_module)
        self.shape = shape
        self.draft_phase, self.run_draft, self.run_verify, self.verify_module = self.phases[shape]
        self.no_moves = torch.full((2, shape.depth), self.layout.trash, dtype=torch.long, device=self.device)

    head_width = HEAD_WIDTH  # rows of a head step: the root and at most one accepted leaf
    rank_rates: tuple[float, ...] | None = RANK_ACCEPTANCE  # a sampled tree's price of an i-th draw (sampled_egt.py)

    # -- what a drafter kind overrides (yggc.runtime.drafters.eagle3_decoder is the other kind) ------------------
    def make_draft_phase(self) -> torch.nn.Module:
        return DraftPhase(self.drafter, self.shape.depth, self.shape.width, self.vocab, self.layout.trash)

    verify_phase_kind = GreedyVerifyPhase  # the greedy verify phase's class (EAGLE-3's also hands over features)

    def make_verify_phase(self) -> torch.nn.Module:
        return self.verify_phase_kind(self.verifier, self.shape.depth, self.shape.verify)

    def prefill_models(self, prompt_ids: list[int], start: int = 0) -> torch.Tensor:
        """Both caches filled with the prompt from token `start` on -> the verifier's last logits [vocab]."""
        prefill(self.drafter, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)
        return prefill(self.verifier, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)

    def prefill_start(self, prompt_ids: list[int]) -> int:
        """Where the prefill may start: after the prompt's longest prefix both caches hold (the verifier computes
        at least the last prompt token again, for its logits)."""
        last = len(prompt_ids) - 1
        return min(prompt_cache.reusable(self.verifier, prompt_ids, last),
                   prompt_cache.reusable(self.drafter, prompt_ids, last))

    def phase_inputs(self, pending: list[int], n: int) -> tuple[torch.Tensor, ...]:
        """The fused draft phase's inputs."""
        return (*self.head_inputs(pending, n), self.drafter_moves)

    def root_logits(self, pending: list[int], n: int) -> torch.Tensor:
        """Eager head step: the drafter catches up on `pending` (root last, at slot n) -> root logits [vocab]."""
        tokens, meta, view = self.head_inputs(pending, n)
        self.drafter.move_kv(*self.drafter_moves)
        return self.draft_phase.head(tokens, meta[0], meta[1], view)

    def node_logits(self, tokens, parents, ids, depth, anc_rows, n: int, view: int) -> torch.Tensor:
        """Eager tree step on nodes `ids` (tokens, parent ids, depths [R], ancestor rows [R, N]) -> logits [R, vocab]."""
        logits = self.drafter(tokens, n + depth, n + ids, tree_mask(n, anc_rows, view))
        return align_vocab(logits, self.vocab)

    def verifier_logits(self, tokens, positions, slots, mask) -> torch.Tensor:
        return self.verifier(tokens, positions, slots, mask)

    def take_verify_outputs(self, handoff: list[torch.Tensor], path_rows: torch.Tensor | slice) -> None:
        """What the verify phase hands the drafter: the accepted K/V moves (path_rows: the accepted path's rows,
        root first, of the per-row tensors an EAGLE-3 verify hands over)."""
        self.drafter_moves = handoff[0]

    def next_pending(self, new: list[int], last_id: int, draft: Draft) -> list[int]:
        """Tokens the next head step feeds: the root, and an accepted leaf the drafter never ran on."""
        k = len(new) - 1
        return self.pending_after(new, k - 1 if k and last_id >= draft.n_fed else k)

    def pending_after(self, new: list[int], fed: int) -> list[int]:
        """What the drafter still has to see of the new tokens (the accepted ones, the verifier's bonus last)
        when it ran on the first `fed` of them while drafting."""
        return new[fed:]

    def catch_up(self, pending: list[int], n: int) -> list[int]:
        """The pending tokens (root last, at slot n) beyond what one head step takes fed to the drafter now, after
        the K/V moves the last acceptance left -> what the head step still feeds. Only a path through drafts the
        drafter never ran on (suffix branches) leaves more than head_width."""
        extra = len(pending) - self.head_width
        if extra <= 0:
            return pending
        self.drafter.move_kv(*self.drafter_moves)
        self.drafter_moves = self.no_moves
        prefill(self.drafter, pending[:extra], n + 1 - len(pending), self.layout, PREFILL_CHUNK)
        return pending[extra:]

    def nodes_needed(self) -> int:
        """Cache slots past n an iteration may write (the draft's nodes)."""
        return self.shape.n_nodes

    # -- drafting ------------------------------------------------------------------------------------
    def view_slots(self, n_used: int) -> torch.Tensor:
        view = self.layout.view(n_used)
        if view not in self.views:
            self.views[view] = torch.arange(view, device=self.device)
        return self.views[view]

    def head_inputs(self, pending: list[int], n: int) -> tuple[torch.Tensor, ...]:
        """Tokens the drafter has not seen (root last, at slot n), padded to head_width; (root row, n)."""
        tokens = torch.tensor(pending + [0] * (self.head_width - len(pending)))
        meta = torch.tensor([len(pending) - 1, n])
        return tokens, meta, self.view_slots(n + self.shape.n_nodes)

    def draft_tree(self, pending: list[int], n: int) -> Draft:
        """The EGT draft phase in one call: D drafter calls, W new nodes each."""
        inputs = self.phase_inputs(pending, n)
        with self.trace.span("draft phase", "models") if self.run_draft is not self.draft_phase else nullcontext():
            tokens, parents, depth, cum_logp, anc = self.run_draft(*inputs)
        tree = TokenTree(tokens, parents, depth, cum_logp, self.shape.n_nodes)
        return Draft(tree, None, 1 + (self.shape.depth - 1) * self.shape.width, anc)

    def draft_tree_constrained(self, pending: list[int], n: int) -> Draft:
        """Greedy EGT growth under the request's grammar: each node's drafter logits masked by what the grammar
        allows after its path, so every draft can be accepted; eager, around the drafter's forward."""
        D, W = self.shape.depth, self.shape.width
        view = self.layout.view(n + self.shape.n_nodes)
        root = self.constraint.mask(self.root_logits(pending, n))[None]  # [1, vocab]
        state = egt_step(egt_init(pending[-1], D, W, self.vocab), torch.log_softmax(root, -1).expand(W, -1))
        for _ in range(D - 1):
            f = egt_frontier(state)
            logits = self.node_logits(f.tokens, state.parents[f.ids], f.ids, f.depth, f.mask, n, view)  # [W, vocab]
            tokens, parents = state.tokens.tolist(), state.parents.tolist()
            masks = self.constraint.masks_after([path_to(i, tokens, parents) for i in f.ids.tolist()])  # [W, vocab]
            state = egt_step(state, torch.log_softmax(logits.masked_fill(~masks, float("-inf")), -1))
        return Draft(egt_tree(state), None, 1 + (D - 1) * W, state.anc)

    # -- verification --------------------------------------------------------------------------------
    def verify_greedy(self, draft: Draft, n: int) -> tuple[list[int], int, int]:
        """One call: prune, verify, accept, compact the verifier's KV -> (emitted tokens, last accepted
        tree id, deepest verified depth); also leaves the drafter's K/V moves for its next call."""
        t = draft.tree
        wanted = self.verify_module.keep_path_logits = self.top_logprobs is not None
        run = self.verify_module if wanted else self.run_verify  # the eager module keeps the path's logits
        if run is self.verify_module and self.device.type == "cpu":  # its host code, handed n and the view as ints
            emit, info, self.bonus_logits, *handoff = run.forward_cpu(
                t.tokens, t.parents, t.depth, t.cum_logp, draft.anc, n, self.layout.view(n + self.shape.verify + 1))
        else:
            inputs = (t.tokens, t.parents, t.depth, t.cum_logp, draft.anc, torch.tensor(n),
                      self.view_slots(n + self.shape.verify + 1))
            with self.trace.span("verify phase", "models") if run is not self.verify_module else nullcontext():
                emit, info, self.bonus_logits, *handoff = run(*inputs)
        k, last_id, max_depth = info.tolist()
        self.new_logits = run.path_logits if wanted else None
        self.take_verify_outputs(handoff, slice(0, k + 1))  # the handoff's rows are the path's already
        return emit[: k + 1].tolist(), last_id, max_depth

    def score_draft(self, draft: Draft, n: int) -> tuple[torch.Tensor, TokenTree, torch.Tensor]:
        """The draft pruned to V nodes and scored by the verifier -> (kept ids [V+1], their subtree, the
        verifier's logits on it [V+1, vocab]); writes the verifier's K/V at slots n.. only."""
        ranked = draft.tree if self.constraint is None else self.constraint.ranked(draft.tree)
        kept = prune_topk(ranked, draft.n_verified(self.shape.verify))  # a draft may hold fewer than V
        sub = draft.tree.subtree(kept)
        slots = n + torch.arange(kept.shape[0])
        sub_anc = draft.anc[kept][:, kept]  # kept holds every kept node's ancestors: the subtree's own mask
        mask = tree_mask(n, sub_anc, self.layout.view(n + kept.shape[0]))
        return kept, sub, self.verifier_logits(sub.tokens, n + sub.depth, slots, mask)

    def verify_sampled(self, draft: Draft, n: int, params: SamplingParams, gen: torch.Generator):
        """Verifier call + a lossless rule on the host (sampling, or greedy under a grammar) -> as verify_greedy."""
        kept, sub, raw = self.score_draft(draft, n)
        logits = raw if self.constraint is None else raw.masked_fill(
            ~self.constraint.tree_masks(sub.tokens.tolist(), sub.parents.tolist()), float("-inf"))
        probs = None if params.greedy else target_probs(logits, params)  # [V+1, vocab]
        if self.on_sampled_verify is not None and probs is not None:
            self.on_sampled_verify(draft, kept, probs)
        if probs is None:
            path, token = verify_greedy(sub.tokens, sub.parents, logits)
        elif draft.q is not None:
            tau, token = self.chain_rule(sub.tokens[1:], draft.q[:self.shape.verify], probs, gen)
            path = list(range(1, tau + 1))
        elif draft.q_rows is not None:
            # pruned to a chain (its first draws: the pruning never looks at the tokens drawn), a tree is verified
            # as one: traversal verification, which on a chain is block verification, where RRS is token by token
            rule = SAMPLED_TREE_RULES[TreeRule.TRAVERSAL if sub.is_chain() else self.tree_rule]
            path, token = rule(sub.tokens, sub.parents, probs, draft.q_rows[kept], gen)
        else:
            path, token = verify_tree_sampling(sub.tokens, sub.parents, probs, gen, sub.cum_logp)
        path = torch.tensor(path, dtype=torch.long)
        if self.top_logprobs is not None:  # each token's parent row, the root first
            self.new_logits = raw[torch.cat([path.new_zeros(1), path])]
        self.verifier.move_kv(n + path, n + 1 + torch.arange(len(path)))
        ids = kept[path]
        moves, fed = self.no_moves.clone(), min(len(path), self.shape.depth)  # deeper nodes: suffix drafts, never fed
        moves[0, :fed], moves[1, :fed] = n + ids[:fed], n + 1 + torch.arange(fed)
        self.take_verify_outputs([moves], torch.cat([path.new_zeros(1), path]))
        tokens = draft.tree.tokens[ids].tolist() + [token]
        return tokens, int(ids[-1]) if len(path) else 0, int(sub.depth.max())

    # -- the loop ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def stream(self, prompt_ids: list[int], max_new_tokens: int, params: SamplingParams,
               eos_ids: tuple[int, ...] = (), reuse: bool = False) -> Iterator[list[int]]:
        """Yields accepted tokens per iteration; the output equals the verifier's own decoding. reuse=True starts
        the prefill after the prompt's longest prefix already in both caches (runtime/prompt_cache.py)."""
        check_prompt(prompt_ids, self.layout, self.vocab)
        stop, gen = StopPolicy(max_new_tokens, eos_ids, self.layout), params.generator(self.device)
        start = self.prefill_start(prompt_ids) if reuse else 0
        st = self.stats = DecodeStats(n_prompt=len(prompt_ids), n_cached=start)
        t0 = time.perf_counter()
        prompt_cache.forget(self.verifier)
        prompt_cache.forget(self.drafter)
        with device_scope(self.device):
            logits = self.prefill_models(prompt_ids, start)
        self.bonus_logits, self.new_logits = logits, logits[None]
        new = [next_token(self.constrained(logits), params, gen)]
        seq, n, pending = list(prompt_ids), len(prompt_ids), list(new)
        self.drafter_covered = n
        while new:
            kept_tokens, st.stop_reason = stop.clip(new, st.n_generated)
            st.n_generated += len(kept_tokens)
            if st.prefill_s == 0.0:
                st.prefill_s, t0 = time.perf_counter() - t0, time.perf_counter()
            if self.top_logprobs is not None:
                self.chunk_logprobs = token_logprobs(self.new_logits, kept_tokens, self.top_logprobs, self.vocab)
            seq += new
            if self.constraint is not None:
                self.constraint.commit(kept_tokens)  # what is cut (after an EOS) the grammar never sees
            prompt_cache.note(self.verifier, seq, n)  # all but the root
            prompt_cache.note(self.drafter, seq, self.drafter_covered)
            yield kept_tokens
            if st.stop_reason:
                break
            with device_scope(self.device):  # host-built index tensors go where the models are
                new, n, pending = self.iterate(n, pending, params, gen, stop)
        st.decode_s = time.perf_counter() - t0 if st.n_generated > 1 else 0.0
        st.stop_reason = st.stop_reason or "max tokens"

    def iterate(self, n: int, pending: list[int], params: SamplingParams, gen: torch.Generator,
                stop: StopPolicy) -> tuple[list[int], int, list[int]]:
        """One draft-verify-accept round from root pending[-1] at slot n -> (new tokens, n, pending)."""
        if self.policy is not None and params.greedy:
            shape = self.policy.choose(root_features(self.bonus_logits))
            if shape != self.shape:
                self.set_shape(shape)
        if stop.kv_full(n, self.nodes_needed()):
            return self.fallback_step(pending[-1], n, params, gen, stop)
        pending = self.catch_up(pending, n)
        fused = params.greedy and self.constraint is None  # the greedy verify phase: no grammar masks inside
        self.drafter_covered = n + 1  # the draft's head step leaves the drafter's slots 0..n exact, writes past them
        with self.trace.span("iteration", "decode"):
            with self.trace.span("draft", "phases"):
                draft = (self.draft_sampled(pending, n, params, gen) if not params.greedy
                         else self.draft_tree(pending, n) if self.constraint is None
                         else self.draft_tree_constrained(pending, n))
            with self.trace.span("verify", "phases"):
                new, last_id, max_depth = (self.verify_greedy(draft, n) if fused
                                           else self.verify_sampled(draft, n, params, gen))
        k = len(new) - 1
        self.record(max_depth, draft.n_verified(self.shape.verify), k)
        return new, n + 1 + k, self.next_pending(new, last_id, draft)

    def fallback_step(self, root: int, n: int, params, gen, stop) -> tuple[list[int], int, list[int]]:
        """No room left for a tree: finish with plain verifier steps (the drafter is no longer needed)."""
        if stop.kv_full(n, 1):
            self.stats.stop_reason = stop.kv_full(n, 1)
            return [], n, []
        logits = self.verifier_alone.step(root, n)
        self.new_logits = logits[None]
        token = next_token(self.constrained(logits), params, gen)
        return [token], n + 1, [token]

    def constrained(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [vocab] with what the request's grammar forbids now at -inf (as they are without one)."""
        return logits if self.constraint is None else self.constraint.mask(logits)

    def record(self, max_depth: int, n_verified: int, n_accepted: int) -> None:
        st = self.stats
        if len(st.drafted_per_depth) < max_depth:
            grow = max_depth - len(st.drafted_per_depth)
            st.drafted_per_depth += [0] * grow
            st.accepted_per_depth += [0] * grow
        for d in range(max_depth):
            st.drafted_per_depth[d] += 1
            st.accepted_per_depth[d] += int(n_accepted > d)
        st.n_iterations += 1
        st.accepted_lengths.append(n_accepted)
        st.n_drafted += n_verified
        st.n_accept += n_accepted
