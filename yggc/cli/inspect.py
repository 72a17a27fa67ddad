"""`yggc inspect`: a bundle's manifest, plan, buckets and stage latencies, read as JSON; the profile tables it
shares with `yggc profile` (profile.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..bundle import load_manifest
from ..errors import YggcError
from ..plan.bundle_plan import AdaptivePlan, BundlePlan, MeasuredSpeedup, StageEstimate, StagePlan, read_plan
from ..plan.bundle_profile import ModelTimes, Profile
from .arg_types import Verbs
from .flags import POSITIVE


def add_parser(sub: Verbs) -> None:
    """`yggc inspect`: its flags; main runs it."""
    p = sub.add_parser("inspect", help="show a bundle's manifest, buckets and profile")
    p.add_argument("bundle", help="a bundle written by `yggc compile`")
    p.add_argument("--json", action="store_true", help="print the manifest and profile as JSON")
    p.add_argument("--plot", metavar="OUT.png",
                   help="also draw the stage plan's timeline (a Gantt chart of one steady-state iteration)")
    p.add_argument("--load-time", action="store_true",
                   help="instead: load the bundle and decode one 64-token chat answer in this process: size on "
                        "disk against the weights, process start to imported, Runtime.load, load to first token, "
                        "RSS after import and load and at its peak (one bundle per process; --json: as JSON)")
    p.add_argument("--threads", "-t", type=POSITIVE, help="with --load-time: torch threads (default: torch's)")
    p.set_defaults(main=main)


def curve_formula(c: dict) -> str:
    corner = "hard corner" if c.get("s") is None else f"s = {c['s']:g}"
    text = f"T(W) = {c['t0_ms']:.3f} ms + {c['slope_ms']:.4f} ms x G(W; knee {c['knee']:g}, {corner})"
    if c.get("row_tile"):
        text += f" + {c['tile_ms']:.4f} ms x (ceil(W / {c['row_tile']}) - 1) GEMM row blocks"
    if c.get("n_experts"):
        text += (f" + {c['expert_ms']:.4f} ms x (N(W) - {c['top_k']}) + {c['expert_slope_ms']:.4f} ms x "
                 f"G(W {c['top_k']} / N(W)), N(W) = {c['n_experts']} (1 - (1 - {c['top_k']}/{c['n_experts']})^W) "
                 "activated experts")
    return text


def efficiency_table(name: str, entry: ModelTimes) -> list[str]:
    """Measured and fitted T(W) and MoESD's target efficiency T(1) / T(W) at each timed width."""
    curve = entry.curve
    points = sorted(entry.bucket_ms.items())
    t1 = dict(points).get(1, curve(1))
    lines = [f"  {name}: W | measured ms | fitted ms | target efficiency T(1)/T(W) measured, fitted"]
    for w, ms in points:
        lines.append(f"    {w:>4} | {ms:9.3f} | {curve(w):9.3f} | {t1 / ms:.3f}, {curve.efficiency(w):.3f}")
    return lines


def print_profile(profile: Profile) -> None:
    for name, entry in profile.models.items():
        print(f"  {name} cost curve: {curve_formula(entry.cost_curve)}")
        print("\n".join(efficiency_table(name, entry)))
    context = profile.context_ms
    for w, (at_short, at_long) in (context.ms if context else {}).items():
        share = context.attention_share[w]
        print(f"  verifier W={w}: {at_short:.3f} ms at {context.contexts[0]} cached tokens, {at_long:.3f} ms at "
              f"{context.contexts[1]} (attention over the cache: {share:.0%} of that step)")
    for phase, ms in profile.phase_ms.items():
        print(f"  {phase} phase (one call): {ms:.3f} ms")
    for model, calls in profile.phase_calls_ms.items():
        for w, ms in calls.items():
            print(f"  {model} W={w}, timed in turn with the phases: {ms:.3f} ms")
    for stage, ms in profile.host_ms.items():
        print(f"  host {stage}: {ms:.4f} ms")


def print_speedups(plan: BundlePlan) -> None:
    """The objective's predicted speedup beside the ones measured from the compiled phases and from decoding."""
    predicted, measured, decoded = plan.objective, plan.measured, plan.decoded
    if predicted and measured:
        print(f"  speedup over the verifier alone: predicted {predicted.speedup:.2f}x (cost model and calibrated "
              f"acceptance), measured {measured.speedup:.2f}x (compiled phases)"
              + (f", {decoded.speedup:.2f}x (decoding calibration text)" if decoded else ""))


def print_adaptive(record: AdaptivePlan) -> None:
    """The depth predictor's candidate shapes and whether it beat the best constant shape."""
    if record.shapes is not None:
        shapes = ", ".join(map(str, record.shapes))
        print(f"  depth predictor: {'used' if record.used else 'not used'}, one shape per depth: {shapes}")
    held = record.held_out_tokens_per_ms
    if held:
        print(f"    held-out trees: {held.adaptive:.4f} tokens/ms choosing per iteration, "
              f"{held.best_constant:.4f} with the best constant shape"
              + (f", {held.oracle:.4f} choosing with each tree's yield known" if held.oracle is not None else ""))
    if not record.used:
        print(f"    {record.reason or ''}")


def plan_warnings(profile: Profile, plan: BundlePlan | None) -> list[str]:
    """Why the plan may not suit this machine: a profile taken while other programs ran, an estimate the decode
    check did not confirm."""
    from ..passes.contention import contention_line

    out = [contention_line(profile.contention)] if profile.contention else []
    return out + ([plan.estimate_off] if plan and plan.estimate_off else [])


