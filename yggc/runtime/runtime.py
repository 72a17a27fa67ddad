"""`yggc.Runtime`: a validated bundle, loaded without compiling anything, ready to decode.

    rt = yggc.Runtime.load("bundle")
    out = rt.generate("def fib(n):", max_new_tokens=64)
    for piece in rt.stream("import os", max_new_tokens=32): print(piece, end="")

One request at a time (request_lock.py): a call from another thread waits for the running request,
or raises RuntimeBusy with blocking=False; a stream closed or dropped half-way frees the Runtime; a
stream resumed after a newer request on the same thread raises StreamInterrupted, never wrong tokens.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file

from ..artifacts.buckets import CompiledModel, load_bucket
from ..artifacts.device import resolve_device
from ..bundle import Manifest, OptLevel, validate_bundle
from ..errors import YggcError
from ..plan.bundle_plan import AdaptivePlan, read_plan
from ..plan.bundle_profile import Profile, iteration_cost
from ..plan.depth_predictor import DepthPolicy
from ..plan.shape import TreeShape
from ..tree.rules import ChainRule, TreeRule
from ..tree.sampled_egt import RANK_ACCEPTANCE
from ..tree.sampling import SamplingParams
from . import drafters, loading
from .autoregressive import AutoregressiveDecoder
from .constraint import Constraint, GrammarCompiler, GrammarSpec
from .detokenize import StreamDecoder
from .drafters.suffix_branches import branches_by_default, with_suffix_branches
from .drafters.suffix_proposer import SUFFIX_SHAPE, SuffixDrafter
from .logprobs import TokenLogprob
from .request_lock import RequestLock
from .speculative import SpeculativeDecoder
from .stats import DecodeStats
from .tp_processes import check_world, rank_world, verifier_loader


@dataclass
class Generation:
    """A finished request: the generated token ids, their text and the request's decoding statistics."""
    tokens: list[int]
    text: str
    stats: DecodeStats
    logprobs: list[TokenLogprob] | None = None  # one per token, where the request asked for them


def load_policy(path: Path, adaptive: AdaptivePlan | None) -> DepthPolicy | None:
    """The depth predictor plan.json's "adaptive" record says the bundle uses (weights: predictor.safetensors),
    else None."""
    if adaptive is None or not adaptive.used:
        return None
    try:
        return DepthPolicy.from_plan(adaptive, load_file(path / "predictor.safetensors"))
    except (OSError, KeyError, TypeError, RuntimeError, SafetensorError) as e:
        raise YggcError(f"{path}: its depth predictor does not load ({e}); re-run `yggc compile`") from None


