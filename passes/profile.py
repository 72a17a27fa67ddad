"""Profiling, for pipeline.py's profile pass (and the calibrate pass's forward profile): measured latency of every
compiled bucket and of the host-side stages.

Measures profile.json (a Profile, yggc/plan/bundle_profile.py; schema: profiles/schema.json) with a fitted
roofline curve per model so the objective can price widths between the measured ones.
"""
from __future__ import annotations

import torch

from ..artifacts.cache_layout import CacheLayout, causal_rows
from ..artifacts.device import cuda_properties
from ..artifacts.timing import median_ms, steady_ms, steady_ms_each
from ..plan.bundle_profile import ContextTimes, ModelTimes, PhaseTimes, Profile
from ..plan.cost_model import fit_cost_curve
from ..plan.shape import HEAD_WIDTH, TreeShape
from ..runtime.loading import device_scope, model_device
from ..runtime.speculative import SpeculativeDecoder
from ..tree.prune import prune_topk
from ..tree.token_tree import TokenTree, tree_mask
from ..tree.verification import verify_greedy
from .compile_state import Pair, Widths

# Where one package serves any width (O2), these widths are timed as well: a sparse verifier's cost follows
# the experts its rows activate (MoESD's N(t)), and every model's GEMMs step up one row past a block of rows:
# 16 on AMX (17, 33), 4 for the AVX2 bf16 kernel (5, 9). The cost model needs points on both sides of those bends.
PACKAGE_PROBE_WIDTHS = (2, 4, 5, 8, 9, 12, 16, 17, 24, 32, 33, 48, 64)
# ... and every width up to this one: a tree verifies a few nodes plus the root, and the objective prices a timed
# width at its own median (yggc.plan.cost_model.MeasuredCurve), where the smooth fit can be off by more than the
# candidate shapes differ. A small part of a compile.
PACKAGE_EVERY_WIDTH = 17


def probe_tokens(width: int, vocab: int, device) -> torch.Tensor:
    """Distinct, fixed tokens: rows of one repeated token would all route to the same experts of an MoE."""
    return (torch.arange(width, device=device) * 7919 + 1) % vocab


def expert_counts(cfg) -> tuple[int, int]:
    """(E, K) of a sparse model, (0, 0) of a dense one: the cost model's expert terms."""
    return (cfg.moe.n_experts, cfg.moe.top_k) if cfg.moe else (0, 0)


def timed_widths(model, widths: list[int]) -> list[int]:
    return profiled_widths(widths, getattr(model, "package_width", 0))  # 0: only the buckets' widths can run


def profiled_widths(widths: list[int], package_width: int) -> list[int]:
    """The widths profile_forward times: the buckets' and, where one package serves every width up to
    package_width, every width up to PACKAGE_EVERY_WIDTH and the probe widths that shape the cost curve; none
    for a model without buckets."""
    served = (*range(1, PACKAGE_EVERY_WIDTH + 1), *PACKAGE_PROBE_WIDTHS)
    return sorted({*widths, *(w for w in served if w <= package_width)}) if widths else []


def bucket_latency_ms(model, width: int, layout: CacheLayout, context: int, repeats: int) -> float:
    """One forward at `width` with `context` committed tokens in view (writes only scratch slots)."""
    return steady_ms(bucket_call(model, width, layout, context), repeats)


def bucket_call(model, width: int, layout: CacheLayout, context: int):
    """bucket_latency_ms's forward, as a call to time."""
    device = model_device(model)
    slots = torch.arange(context, context + width, device=device).clamp(max=layout.max_seq - 1)
    mask = causal_rows(slots, layout.view(context + width))
    ids = probe_tokens(width, model.cfg.vocab_size, device)

    def run():
        model(ids, slots, slots, mask)
        if device.type == "cuda":
            torch.cuda.synchronize()  # time the kernels, not their launch

    return run


