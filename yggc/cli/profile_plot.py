"""`yggc profile BUNDLE --plot`: measured bucket latencies and the fitted roofline curve per model."""
from __future__ import annotations

from pathlib import Path

from ..errors import YggcError
from ..plan.cost_model import CostCurve


def plot_profile(profile: dict, out: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise YggcError("--plot needs matplotlib; pip install 'yggc[plot]' (or matplotlib)") from None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, entry in profile["models"].items():
        points = sorted((int(w), ms) for w, ms in entry["bucket_ms"].items())
        curve = CostCurve(**entry["cost_curve"])
        xs = list(range(1, max(w for w, _ in points) + 1))
        line = ax.plot(xs, [curve(x) for x in xs], label=f"{name} fit")[0]
        ax.scatter([w for w, _ in points], [ms for _, ms in points], color=line.get_color(), label=f"{name} measured")
    ax.set_xlabel("input width W (tokens per call)")
    ax.set_ylabel("latency per call (ms)")
    ax.set_title(f"yggc stage profile (context {profile['context']} tokens)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