class Runtime:
    """A loaded bundle, ready to decode: `Runtime.load(path)` validates it and loads its packages (never compiling);
    `generate`, `stream` and `stream_tokens` decode one request at a time (another thread's request waits, or
    raises RuntimeBusy with blocking=False) with the bundle's plan: its tree shape, the depth predictor if it
    trained one, the sampling plan for T > 0, or the verifier alone where the compile found the tree slower."""

    def __init__(self, path: Path, manifest: Manifest, verifier: loading.LoadedModel, drafter: loading.LoadedModel,
                 compiled: dict[str, CompiledModel], shape: TreeShape, speculate: bool = True):
        self.path, self.manifest, self.shape = path, manifest, shape
        self.speculate = speculate  # the plan's verdict: False when the compiled tree lost to plain decoding
        self.verifier, self.drafter, self.compiled = verifier, drafter, compiled
        self.tokenizer = verifier.tokenizer
        self.last_stats = DecodeStats()  # of the last request that ran to its end (or was closed)
        self.last_logprobs: list[TokenLogprob] = []  # of the last request's tokens, where it asked for them
        self.requests = RequestLock()  # one KV cache: one request at a time
        self.draft_runners: dict[tuple[int, int], object] = {}  # (D, W) -> compiled draft phase
        self.verify_runners: dict[tuple[int, int, int], object] = {}  # (D, W, V) -> compiled greedy verify phase
        self.policy: DepthPolicy | None = None  # the bundle's depth predictor, if it trained one that pays
        # the plan calibrated at a temperature (`yggc compile --calib`, at --temp, default 1): (shape, verdict)
        # for T > 0 requests
        self.sampling_plan: tuple[TreeShape, bool] | None = None
        self.rank_rates: tuple[float, ...] = RANK_ACCEPTANCE  # a sampled tree's price of each draw rank
        self.grammars: GrammarCompiler | None = None  # made at the first constrained request
        self.iteration_ms: Callable[[int], float] | None = None  # profiled cost of an iteration verifying r nodes

    @classmethod
    def load(cls, path: str | Path) -> Runtime:
        """Validate the manifest and every file first, then load weights and compiled buckets."""
        path = Path(path)
        manifest = validate_bundle(path)
        tp = manifest.extra.get("tp", 1)
        check_world(path, tp)
        dtype = loading.parse_dtype(manifest.dtype)
        device = str(resolve_device(manifest.device))
        frozen = manifest.opt == OptLevel.O2  # the packages carry the weights: load the caches only
        # tp > 1: this rank's slice (joining the process group), for its own verifier packages
        verifier = verifier_loader(tp)(path / "verifier", dtype, manifest.max_seq, device, weights=not frozen)
        drafter = drafters.load_drafter(path / "drafter", verifier, dtype, device, weights=not frozen)
        kind = drafters.kind_of(drafter)
        recorded = manifest.extra.get("drafter", {"kind": "llama"})
        if recorded != kind.record(drafter.graph):
            raise YggcError(f"{path}: manifest.json records drafter {recorded}, its drafter/ folder holds "
                            f"{kind.record(drafter.graph)}; re-run `yggc compile`")
        kind.fuse_in_verifier(verifier, drafter, manifest.opt)
        loaded = {"verifier": verifier, "drafter": drafter}
        return cls._load_buckets(path, manifest, loaded)

    @classmethod
    def _load_buckets(cls, path: Path, manifest: Manifest, loaded: dict[str, loading.LoadedModel]) -> Runtime:
        compiled, opt, backend = {}, manifest.opt, manifest.extra.get("backend", "inductor")
        rank = rank_world()[0]
        buckets = [b for b in manifest.buckets if b.rank in (None, rank)]  # a TP rank's, and the shared ones
        drafter = loaded["drafter"].graph
        for name, model in loaded.items():
            files = {b.width: path / b.file for b in buckets if b.model == name and b.kind == "forward"}
            compiled[name] = drafters.compiled_model(name, model.graph, files, drafter, opt, backend,
                                                     manifest.extra.get("package_width", 0))
        plan = read_plan(path)
        rt = cls(path, manifest, loaded["verifier"], loaded["drafter"], compiled, plan.shape, plan.speculate)
        rt.policy = load_policy(path, plan.adaptive)
        rt.iteration_ms = iteration_cost(Profile.load(path))
        if plan.sampling is not None:
            rt.sampling_plan = (plan.sampling.shape, plan.sampling.speculate)
            rt.rank_rates = plan.sampling.rank_acceptance or RANK_ACCEPTANCE
        v, d = loaded["verifier"].graph, loaded["drafter"].graph
        kind = drafters.kind_of(d)
        for b in buckets:
            if b.kind == "draft_phase":  # drafting reads D and W only
                shape = TreeShape(b.depth, b.width, 1)
                rt.draft_runners[(b.depth, b.width)] = (
                    drafters.frozen_draft_runner(path / b.file, d, shape, v.cfg.vocab_size) if opt == OptLevel.O2
                    else load_bucket(path / b.file, kind.draft_phase(d, shape, v.cfg.vocab_size, manifest.max_seq)))
            if b.kind == "verify_phase":
                phase = kind.verify_phase(v, TreeShape(b.depth, b.width, b.verify))
                rt.verify_runners[(b.depth, b.width, b.verify)] = load_bucket(path / b.file, phase)
        return rt

    def decoder(self, speculative: bool | None = None, shape: TreeShape | None = None,
                chain_rule: ChainRule = ChainRule.BLOCK, tree_rule: TreeRule = TreeRule.RRS, adaptive: bool = True,
                sampling: bool = False, suffix_branches: bool = False, compiled_draft: bool = True):
        """The plan's decoder; speculative=True/False or a shape overrides the plan's verdict. At T > 0,
        chains use `chain_rule` ("block" or "token") and trees `tree_rule` ("rrs", "traversal" or "point-mass";
        yggc/tree/rules.py: the members or their strings).
        Greedy decoding picks each iteration's shape with the bundle's depth predictor unless a shape is
        given or adaptive=False. sampling=True (a T > 0 request) takes the plan calibrated at a temperature,
        where the bundle has one. suffix_branches=True: the text's suffix matches join the drafter's tree
        (runtime/drafters/suffix_branches.py; sampled trees are then verified by the point-mass rule).
        compiled_draft=False drafts eagerly around the drafter's package where the bundle compiled the shape's
        draft phase too (O2; to compare the two)."""
        layout = self.verifier.layout
        plan_shape, verdict = self.plan_for(sampling and shape is None)
        if speculative is None:
            speculative = verdict or shape is not None
        if not speculative:
            return AutoregressiveDecoder(self.compiled["verifier"], layout)
        policy = self.policy if adaptive and shape is None else None
        shape = shape or plan_shape
        draft = self.draft_runners.get((shape.depth, shape.width)) if compiled_draft else None
        dec = drafters.speculative_decoder(self.compiled["verifier"], self.compiled["drafter"], layout, shape,
                                           chain_rule, tree_rule, draft,
                                           self.verify_runners.get((shape.depth, shape.width, shape.verify)), policy)
        if compiled_draft:  # the depth predictor's shapes draft through their compiled phases too (O2)
            dec.proposer.phases.compiled.update(self.draft_runners)
        dec.proposer.rank_rates = self.rank_rates  # what a sampled tree prices its draws at (the bundle's rates)
        return with_suffix_branches(dec, iteration_ms=self.iteration_ms) if suffix_branches else dec

    def plan_for(self, sampling: bool) -> tuple[TreeShape, bool]:
        """(tree shape, verdict) a request decodes with: at T > 0 the plan calibrated at a temperature where the
        bundle has one, else the greedy plan (verdict False: the verifier alone)."""
        return self.sampling_plan if sampling and self.sampling_plan else (self.shape, self.speculate)

    def suffix_branches_for(self, sampling: bool, asked: bool | None = None) -> bool:
        """Whether a request's drafter tree gets the text's suffix branches: as `asked` (True/False), else the default
        for this runtime's device and process group (drafters.suffix_branches.branches_by_default)."""
        if asked is not None:
            return asked
        return branches_by_default(loading.model_device(self.compiled["verifier"]).type, rank_world()[1], sampling)

    def request_decoder(self, sampling: bool, suffix_branches: bool | None = None):
        """The decoder a request gets unless it brings one: the plan's (decoder()), with suffix branches as
        suffix_branches_for says (at T > 0 they take the point-mass rule in place of the sampled tree's). Where the
        plan decodes autoregressively there is no tree to add them to."""
        return self.decoder(sampling=sampling, suffix_branches=self.suffix_branches_for(sampling, suffix_branches))

    def suffix_decoder(self, shape: TreeShape = SUFFIX_SHAPE) -> SpeculativeDecoder:
        """Drafts from the text's own repeats (runtime/drafters/suffix_proposer.py), verified by the bundle's compiled
        verifier; the drafter does not run. `shape`: tokens per branch, branches, nodes verified at most."""
        proposer = drafters.PROPOSERS["suffix"](self.compiled["verifier"], SuffixDrafter(), self.verifier.layout, shape)
        return SpeculativeDecoder(proposer)

    def encode(self, prompt: str | list[int] | None = None, messages: list[dict[str, str]] | None = None) -> list[int]:
        """Token ids of a text prompt, of token ids as given, or of chat `messages` through the chat template."""
        if (prompt is None) == (messages is None):
            raise YggcError("pass a prompt or messages=[{'role': 'user', 'content': ...}], not both or neither")
        if messages is not None:
            return loading.encode_chat(self.verifier, messages)
        return list(prompt) if isinstance(prompt, list) else loading.encode_prompt(self.tokenizer, prompt)

    def stream_tokens(self, prompt: str | list[int] | None = None, max_new_tokens: int = 128, temperature: float = 0.0,
                      top_k: int = 0, top_p: float = 1.0, seed: int | None = None, decoder=None,
                      messages: list[dict[str, str]] | None = None, blocking: bool = True,
                      min_p: float = 0.0, prompt_cache: bool = True, logprobs: int | None = None,
                      grammar: GrammarSpec | Constraint | None = None) -> Iterator[list[int]]:
        """Accepted token ids per iteration; a chat stops at the template's end of turn.

        Holds the Runtime from the first next() until the end, close() or garbage collection;
        blocking=False raises RuntimeBusy instead of waiting for another thread's request. prompt_cache: prefill
        only what follows the longest prefix of the prompt the caches already hold from the last request (a
        multi-turn chat's earlier turns); the output is the same either way. logprobs=N (0 or more): each token's
        log-probability and the N most likely alternatives (runtime/logprobs.py) go to last_logprobs as they are
        yielded (and the decoder's chunk_logprobs holds the last chunk's). grammar: the output follows it
        (GrammarSpec("json_schema", text), "json_object", "gbnf", "lark" or "regex"; runtime/constraint.py)."""
        ticket = self.requests.acquire(blocking)
        dec = steps = None
        try:
            params = SamplingParams(temperature, top_k, top_p, seed, min_p)
            dec = decoder or self.request_decoder(sampling=not params.greedy)
            dec.top_logprobs, self.last_logprobs = logprobs, []
            dec.constraint = self.constraint(grammar) if isinstance(grammar, GrammarSpec) else grammar
            steps = dec.stream(self.encode(prompt, messages), max_new_tokens, params, self.verifier.eos_ids, prompt_cache)
            while True:
                with self.requests.step(ticket):  # StreamInterrupted if a newer request reused the cache
                    tokens = next(steps, None)
                if tokens is None:
                    break
                if logprobs is not None:
                    self.last_logprobs += dec.chunk_logprobs
                yield tokens
        finally:
            if steps is not None:
                steps.close()
            if dec is not None and self.requests.holds(ticket):
                self.last_stats = dec.stats
            self.requests.release(ticket)

    def constraint(self, spec: GrammarSpec) -> Constraint:
        """A fresh grammar state for one request (checks the grammar: one YggcError line if it is not one)."""
        if self.grammars is None:
            self.grammars = GrammarCompiler(self.tokenizer, self.verifier.eos_ids, self.verifier.graph.cfg.vocab_size)
        return self.grammars.constraint(spec)

    def stream(self, prompt: str | list[int] | None = None, max_new_tokens: int = 128, **kw) -> Iterator[str]:
        """Yields text pieces as they are accepted (prompt text or ids, or messages=[...])."""
        text = StreamDecoder(self.tokenizer)
        with closing(self.stream_tokens(prompt, max_new_tokens, **kw)) as steps:
            for tokens in steps:
                piece = text.push(tokens)
                if piece:
                    yield piece

    def generate(self, prompt: str | list[int] | None = None, max_new_tokens: int = 128, **kw) -> Generation:
        """The whole continuation of a prompt (or of messages=[...]) with its stats."""
        text = StreamDecoder(self.tokenizer)
        with closing(self.stream_tokens(prompt, max_new_tokens, **kw)) as steps:
            for tokens in steps:
                text.push(tokens)
        return Generation(text.ids, text.text(), self.last_stats,
                          self.last_logprobs if kw.get("logprobs") is not None else None)