def host_stage_ms(shape: TreeShape, vocab: int, repeats: int, verifier=None) -> dict[str, float]:
    """Host work per iteration outside the model calls, on a random tree of the compiled shape (the
    sampling path runs these; greedy does them inside the compiled verify phase)."""
    g = torch.Generator().manual_seed(0)
    n = shape.n_nodes
    tree = TokenTree.from_root(0, n)
    tree.parents[1:] = torch.tensor([torch.randint(0, i, (1,), generator=g).item() for i in range(1, n)])
    tree.depth[1:] = torch.tensor([int(tree.depth[int(tree.parents[i])]) + 1 for i in range(1, n)])
    tree.cum_logp[1:] = -torch.rand(n - 1, generator=g).cumsum(0)
    tree.tokens[1:] = torch.randint(0, vocab, (n - 1,), generator=g)
    tree.n_nodes = n
    kept = prune_topk(tree, shape.verify)
    sub = tree.subtree(kept)
    logits = torch.randn(shape.verify + 1, vocab, generator=g)
    out = {
        "prune": median_ms(lambda: prune_topk(tree, shape.verify), repeats),
        "tree_mask": median_ms(lambda: tree_mask(64, sub.ancestor_mask(), 128), repeats),
        "accept_greedy": median_ms(lambda: verify_greedy(sub.tokens, sub.parents, logits), repeats),
    }
    if verifier is not None:  # moving an accepted path of D tokens' K/V behind the root, every layer
        device = model_device(verifier)
        base = min(64, verifier.graph.n_slots - shape.depth - 2)
        src = torch.arange(base, base + shape.depth, device=device)
        out["compact_kv"] = median_ms(lambda: verifier.move_kv(src + 1, src), repeats)
    return out


class HeadSteps:
    """An EAGLE-3 head (its graph, or the CompiledModel around its O2 package) as a plain (ids, positions,
    slots, mask) forward, fed zero features: the cost of its draft steps at each width, for the objective."""

    def __init__(self, head):
        self.head, self.graph = head, getattr(head, "graph", head)
        self.cfg, self.package_width = self.graph.cfg, getattr(head, "package_width", 0)

    def __call__(self, input_ids, position_ids, cache_slots, attn_mask):
        w = self.graph.fc.weight
        feature = torch.zeros(input_ids.shape[0], w.shape[0], dtype=w.dtype, device=w.device)  # [W, H]
        return self.head(input_ids, feature, position_ids, cache_slots, attn_mask)


def drafter_steps(models: Pair, widths: Widths):
    """The forward the profile times the drafter's steps with (an EAGLE-3 head's HeadSteps, or the drafter), or None
    where it has no forward widths and its draft phase alone prices its steps."""
    return models.drafter if widths.drafter else None


def phase_latency_ms(decoder: SpeculativeDecoder, context: int, repeats: int, drafter=None) -> PhaseTimes:
    """One draft phase and one greedy verify phase as the decode loop calls them (host glue included), and the model
    calls the objective prices them with, all taking turns call by call in the decode loop's order: the verifier's
    at one row and at the verify phase's width, and `drafter`'s (drafter_steps, if any) at the head step's width and
    the tree steps', at the decoder's shape. The glue is what a phase takes beyond its calls: timed in the same
    minutes as the phases, the calls move with the VM's memory speed as the phases do (on a shared VM, by a large
    fraction within minutes), where calls timed minutes earlier let that drift pass for glue."""
    layout, shape, verify_width = decoder.layout, decoder.shape, decoder.shape.verify + 1
    widths = {"verifier": (1, verify_width), "drafter": (HEAD_WIDTH, shape.width) if drafter is not None else ()}
    with torch.inference_mode(), device_scope(decoder.device):  # host-built inputs go where the models are
        draft = decoder.draft_greedy([0], context)
        steps = {("drafter", w): bucket_call(drafter, w, layout, context) for w in widths["drafter"]}
        # in the decode loop's order: a draft phase, and a drafter's first step, follow a verifier call that has
        # streamed its weights through the caches (a small drafter's later steps find theirs there)
        ms = steady_ms_each({"verify": lambda: decoder.verify_greedy(draft, context),
                             "draft": lambda: decoder.draft_greedy([0], context),
                             ("verifier", 1): bucket_call(decoder.verifier, 1, layout, context), **steps,
                             ("verifier", verify_width): bucket_call(decoder.verifier, verify_width, layout, context)},
                            repeats)
    return PhaseTimes({"draft": ms["draft"], "verify": ms["verify"]},
                      {name: {w: ms[(name, w)] for w in ws} for name, ws in widths.items() if ws},
                      TreeShape(shape.depth, shape.width, shape.verify))


