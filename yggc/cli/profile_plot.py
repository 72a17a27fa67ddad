"""Plots: `yggc profile BUNDLE --plot` (measured bucket latencies and the fitted roofline curve per model)
and `yggc inspect BUNDLE --plot` (the stage plan's timeline as a Gantt chart)."""
from __future__ import annotations

from pathlib import Path

from ..errors import YggcError
from ..plan.bundle_plan import StagePlan
from ..plan.bundle_profile import Profile


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise YggcError("--plot needs matplotlib; pip install 'yggc[plot]' (or matplotlib)") from None
    return plt


def plot_timeline(schedule: StagePlan, out: Path) -> Path:
    """One bar per stage on its resource's row, coloured by stage kind."""
    plt = pyplot()
    slots, executed = schedule.timeline, schedule.executed
    resources = sorted({s.resource for s in slots})
    kinds = sorted({s.stage.rstrip("0123456789") for s in slots})
    colors = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * len(resources)))
    for s in slots:
        row, kind = resources.index(s.resource), s.stage.rstrip("0123456789")
        ax.barh(row, s.end_ms - s.start_ms, left=s.start_ms, color=colors[kind], edgecolor="black")
        ax.text((s.start_ms + s.end_ms) / 2, row, s.stage, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(resources)), resources)
    ax.set_xlabel("ms from the iteration's first stage")
    ax.set_title(f"yggc stage plan: {executed.variant} on {executed.assignment} cores, "
                 f"{executed.iteration_ms:.2f} ms/iteration (list-scheduled estimate)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_profile(profile: Profile, out: Path) -> Path:
    """Left: measured bucket latencies and the fitted cost curve per model; right: target efficiency T(1)/T(W)."""
    plt = pyplot()
    fig, (ax, eff) = plt.subplots(1, 2, figsize=(11, 4))
    for name, entry in profile.models.items():
        points = sorted(entry.bucket_ms.items())
        curve = entry.curve
        t1 = dict(points).get(1, curve(1))
        xs = list(range(1, max(w for w, _ in points) + 1))
        line = ax.plot(xs, [curve(x) for x in xs], label=f"{name} fit")[0]
        ax.scatter([w for w, _ in points], [ms for _, ms in points], color=line.get_color(), label=f"{name} measured")
        eff.plot(xs, [curve.efficiency(x) for x in xs], color=line.get_color(), label=f"{name} fit")
        eff.scatter([w for w, _ in points], [t1 / ms for _, ms in points], color=line.get_color(),
                    label=f"{name} measured")
    ax.set_xlabel("input width W (tokens per call)")
    ax.set_ylabel("latency per call (ms)")
    ax.set_title(f"yggc stage profile (context {profile.context} tokens)")
    ax.legend()
    eff.set_xlabel("input width W (tokens per call)")
    eff.set_ylabel("target efficiency T(1) / T(W)")
    eff.set_ylim(0, 1.1)
    eff.set_title("target efficiency (1: extra rows are free)")
    eff.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