def print_plan(plan: BundlePlan) -> None:
    s = plan.shape
    print(f"  plan: depth {s.depth}, width {s.width}, verify {s.verify} ({plan.source})")
    best = plan.objective
    if best:
        print(f"  objective: {best.tokens_per_iter:.2f} tokens/iteration, {best.iteration_ms:.3f} ms/iteration, "
              f"estimated {best.speedup:.2f}x over the verifier alone")
        for c in plan.candidates[1:5]:
            print(f"    next: {c.shape}: {c.tokens_per_iter:.2f} tokens/iteration, "
                  f"estimated {c.speedup:.2f}x")
    if plan.adaptive:
        print_adaptive(plan.adaptive)
    measured, decoded = plan.measured, plan.decoded
    verdict = "speculation on" if plan.speculate else "speculation OFF: plain decoding is faster"
    if measured:
        print(f"  measured: {measured.iteration_ms:.3f} ms/iteration against a {measured.verifier_step_ms:.3f} ms "
              f"verifier step = {measured.speedup:.2f}x" + ("" if decoded else f" ({verdict})"))
    with_suffix = plan.decoded_with_suffix
    if decoded:
        print(f"  decoded calibration text: {decoded.tree_tpot_ms:.3f} ms/token against {decoded.ar_tpot_ms:.3f} "
              f"for the verifier alone = {decoded.speedup:.2f}x" + ("" if with_suffix else f" ({verdict})"))
    if with_suffix:
        print(f"    with suffix branches (greedy requests' default): {with_suffix.tree_tpot_ms:.3f} ms/token against "
              f"{with_suffix.ar_tpot_ms:.3f} = {with_suffix.speedup:.2f}x ({verdict})")
    sampling = plan.sampling
    if not sampling:
        print("  sampling plan: none; requests at T > 0 draft the greedy plan's tree, unpriced at any temperature "
              "(`yggc compile --calib` prices one at T = 1)")
    else:
        best = sampling.objective
        verdict = "speculation on" if sampling.speculate else "speculation OFF"
        checked = f", decoded {sampling.decoded.speedup:.2f}x" if sampling.decoded else ""
        print(f"  sampling plan (T={sampling.temperature:g}, used by requests at T > 0): {sampling.shape}, "
              f"{best.tokens_per_iter:.2f} expected tokens/iteration, estimated {best.speedup:.2f}x{checked} ({verdict})")


def plan_label(p: StageEstimate) -> str:
    text = f"{p.variant} on {p.assignment} cores, {p.shape}: {p.iteration_ms:.3f} ms/iteration"
    if p.ms_per_token is not None:
        text += f", {p.ms_per_token:.3f} ms/token"
    return text + ("" if p.executable else " (estimate only: the runtime does not run this plan yet)")


def print_schedule(schedule: StagePlan, measured: MeasuredSpeedup | None) -> None:
    """The stage plan: what runs, its list-scheduled timeline, and the best estimate over all plans."""
    print(f"  stage plan: {plan_label(schedule.executed)}")
    if measured:
        ratio = schedule.executed.iteration_ms / measured.iteration_ms
        print(f"    estimate / measured draft+verify phases = {ratio:.2f}")
    for s in schedule.timeline:
        print(f"    {s.start_ms:8.3f} -> {s.end_ms:8.3f} ms  {s.resource:<7} {s.stage}")
    if plan_label(schedule.best_estimated) != plan_label(schedule.executed):
        print(f"  best estimated plan: {plan_label(schedule.best_estimated)}")


def load_time_command(args: argparse.Namespace) -> int:
    from ..bench.load_time import load_time, load_time_lines
    from .run import set_threads

    set_threads(args.threads, "yggc inspect")
    result = load_time(Path(args.bundle))
    lines = [f"bundle {args.bundle}:", *load_time_lines(result)]
    print(json.dumps(result, indent=1) if args.json else "\n".join(lines))
    return 0


def main(args: argparse.Namespace) -> int:
    """Print the bundle's manifest, plan, buckets and profile (or --json, --plot, --load-time) -> the exit code."""
    manifest = load_manifest(args.bundle)
    if args.load_time:
        return load_time_command(args)
    root = Path(args.bundle)
    profile, plan = Profile.load(root), read_plan(root)
    if args.json:
        print(json.dumps({"manifest": manifest.to_dict(), "profile": profile.to_json(), "plan": plan.to_json()},
                         indent=2))
        return 0
    m = manifest
    print(f"bundle {root}: format {m.format_version}, yggc {m.yggc_version}, torch {m.torch_version}")
    print(f"  device {m.device} ({m.isa}), dtype {m.dtype}, weights {m.weights}, opt {m.opt}, max_seq {m.max_seq}, "
          f"created {m.created}")
    from ..runtime.drafters import kind_named

    record = m.extra.get("drafter", {"kind": "llama"})
    kind = kind_named(record["kind"])
    print(f"  drafter: {kind.summary(record) if kind else record['kind']}")
    print_plan(plan)
    for warning in plan_warnings(profile, plan):
        print(f"  warning: {warning}")
    if plan.schedule:
        print_schedule(plan.schedule, plan.measured)
        if args.plot:
            from .profile_plot import plot_timeline

            print(f"wrote {plot_timeline(plan.schedule, Path(args.plot))}", file=sys.stderr)
    elif args.plot:
        raise YggcError(f"{root} has no stage plan to plot; re-compile it with this yggc")
    print("  buckets:")
    bucket_ms = {name: m.bucket_ms for name, m in profile.models.items()}
    phase_ms = profile.phase_ms
    for b in m.buckets:
        ms = (bucket_ms.get(b.model, {}).get(b.width) if b.kind == "forward"
              else phase_ms.get(b.kind.split("_")[0]))
        print(f"    {b.name:<20} {b.kind:<13} {ms:9.3f} ms" if ms is not None else f"    {b.name}")
    print_profile(profile)
    return 0