def profile_context(layout: CacheLayout) -> int:
    return min(256, layout.max_seq // 2)


def phase_profile(decoder: SpeculativeDecoder, repeats: int, drafter=None) -> PhaseTimes:
    """The decoder's draft and verify phases timed whole at its shape (host glue included) and the calls they are
    priced with (phase_latency_ms; `drafter`: drafter_steps): what StageCosts.from_profile prices the glue around the
    model calls from."""
    return phase_latency_ms(decoder, profile_context(decoder.layout), repeats, drafter)


def profile_forward(models: Pair, widths: Widths, layout: CacheLayout, repeats: int = 20,
                    log=None, measured: dict[str, ModelTimes] | None = None) -> dict[str, ModelTimes]:
    """Per model: measured ms of every bucket width and the roofline curve fitted to them. Widths
    already in `measured` (an earlier profile_forward result) are taken from it, not timed again."""
    out = {}
    for name, model in models.items():
        if not widths[name]:  # no forward buckets (an EAGLE-3 head runs inside the draft phase)
            if name in (measured or {}):  # its eager steps timed before calibration
                out[name] = measured[name]
            continue
        points = dict((measured or {})[name].bucket_ms) if name in (measured or {}) else {}
        calls = {w: bucket_call(model, w, layout, profile_context(layout))
                 for w in timed_widths(model, widths[name]) if w not in points}
        points = dict(sorted({**points, **steady_ms_each(calls, repeats)}.items()))  # widths in turn: drift hits all
        for w in calls if log else ():  # one step per timed width, as the compile's bar counts them
            log(f"profile {name} W={w}: {points[w]:.3f} ms")
        curve = fit_cost_curve(points, *expert_counts(model.cfg))
        out[name] = ModelTimes(points, curve.to_dict())
    return out


def context_cost(model, bucket_ms: dict[int, float], layout: CacheLayout, repeats: int) -> ContextTimes:
    """The verifier's narrowest and widest bucket again with the cache nearly full, beside their times at the
    profile's context (`bucket_ms`, from profile_forward). The weights cost the same at both, so the
    difference is attention over the longer cache view and its mask: `attention_share` is the part of the
    long-context step that grows with the context, extrapolated linearly to zero context."""
    short, long = profile_context(layout), layout.max_seq - 1  # rows past the cache share its last slot
    ms, share = {}, {}
    for w in sorted({min(bucket_ms), max(bucket_ms)}):
        at_short, at_long = bucket_ms[w], bucket_latency_ms(model, w, layout, long, repeats)
        per_token = max(0.0, at_long - at_short) / (long - short)
        ms[w] = (at_short, at_long)
        share[w] = min(1.0, per_token * long / at_long)
    return ContextTimes((short, long), ms, share)


def profile_models(models: Pair, widths: Widths, layout: CacheLayout, shape: TreeShape,
                   repeats: int = 20, log=None, decoder: SpeculativeDecoder | None = None,
                   measured: dict[str, ModelTimes] | None = None) -> Profile:
    """Every stage's profile (profile.json): the models' buckets, the verifier at a long context, the host stages
    and, given the decoder, its phases."""
    forward = profile_forward(models, widths, layout, repeats, log, measured)
    long_context = (context_cost(models.verifier, forward["verifier"].bucket_ms, layout, repeats)
                    if "verifier" in forward else None)
    host = host_stage_ms(shape, models.verifier.cfg.vocab_size, repeats, models.verifier)
    phases = phase_profile(decoder, repeats, drafter_steps(models, widths)) if decoder is not None else None
    device = cuda_properties() if model_device(models.verifier).type == "cuda" else None
    return Profile.measured(profile_context(layout), forward, host, long_context, phases, device)
