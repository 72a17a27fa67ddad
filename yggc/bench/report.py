"""The report of `yggc bench`: machine line, the table, summary lines, the JSON dump and the plot.

Definitions used in the table:

* TPOT: time after the first new token / (new tokens - 1), as `yggc run` reports it; for
  transformers, from the streamer's first new-token callback to its last; for OpenVINO, its own
  perf_metrics.get_tpot() (the same definition).
* tokens/s: 1000 / TPOT median (decode speed, prefill excluded).
* mean accepted: tokens committed per decode iteration, bonus token included (vLLM's convention);
  1 for autoregressive rows, tokens per streamer callback for hf-assisted, tokens per pipeline step
  for openvino-spec.
* peak RSS: the process high-water mark (getrusage ru_maxrss) right after the row was set up and
  warmed up. It is cumulative: "+N" is what the row added on top of the rows above it. Models are
  loaded once and shared (hf-assisted reuses hf-ar's verifier, the eager yggc rows share one
  verifier/drafter, the compiled rows share one bundle), so each is charged to the first row using it.
* floor, verify ms, x floor: see yggc.bench.floor.
* equal: greedy tokens equal to the reference row's (yggc.bench.rows.REFERENCES: hf-ar in float32,
  yggc's own AR decoding in bfloat16), else the first mismatching prompt and position.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
from pathlib import Path

import torch

from .. import __version__
from ..errors import YggcError
from .rows import Row, mean_accepted, median, p90
from .suite import BenchConfig


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = f", load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    return (f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
            f"yggc {__version__}{load}")


def speedup(base: Row | None, row: Row) -> str:
    if base is None:
        return "-"
    return f"{median(base.tpots()) / median(row.tpots()):.2f}x"


def equal_cell(row: Row, ref: Row | None) -> str:
    if ref is None:
        return "-"
    if row is ref:
        return "(reference)"
    return "yes" if not row.mismatches else "NO: " + "; ".join(row.mismatches)


def verify_cell(row: Row) -> str:
    if row.verify_ms is None:
        return "-"
    ratio = f" ({row.verify_ms / row.floor_ms:.2f}x)" if row.floor_ms else ""
    return f"{row.verify_ms:.3f}{ratio}"


def table(rows: list[Row], ref: Row | None) -> str:
    """The rows; with a reference row (greedy runs), an equality column against it."""
    by_name = {r.name: r for r in rows}
    hf_ar, hf_as = by_name.get("hf-ar"), by_name.get("hf-assisted")
    head = ["row", "runs as", "TPOT median ms", "TPOT p90 ms", "tokens/s", "mean accepted", "vs hf-ar",
            "vs hf-assisted", "peak RSS MB (+added)", "verify ms (x floor)"]
    if ref is not None:
        head.append(f"equal to {ref.name}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        med = median(row.tpots())
        cells = [row.name, row.runs_as, f"{med:.3f}", f"{p90(row.tpots()):.3f}", f"{1000 / med:.1f}",
                 f"{mean_accepted(row):.2f}", speedup(hf_ar, row), speedup(hf_as, row),
                 f"{row.rss_mb:.0f} (+{row.rss_delta_mb:.0f})", verify_cell(row)]
        if ref is not None:
            cells.append(equal_cell(row, ref))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_lines(cfg: BenchConfig, prompts: list[list[int]], source: str, floor: dict | None,
                  tuning: dict) -> list[str]:
    mode = "greedy" if cfg.greedy else f"temperature {cfg.temperature:g} (sampling; no equality column)"
    lines = [f"machine: {machine_line()}",
             f"pair: verifier {cfg.verifier}, drafter {cfg.drafter}; dtype {cfg.dtype}, max_seq {cfg.max_seq}",
             f"workload: {cfg.n_prompts} prompt(s) ({source}; {statistics.mean(map(len, prompts)):.0f} tokens on "
             f"average) x {cfg.n_new} new tokens x {cfg.repeats} repeat(s), {mode}; rows interleaved, warm-up "
             "excluded"]
    for name, times in tuning.items():
        lines.append(f"{name} tuned on a held-out warm-up prompt, TPOT ms: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))
    if floor:
        lines.append(f"floor: memory bandwidth {floor['read_gbs']:.1f} GB/s read, {floor['copy_gbs']:.1f} GB/s copy "
                     f"over {floor['mb']} MB, {floor['weights_read_gbs']:.1f} GB/s reading a weights-sized buffer "
                     f"again and again (cache-resident if it fits); verifier weights {floor['weight_bytes'] / 1e6:.1f} "
                     f"MB / the fastest of these = {floor['floor_ms']:.3f} ms per verify step")
        lines.append("verify ms: median verify call inside one more decode of prompt 0 (AR: the 1-token step; "
                     "greedy trees/chains: the verify phase, pruning and acceptance included); x floor: against "
                     "that row's floor, a weights-sized read timed just before and after that decode (the faster)")
    return lines


AR_OF = {"yggc-chain": "yggc-ar-eager", "yggc-tree-static": "yggc-ar-eager", "yggc-suffix": "yggc-ar-compiled",
         "yggc-full": "yggc-ar-compiled", "yggc-full-suffix": "yggc-ar-compiled"}


def target_efficiency(rows: list[Row]) -> dict[str, dict]:
    """MoESD's decomposition of each speculative row's speedup over its AR row (same engine): target efficiency
    T(1)/T(verify) from the two rows' median verify calls, the speedup if drafting cost nothing (accepted
    tokens per iteration x target efficiency), and the measured speedup. A low efficiency says the verifier,
    not the drafter, is why speculation does not pay (moesd.txt section 3.1)."""
    by_name, out = {r.name: r for r in rows}, {}
    for name, ar_name in AR_OF.items():
        row, ar = by_name.get(name), by_name.get(ar_name)
        if row is None or ar is None or not row.verify_ms or not ar.verify_ms:
            continue
        eff = ar.verify_ms / row.verify_ms
        out[name] = {"ar_row": ar_name, "ar_step_ms": ar.verify_ms, "verify_ms": row.verify_ms,
                     "target_efficiency": round(eff, 4), "mean_accepted": round(mean_accepted(row), 4),
                     "speedup_if_drafting_were_free": round(mean_accepted(row) * eff, 4),
                     "speedup": round(median(ar.tpots()) / median(row.tpots()), 4)}
    return out


def efficiency_lines(rows: list[Row]) -> list[str]:
    return [f"{name}: target efficiency {e['target_efficiency']:.2f} (verify {e['verify_ms']:.2f} ms vs a "
            f"{e['ar_step_ms']:.2f} ms {e['ar_row']} step) x {e['mean_accepted']:.2f} accepted = "
            f"{e['speedup_if_drafting_were_free']:.2f}x if drafting were free; measured {e['speedup']:.2f}x"
            for name, e in target_efficiency(rows).items()]


def to_json(cfg: BenchConfig, rows: list[Row], floor: dict | None, tuning: dict, source: str) -> dict:
    return {
        "machine": machine_line(), "argv": sys.argv, "prompt_source": source,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()
                   if k not in ("tree_grid",)} | {"tree_grid": [s.short for s in cfg.tree_grid]},
        "floor": floor, "tuning": tuning, "target_efficiency": target_efficiency(rows),
        "rows": [{"name": r.name, "runs_as": r.runs_as, "rss_mb": r.rss_mb, "rss_delta_mb": r.rss_delta_mb,
                  "verify_ms": r.verify_ms, "floor_ms": r.floor_ms, "mismatches": r.mismatches,
                  "samples": [vars(s) for s in r.samples]} for r in rows],
    }


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise YggcError("--plot needs matplotlib: pip install matplotlib (or drop --plot)") from None
    return plt


def plot(rows: list[Row], path: Path) -> None:
    """TPOT bars (median, p90 whisker) and the accepted-length histogram of the speculative rows."""
    plt = require_matplotlib()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    meds = [median(r.tpots()) for r in rows]
    ax1.bar([r.name for r in rows], meds, yerr=[[0] * len(rows), [p90(r.tpots()) - m for r, m in zip(rows, meds)]])
    ax1.set_ylabel("TPOT ms (median, p90 whisker)")
    ax1.tick_params(axis="x", rotation=30)
    spec = [r for r in rows if any(k > 1 for k in r.per_iter())]
    top = max((max(r.per_iter()) for r in spec), default=1)
    for r in spec:
        ax2.hist(r.per_iter(), bins=range(1, top + 2), alpha=0.5, label=r.name, density=True, align="left")
    ax2.set_xlabel("tokens accepted per iteration (bonus included)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path)
