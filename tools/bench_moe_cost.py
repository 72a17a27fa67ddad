#!/usr/bin/env python3
"""The verify-cost curve T(t) of sparse (MoE) and dense verifiers against the MoESD cost model.

For each bundle: the verifier's compiled forward at every width t in --widths (distinct tokens, so an MoE's
rows route to different experts), the median over --rounds interleaved sweeps of --repeats calls each; the cost model (yggc/plan/cost_model.py,
the verifier's expert counts) fitted to the --fit-widths only (by default the widths `yggc compile`
profiles), then its error at every measured width; the
target efficiency T(1)/T(t) measured and fitted; and the tree shape the bundle's objective chose.

    python tools/bench_moe_cost.py moe.bundle dense.bundle --threads 2 --json costs.json --plot costs.png
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_widths import forward_ms  # tools/ sibling
from yggc.passes.profile import PACKAGE_PROBE_WIDTHS, expert_counts

from yggc.plan.cost_model import fit_cost_curve
from yggc.runtime import Runtime

FIT_WIDTHS = (1, *PACKAGE_PROBE_WIDTHS)
SHOWN = (1, 2, 4, 8, 16, 32, 64)


def interleaved_ms(model, widths: list[int], context: int, layout, repeats: int, rounds: int) -> dict[int, float]:
    """Median over `rounds` sweeps of every width (each the median of `repeats` calls): a disturbance on this
    shared machine spoils one sweep's width, not the result."""
    sweeps = [{w: forward_ms(model, w, context, layout, repeats) for w in widths} for _ in range(rounds)]
    return {w: statistics.median(s[w] for s in sweeps) for w in widths}


def measure(bundle: str, widths: list[int], fit_widths: tuple[int, ...], context: int, repeats: int,
            rounds: int) -> dict:
    rt = Runtime.load(bundle)
    verifier, layout = rt.compiled["verifier"], rt.verifier.layout
    ms = interleaved_ms(verifier, [w for w in widths if verifier.runner(w) is not None], context, layout, repeats,
                        rounds)
    experts, top_k = expert_counts(verifier.cfg)
    curve = fit_cost_curve({w: ms[w] for w in fit_widths if w in ms}, experts, top_k)
    errors = {w: curve(w) / t - 1 for w, t in ms.items()}
    plan = json.loads((Path(bundle) / "plan.json").read_text())
    return {"bundle": bundle, "experts": experts, "top_k": top_k, "ms": ms, "curve": curve.to_dict(),
            "fit_error": errors, "max_abs_error": max(abs(e) for e in errors.values()),
            "efficiency": {w: ms[1] / t for w, t in ms.items()},
            "plan": {k: plan.get(k) for k in ("depth", "width", "verify", "speculate", "objective", "measured", "decoded")},
            "_curve": curve}


def table(results: list[dict]) -> str:
    lines = ["| bundle | E, K | " + " | ".join(f"T({w}) ms (fit err)" for w in SHOWN) + " | max fit err |",
             "|---" * (len(SHOWN) + 3) + "|"]
    for r in results:
        cells = [f"{r['ms'][w]:.2f} ({r['fit_error'][w]:+.0%})" if w in r["ms"] else "-" for w in SHOWN]
        lines.append(f"| {r['bundle']} | {r['experts']}, {r['top_k']} | " + " | ".join(cells)
                     + f" | {r['max_abs_error']:.1%} |")
    lines += ["", "| bundle | " + " | ".join(f"eff({w})" for w in SHOWN) + " | objective's shape |",
              "|---" * (len(SHOWN) + 2) + "|"]
    for r in results:
        p = r["plan"]
        shape = f"D{p['depth']} W{p['width']} V{p['verify']}" + ("" if p.get("speculate", True) else " (spec. off)")
        cells = [f"{r['efficiency'][w]:.2f} / {r['_curve'].efficiency(w):.2f}" if w in r["ms"] else "-" for w in SHOWN]
        lines.append(f"| {r['bundle']} | " + " | ".join(cells) + f" | {shape} |")
    return "\n".join(lines)


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, eff) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        ws = sorted(r["ms"])
        line = ax.plot(ws, [r["_curve"](w) for w in ws], label=f"{Path(r['bundle']).name} fit")[0]
        ax.scatter(ws, [r["ms"][w] for w in ws], s=8, color=line.get_color(), label=f"{Path(r['bundle']).name}")
        eff.plot(ws, [r["_curve"].efficiency(w) for w in ws], color=line.get_color())
        eff.scatter(ws, [r["efficiency"][w] for w in ws], s=8, color=line.get_color(), label=Path(r["bundle"]).name)
    ax.set(xlabel="verify width t (tokens)", ylabel="ms per verifier call", title="T(t): measured and MoESD fit")
    eff.set(xlabel="verify width t (tokens)", ylabel="T(1) / T(t)", title="target efficiency", ylim=(0, 1.1))
    ax.legend(), eff.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", help="bundles written by `yggc compile` (O2: every width)")
    ap.add_argument("--widths", default="1-64", help="measured widths: 'A-B' or a comma list (default 1-64)")
    ap.add_argument("--fit-widths", default=",".join(map(str, FIT_WIDTHS)),
                    help="the widths the model is fitted to (default: the ones `yggc compile` profiles)")
    ap.add_argument("--context", type=int, default=256, help="cached tokens before the rows (default 256)")
    ap.add_argument("--repeats", type=int, default=7, help="calls per width and sweep (their median)")
    ap.add_argument("--rounds", type=int, default=3, help="sweeps over the widths (the median of their medians)")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lo, _, hi = args.widths.partition("-")
    widths = list(range(int(lo), int(hi) + 1)) if hi else [int(w) for w in args.widths.split(",")]
    fit = tuple(int(w) for w in args.fit_widths.split(","))
    results = [measure(b, widths, fit, args.context, args.repeats, args.rounds) for b in args.bundles]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, context {args.context}, "
          f"fitted on t = {', '.join(map(str, fit))}; efficiency cells: measured / fitted")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "_curve"} for r in results], indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
