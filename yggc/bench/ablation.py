"""`yggc bench --ablation`: Yggdrasil's Fig. 12 on one calibrated bundle, one component added per row, each row
decoded through the bundle's compiled packages and checked token for token against its AR:

  ar                    the verifier alone
  static (no pruning)   the best (D, W, V = D*W) of the calibration grid search (plan.json "best_unpruned")
  + verify pruning      the best (D, W, V): the bundle's plan
  + depth predictor     the shape chosen per iteration (only when the bundle kept its predictor)

with TPOT, mean accepted length, the measured iteration and host bubble (`yggc run --trace`'s spans) and the
cost model's estimate of the iteration. The stage plan, the last component, is the bundle's `yggc inspect` record.
"""
from __future__ import annotations

import statistics

from ..errors import YggcError
from ..plan.bundle_plan import BundlePlan
from ..plan.shape import TreeShape
from ..plan.stages import StageCosts
from ..runtime.runtime import Runtime
from .side_by_side import DecodedRow


def unpruned_shape(plan: BundlePlan) -> TreeShape:
    if plan.best_unpruned is None:
        raise YggcError("--ablation needs a bundle compiled with --calib (its plan.json records the best unpruned "
                        "tree); re-run `yggc compile --calib FILE`")
    return plan.best_unpruned.shape


def ablation_decoders(rt: Runtime, unpruned: TreeShape) -> dict[str, tuple[object, TreeShape | None]]:
    """Row name -> (decoder, its fixed shape or None)."""
    rows = {"ar": (rt.decoder(speculative=False), None),
            "static (no pruning)": (rt.decoder(shape=unpruned), unpruned),
            "+ verify pruning": (rt.decoder(shape=rt.shape), rt.shape)}
    if rt.policy is not None:
        rows["+ depth predictor"] = (rt.decoder(speculative=True), None)
    return rows


def ablation_table(rows: dict[str, DecodedRow], shapes: dict[str, TreeShape | None],
                   stages: StageCosts | None) -> str:
    lines = ["| row | shape | TPOT ms | mean accepted | iteration ms (measured / estimated) | host bubble ms | "
             "equal to AR |", "|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        shape = shapes[name]
        label = shape.short if shape else ("-" if name == "ar" else "per iteration")
        est = f"{stages.iteration_ms(shape):.2f}" if shape and stages else "-"
        iteration, bubble = row.median("iteration_ms"), row.median("host_bubble_ms")
        lines.append(f"| {name} | {label} | {statistics.median(row.tpot_ms):.2f} | {statistics.mean(row.accepted):.2f} "
                     f"| {'-' if iteration is None else f'{iteration:.2f} / {est}'} | "
                     f"{'-' if bubble is None else f'{bubble:.2f}'} | {'yes' if row.equal else 'NO'} |")
    return "\n".join(lines)
