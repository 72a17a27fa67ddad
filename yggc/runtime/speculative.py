"""The decode loop: tree speculative decoding of one sequence with any proposer (yggc/runtime/draft.py), one verify
phase and yggc/tree's acceptance rules.

Cache invariant at the top of an iteration: the committed sequence minus its last token (the root) is in the
verifier's cache at slots 0..n-1; the root goes to slot n. The verified subtree's row r sits at slot n + r; after
acceptance the accepted path's K/V is moved to slots n+1.., so the cache reads exactly as if the verifier had
decoded the accepted tokens itself. What a proposer keeps (a drafter's cache, a suffix index) is its own: the
loop hands it the accepted tokens and what the verify phase computed for it.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import nullcontext

import torch

from ..artifacts import kernel_ops
from ..artifacts.timing import NoTrace
from ..errors import YggcError
from ..plan.depth_predictor import root_features
from ..plan.shape import TreeShape
from ..tree.block_verification import verify_chain_block, verify_chain_tokenwise
from ..tree.prune import prune_topk
from ..tree.recursive_rejection import verify_tree_rrs
from ..tree.rules import ChainRule, TreeRule, sampling_rules
from ..tree.sampling import SamplingParams, next_token, target_probs
from ..tree.token_tree import TokenTree, tree_mask
from ..tree.traversal import verify_tree_traversal
from ..tree.verification import verify_greedy, verify_tree_sampling
from . import prompt_cache
from .autoregressive import AutoregressiveDecoder, StopPolicy, check_prompt
from .constraint import Constraint
from .draft import Draft, DraftRequest, Proposer
from .loading import device_scope, model_device
from .logprobs import TokenLogprob, token_logprobs
from .model_drafting import ViewSlots
from .stats import DecodeStats
from .trace import StageTrace
from .verify_phase import GreedyVerifyPhase

# rules for a tree grown from drafter samples (T > 0, W > 1); point-mass verifies the greedy-grown tree instead
SAMPLED_TREE_RULES = {TreeRule.RRS: verify_tree_rrs, TreeRule.TRAVERSAL: verify_tree_traversal}
GREEDY = SamplingParams()
# what a verification decided: (new tokens, the deepest accepted tree id, the deepest verified depth, the drafter's
# K/V moves [2, D], the verify phase's per-row tensors on the accepted path, root first)
Verified = tuple[list[int], int, int, torch.Tensor, tuple[torch.Tensor, ...]]


class SpeculativeDecoder:
    """Tree speculative decoding of one sequence: each iteration the proposer drafts a tree of the current shape,
    the tree is pruned to V nodes, the verifier scores them in one call under a tree mask, and the accepted path
    (greedy: the verifier's argmax; T > 0: block verification for chains, RRS or traversal for sampled trees, the
    point-mass rule otherwise) is committed and its K/V compacted. Greedy output equals AutoregressiveDecoder's
    token for token. The verify phase is the bundle's compiled one where given (O1), else the same module eagerly."""

    def __init__(self, proposer: Proposer, chain_rule: ChainRule = ChainRule.BLOCK, verify_phase=None,
                 tree_rule: TreeRule = TreeRule.RRS, policy=None):
        chain_rule, tree_rule = sampling_rules(chain_rule, tree_rule)
        self.proposer = proposer
        self.verifier, self.layout = proposer.verifier, proposer.layout
        self.vocab, self.device = self.verifier.cfg.vocab_size, model_device(self.verifier)
        # shape -> (verify runner, its eager module): the bundle's compiled phase where it has one for this shape. An
        # O1 bundle compiles it for its one shape; an O2 one never, and its verifier's packages take any width
        self.verify_phases: dict[TreeShape, tuple] = {}
        self.point_phases: dict[tuple[type, int], GreedyVerifyPhase] = {}  # (kind, V) -> a point-mass draft's phase
        self.fixed_shape = verify_phase is not None
        self.set_shape(proposer.shape, verify_phase)
        # greedy decoding picks each iteration's shape from the root's features (yggc/plan/depth_predictor.py)
        self.policy = policy
        self.bonus_logits: torch.Tensor | None = None  # [vocab] the verifier's logits that chose the current root
        self.view_slots = ViewSlots(self.layout, self.device)
        self.chain_rule = verify_chain_block if chain_rule == ChainRule.BLOCK else verify_chain_tokenwise
        self.tree_rule = tree_rule  # T > 0, W > 1: a SAMPLED_TREE_RULES key, or point-mass (greedy-grown tree)
        self.on_sampled_verify = None  # (draft, kept ids, verifier probs [V+1, vocab]) -> None: calibration's hook
        self.verifier_alone = AutoregressiveDecoder(self.verifier, self.layout)  # the last tokens a tree cannot fit
        self.top_logprobs: int | None = None  # set: each chunk's tokens get their log-probabilities (logprobs.py)
        self.chunk_logprobs: list[TokenLogprob] = []  # of the tokens yielded last
        self.constraint: Constraint | None = None  # set: a grammar masks every verified row (constraint.py)
        self.new_logits: torch.Tensor | None = None  # [k+1, vocab] the verifier's rows that chose the new tokens
        self.drafter_covered = 0  # the drafter's cache holds seq[:drafter_covered] (noted for the prompt cache)
        self.stats = DecodeStats()
        self.trace = NoTrace()

    @property
    def drafter(self):
        """The proposer's drafter model (None: it drafts without one)."""
        return self.proposer.drafter

    def enable_trace(self) -> StageTrace:
        """Time every iteration, phase and compiled model call from now on (`yggc run --trace`)."""
        self.trace = self.proposer.trace = StageTrace()
        for label, model in (("verifier", self.verifier), ("drafter", self.drafter)):
            if hasattr(model, "trace_label"):  # a bundle's CompiledModel
                model.trace, model.trace_label = self.trace, label
        return self.trace

    def set_shape(self, shape: TreeShape, verify_phase=None) -> None:
        """Draft and verify with `shape` from the next iteration on (its eager verify phase is built once)."""
        if shape not in self.verify_phases:
            if self.verify_phases and self.fixed_shape:
                raise YggcError(f"this decoder runs compiled phases for one shape only, not {shape}; "
                                "per-iteration shapes need the O2 bundle's eager phases")
            module = self.proposer.verify_phase_kind(self.verifier, shape.depth, shape.verify)
            self.verify_phases[shape] = (verify_phase or module, module)
        self.shape = shape
        self.run_verify, self.verify_module = self.verify_phases[shape]
        self.proposer.set_shape(shape)
        self.no_moves = torch.full((2, shape.depth), self.layout.trash, dtype=torch.long, device=self.device)

    def prefill_start(self, prompt_ids: list[int]) -> int:
        """Where the prefill may start: after the prompt's longest prefix both the verifier's cache and the
        proposer's state hold (the verifier computes at least the last prompt token again, for its logits)."""
        return min(prompt_cache.reusable(self.verifier, prompt_ids, len(prompt_ids) - 1),
                   self.proposer.reusable(prompt_ids))

    def draft_greedy(self, pending: list[int], n: int) -> Draft:
        """The proposer's greedy draft from root pending[-1] at slot n, outside the loop (profiling)."""
        return self.proposer.propose(DraftRequest(pending, n, GREEDY, None, None, False))

    def nodes_needed(self) -> int:
        """Cache slots past n an iteration may write (the draft's nodes)."""
        return self.shape.n_nodes + self.proposer.extra_nodes

    # -- verification --------------------------------------------------------------------------------
    def verify_greedy(self, draft: Draft, n: int) -> Verified:
        """One call: prune, verify, accept, compact the verifier's KV (see Verified)."""
        t = draft.tree
        wanted = self.verify_module.keep_path_logits = self.top_logprobs is not None
        run = self.verify_module if wanted else self.run_verify  # the eager module keeps the path's logits
        if run is self.verify_module and self.device.type == "cpu":  # its host code, handed n and the view as ints
            emit, info, self.bonus_logits, moves, *rows = run.forward_cpu(
                t.tokens, t.parents, t.depth, t.cum_logp, draft.anc, n, self.layout.view(n + self.shape.verify + 1))
        else:
            inputs = (t.tokens, t.parents, t.depth, t.cum_logp, draft.anc, torch.tensor(n),
                      self.view_slots(n + self.shape.verify + 1))
            with self.trace.span("verify phase", "models") if run is not self.verify_module else nullcontext():
                emit, info, self.bonus_logits, moves, *rows = run(*inputs)
        k, last_id, max_depth = info.tolist()
        self.new_logits = run.path_logits if wanted else None
        return emit[: k + 1].tolist(), last_id, max_depth, moves, tuple(r[: k + 1] for r in rows)

    def verify_point_mass(self, draft: Draft, n: int) -> Verified:
        """Greedy verification of point-mass drafts (suffix matches): the multi-draft rule at T = 0 accepts the
        greedy path through every branch, and siblings hold distinct tokens, so that path is the one the greedy
        verify phase finds: on the CPU its tree ops run it (verify_point_mass_ops), elsewhere the host rule."""
        if self.device.type != "cpu" or self.top_logprobs is not None or not kernel_ops.has_tree_ops():
            return self.verify_sampled(draft, n, GREEDY, None)
        return self.verify_point_mass_ops(draft, n)

    def verify_point_mass_ops(self, draft: Draft, n: int) -> Verified:
        """The verify phase's tree ops on the draft's own verify count V, its paths checked to depth V (one call
        with the verifier's package where the runner has it); the drafter's K/V moves cut to the nodes it ran on
        (deeper ones are suffix drafts)."""
        V, t, N = draft.n_verified(self.shape.verify), draft.tree, draft.tree.n_nodes
        kind = self.proposer.verify_phase_kind
        if (kind, V) not in self.point_phases:
            self.point_phases[(kind, V)] = kind(self.verifier, V, V)
        tree = (t.tokens, t.parents, t.depth, t.cum_logp, draft.anc)
        if t.capacity != N:  # padded (suffix drafting alone): the nodes in use
            tree = (*(x[:N] for x in tree[:4]), draft.anc[:N, :N])
        emit, info, self.bonus_logits, moves, *rows = self.point_phases[(kind, V)].forward_ops(
            *tree, n, self.layout.view(n + V + 1))
        k, last_id, max_depth = info.tolist()
        fed = min(k, self.shape.depth)
        drafter_moves = self.no_moves.clone()
        drafter_moves[:, :fed] = moves[:, :fed]
        return emit[: k + 1].tolist(), last_id, max_depth, drafter_moves, tuple(r[: k + 1] for r in rows)

    def score_draft(self, draft: Draft, n: int) -> tuple[torch.Tensor, TokenTree, torch.Tensor, tuple]:
        """The draft pruned to V nodes and scored by the verifier -> (kept ids [V+1], their subtree, the
        verifier's logits on it [V+1, vocab], the verify phase's per-row tensors [V+1, ...]); writes the
        verifier's K/V at slots n.. only."""
        ranked = draft.tree if self.constraint is None else self.constraint.ranked(draft.tree)
        kept = prune_topk(ranked, draft.n_verified(self.shape.verify))  # a draft may hold fewer than V
        sub = draft.tree.subtree(kept)
        slots = n + torch.arange(kept.shape[0])
        sub_anc = draft.anc[kept][:, kept]  # kept holds every kept node's ancestors: the subtree's own mask
        mask = tree_mask(n, sub_anc, self.layout.view(n + kept.shape[0]))
        return kept, sub, *self.verify_module.score(sub.tokens, n + sub.depth, slots, mask)

    def verify_sampled(self, draft: Draft, n: int, params: SamplingParams, gen: torch.Generator | None) -> Verified:
        """Verifier call + a lossless rule on the host (sampling, or greedy under a grammar) -> as verify_greedy."""
        kept, sub, raw, per_row = self.score_draft(draft, n)
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
        rows = torch.cat([path.new_zeros(1), path])  # each token's parent row, the root first
        if self.top_logprobs is not None:
            self.new_logits = raw[rows]
        self.verifier.move_kv(n + path, n + 1 + torch.arange(len(path)))
        ids = kept[path]
        moves, fed = self.no_moves.clone(), min(len(path), self.shape.depth)  # deeper nodes: suffix drafts, never fed
        moves[0, :fed], moves[1, :fed] = n + ids[:fed], n + 1 + torch.arange(fed)
        tokens = draft.tree.tokens[ids].tolist() + [token]
        return tokens, int(ids[-1]) if len(path) else 0, int(sub.depth.max()), moves, tuple(r[rows] for r in per_row)

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
        if self.drafter is not None:
            prompt_cache.forget(self.drafter)
        with device_scope(self.device):
            logits = self.proposer.prefill(prompt_ids, start)
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
            if self.drafter is not None:
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
        request = DraftRequest(pending, n, params, gen, self.constraint, self.tree_rule.sampled)
        self.drafter_covered = n + 1  # the draft's head step leaves the drafter's slots 0..n exact, writes past them
        with self.trace.span("iteration", "decode"):
            with self.trace.span("draft", "phases"):
                draft = self.proposer.propose(request)
            with self.trace.span("verify", "phases"):
                new, last_id, max_depth, moves, rows = self.verify(draft, n, params, gen)
        k = len(new) - 1
        self.record(max_depth, draft.n_verified(self.shape.verify), k)
        return new, n + 1 + k, self.proposer.accept(new, last_id, draft, moves, rows)

    def verify(self, draft: Draft, n: int, params: SamplingParams, gen: torch.Generator) -> Verified:
        """The verify phase a draft takes: greedy without a grammar in one call (point-mass drafts on their own V),
        else the host rules (grammar masks, sampling)."""
        if not params.greedy or self.constraint is not None:
            return self.verify_sampled(draft, n, params, gen)
        return self.verify_point_mass(draft, n) if draft.point_mass else self.verify_greedy(draft, n)

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
