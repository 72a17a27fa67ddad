"""plan.json as values: the tree shape a bundle decodes with, why the compile chose it (yggdrasil.txt 4.1: the
objective's ranking, the measured and decoded checks), the sampling plan for T > 0, the depth predictor's record
(4.2) and the priced stage plan (5.2).

The planning passes build these (passes/choose_shape.py, train_predictor.py, decode_check.py, plan.py), the
bundle writer writes `BundlePlan.to_json()` and `read_plan` is the one reader (Runtime.load, `yggc inspect`,
`yggc run --trace`). The JSON is the layout plan.json had before it was typed (depth, width and verify at the
top, each record under its name) plus "schema_version": a plan without one is version 1, and one newer than
PLAN_VERSION fails in one line. A record that is None (or no candidates) is left out of the JSON, as the passes
left out the records they had not made.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import YggcError
from .shape import TreeShape

PLAN_VERSION = 1  # the plan.json layout this yggc writes; it reads every version up to this one
PLAN = "plan.json"


def shape_json(s: TreeShape) -> dict[str, int]:
    """A shape as plan.json writes it: its depth, width and verify keys inside the record that has it."""
    return {"depth": s.depth, "width": s.width, "verify": s.verify}


def shape_of(raw: dict[str, Any]) -> TreeShape:
    """The shape of a record written with shape_json."""
    return TreeShape(raw["depth"], raw["width"], raw["verify"])


def present(record: dict[str, Any]) -> dict[str, Any]:
    """record without the entries that are None (records not made)."""
    return {k: v for k, v in record.items() if v is not None}


def parsed(raw: dict[str, Any], key: str, parse: Callable[[Any], Any]) -> Any:
    """parse(raw[key]), or None where the record is not there."""
    return None if raw.get(key) is None else parse(raw[key])


class Flat:
    """A record whose JSON object is its fields by name."""

    def to_json(self) -> dict[str, Any]:
        return present({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, raw: dict[str, Any]):
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


@dataclass(frozen=True)
class ShapeEstimate:
    """One shape as the objective priced it (objective.py's ShapeScore, rounded for the file)."""
    shape: TreeShape
    tokens_per_iter: float  # calibrated accepted drafts + the bonus token
    iteration_ms: float     # from the profiled cost curves
    ms_per_token: float
    speedup: float          # estimated, over the verifier decoding alone

    def to_json(self) -> dict[str, Any]:
        return {**shape_json(self.shape), "tokens_per_iter": self.tokens_per_iter, "iteration_ms": self.iteration_ms,
                "ms_per_token": self.ms_per_token, "speedup": self.speedup}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ShapeEstimate:
        return cls(shape_of(raw), raw["tokens_per_iter"], raw["iteration_ms"], raw["ms_per_token"], raw["speedup"])


@dataclass(frozen=True)
class MeasuredSpeedup(Flat):
    """plan.json's "measured": Eq. 3 with the profiled draft and verify phases of the chosen shape."""
    iteration_ms: float      # draft phase + verify phase
    verifier_step_ms: float  # the compiled 1-token verifier step
    speedup: float


@dataclass(frozen=True)
class DecodeCheck(Flat):
    """"decoded": the tree against the verifier alone on calibration text (passes/decode_check.py)."""
    tree_tpot_ms: float  # median time per output token, tree decoding
    ar_tpot_ms: float    # the same, the verifier alone
    speedup: float       # ar_tpot_ms / tree_tpot_ms: speculation stays on above decode_check.MIN_SPEEDUP
    tokens: int          # tokens each decoder generated


@dataclass(frozen=True)
class HeldOutRates(Flat):
    """Tokens per ms on the held-out calibration trees (passes/train_predictor.py)."""
    adaptive: float       # choosing the shape per iteration with the predictor
    best_constant: float  # the best static shape of the training trees
    oracle: float | None = None  # choosing with each tree's yield known (the bound)


@dataclass(frozen=True)
class AdaptivePlan:
    """"adaptive": whether the bundle picks its depth per iteration (yggdrasil.txt 4.2) and why. A policy that is
    used carries what DepthPolicy.from_plan rebuilds it from (its weights: predictor.safetensors)."""
    used: bool
    reason: str | None = None                 # why not, where not used
    width: int | None = None                  # the width every candidate shape shares
    shapes: tuple[TreeShape, ...] | None = None  # one candidate per depth, shallowest first
    n_trees: int | None = None                # calibration trees it was trained and checked on
    held_out_tokens_per_ms: HeldOutRates | None = None
    best_constant: TreeShape | None = None    # the best static shape on the training trees
    iteration_ms: tuple[float, ...] | None = None  # the estimated iteration time of each shape (a used policy)
    n_features: int | None = None             # the predictor's input and hidden sizes (a used policy)
    hidden: int | None = None

    def to_json(self) -> dict[str, Any]:
        shapes = None if self.shapes is None else [[s.depth, s.width, s.verify] for s in self.shapes]
        held, best = self.held_out_tokens_per_ms, self.best_constant
        return present({"width": self.width, "shapes": shapes, "n_trees": self.n_trees, "used": self.used,
                        "held_out_tokens_per_ms": held and held.to_json(),
                        "best_constant": best and [best.depth, best.width, best.verify], "reason": self.reason,
                        "iteration_ms": None if self.iteration_ms is None else list(self.iteration_ms),
                        "n_features": self.n_features, "hidden": self.hidden})

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> AdaptivePlan:
        return cls(raw["used"], raw.get("reason"), raw.get("width"),
                   parsed(raw, "shapes", lambda shapes: tuple(TreeShape(*s) for s in shapes)), raw.get("n_trees"),
                   parsed(raw, "held_out_tokens_per_ms", HeldOutRates.from_json),
                   parsed(raw, "best_constant", lambda s: TreeShape(*s)), parsed(raw, "iteration_ms", tuple),
                   raw.get("n_features"), raw.get("hidden"))


@dataclass(frozen=True)
class StageEstimate:
    """One stage plan (passes/plan.py): a variant on a core assignment for a shape, list-scheduled."""
    variant: str     # stages.VARIANTS
    assignment: str  # "shared", or "split" between core groups
    shape: TreeShape
    iteration_ms: float
    executable: bool  # the runtime's decode loop runs this plan (plan.EXECUTABLE)
    tokens_per_iter: float | None = None  # without calibration variants of one shape are ranked by time alone
    ms_per_token: float | None = None

    def to_json(self) -> dict[str, Any]:
        return present({"variant": self.variant, "assignment": self.assignment, **shape_json(self.shape),
                        "tokens_per_iter": self.tokens_per_iter, "iteration_ms": self.iteration_ms,
                        "ms_per_token": self.ms_per_token, "executable": self.executable})

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> StageEstimate:
        return cls(raw["variant"], raw["assignment"], shape_of(raw), raw["iteration_ms"], raw["executable"],
                   raw.get("tokens_per_iter"), raw.get("ms_per_token"))


@dataclass(frozen=True)
class TimelineSlot(Flat):
    """A stage of the steady-state iteration, ms from its first stage's start."""
    stage: str
    resource: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class StagePlan:
    """"schedule": the executed stage plan (its fields at the top of the record), its timeline, the best estimate
    over every plan and the runners-up."""
    executed: StageEstimate
    timeline: tuple[TimelineSlot, ...]
    best_estimated: StageEstimate
    runners_up: tuple[StageEstimate, ...]

    def to_json(self) -> dict[str, Any]:
        return {**self.executed.to_json(), "timeline": [s.to_json() for s in self.timeline],
                "best_estimated": self.best_estimated.to_json(), "runners_up": [p.to_json() for p in self.runners_up]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> StagePlan:
        return cls(StageEstimate.from_json(raw), tuple(TimelineSlot.from_json(s) for s in raw["timeline"]),
                   StageEstimate.from_json(raw["best_estimated"]),
                   tuple(StageEstimate.from_json(p) for p in raw["runners_up"]))


def ranking_json(objective: ShapeEstimate | None, best_unpruned: ShapeEstimate | None,
                 candidates: tuple[ShapeEstimate, ...]) -> dict[str, Any]:
    return present({"objective": objective and objective.to_json(),
                    "best_unpruned": best_unpruned and best_unpruned.to_json(),
                    "candidates": [c.to_json() for c in candidates] or None})


@dataclass(frozen=True)
class SamplingPlan:
    """"sampling": the shape for requests at T > 0, ranked by expected tokens at the calibrated temperature and
    checked by decoding at it (`yggc compile --calib`, at `--temp`, default 1)."""
    shape: TreeShape
    objective: ShapeEstimate
    best_unpruned: ShapeEstimate
    candidates: tuple[ShapeEstimate, ...]
    temperature: float
    host_ms_per_step: dict[int, float]  # draft width -> host sampling ms per draft step
    rank_acceptance: tuple[float, ...] = ()  # measured acceptance of each draw rank; () for the built-in rates
    source: str = "calibration"
    decoded: DecodeCheck | None = None  # the decode check at the temperature
    speculate: bool = True  # its verdict: False where the tree decoded slower than the verifier alone

    def to_json(self) -> dict[str, Any]:
        return present({**shape_json(self.shape), "source": self.source,
                        **ranking_json(self.objective, self.best_unpruned, self.candidates),
                        "temperature": self.temperature,
                        "host_ms_per_step": {str(w): ms for w, ms in self.host_ms_per_step.items()},
                        "rank_acceptance": list(self.rank_acceptance) or None,
                        "decoded": self.decoded and self.decoded.to_json(),
                        "speculate": self.speculate if self.decoded or not self.speculate else None})

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SamplingPlan:
        return cls(shape_of(raw), ShapeEstimate.from_json(raw["objective"]),
                   ShapeEstimate.from_json(raw["best_unpruned"]),
                   tuple(ShapeEstimate.from_json(c) for c in raw["candidates"]), raw["temperature"],
                   {int(w): ms for w, ms in raw["host_ms_per_step"].items()}, tuple(raw.get("rank_acceptance") or ()),
                   raw.get("source", "calibration"), parsed(raw, "decoded", DecodeCheck.from_json),
                   raw.get("speculate", True))


@dataclass(frozen=True)
class BundlePlan:
    """plan.json: the tree shape the bundle decodes with and the records that explain it. A plan from fixed
    compile flags holds the shape and the stage plan; a calibrated one the objective's ranking, the checks and
    the depth predictor's record too."""
    shape: TreeShape
    source: str = "compile flags"  # or "calibration"
    objective: ShapeEstimate | None = None       # the objective's best shape (calibrated plans)
    best_unpruned: ShapeEstimate | None = None   # the best shape verifying every drafted node
    candidates: tuple[ShapeEstimate, ...] = ()   # the best few, best first (objective is the first)
    sampling: SamplingPlan | None = None         # the plan for requests at T > 0
    measured: MeasuredSpeedup | None = None      # from the profiled phases
    decoded: DecodeCheck | None = None           # from decoding calibration text
    speculate: bool = True                       # the decode check's verdict: False decodes with the verifier alone
    estimate_off: str | None = None              # why the objective's estimate and the decode disagree
    schedule: StagePlan | None = None
    adaptive: AdaptivePlan | None = None
    schema_version: int = PLAN_VERSION
    # the decode check of what greedy requests decode by default: the tree with the text's suffix branches (the
    # verdict follows it where present; absent from bundles compiled before that default, or tensor-parallel ones)
    decoded_with_suffix: DecodeCheck | None = None

    def to_json(self) -> dict[str, Any]:
        """The plan.json object: schema_version first, then the layout of version 1."""
        return present({"schema_version": self.schema_version, **shape_json(self.shape), "source": self.source,
                        **ranking_json(self.objective, self.best_unpruned, self.candidates),
                        "sampling": self.sampling and self.sampling.to_json(),
                        "measured": self.measured and self.measured.to_json(),
                        "decoded": self.decoded and self.decoded.to_json(),
                        "speculate": self.speculate if self.decoded or not self.speculate else None,
                        "estimate_off": self.estimate_off, "schedule": self.schedule and self.schedule.to_json(),
                        "adaptive": self.adaptive and self.adaptive.to_json(),
                        "decoded_with_suffix": self.decoded_with_suffix and self.decoded_with_suffix.to_json()})

    @classmethod
    def from_json(cls, raw: dict[str, Any], where: str = PLAN) -> BundlePlan:
        """The plan in a plan.json object; one YggcError line naming `where` for a newer version or a damaged one."""
        version = raw.get("schema_version", 1) if isinstance(raw, dict) else None
        if type(version) is not int or version < 1:
            raise YggcError(f"{where} is not a yggc plan (schema_version {version!r}); re-run `yggc compile`")
        if version > PLAN_VERSION:
            raise YggcError(f"{where} has schema_version {version}, newer than this yggc reads ({PLAN_VERSION}): "
                            "re-run `yggc compile` with this yggc, or upgrade yggc")
        try:
            return cls(shape_of(raw), raw.get("source", "compile flags"),
                       parsed(raw, "objective", ShapeEstimate.from_json),
                       parsed(raw, "best_unpruned", ShapeEstimate.from_json),
                       tuple(ShapeEstimate.from_json(c) for c in raw.get("candidates", ())),
                       parsed(raw, "sampling", SamplingPlan.from_json), parsed(raw, "measured", MeasuredSpeedup.from_json),
                       parsed(raw, "decoded", DecodeCheck.from_json), raw.get("speculate", True), raw.get("estimate_off"),
                       parsed(raw, "schedule", StagePlan.from_json), parsed(raw, "adaptive", AdaptivePlan.from_json),
                       version, parsed(raw, "decoded_with_suffix", DecodeCheck.from_json))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise YggcError(f"{where} is not a plan this yggc reads ({type(e).__name__}: {e}); the bundle is damaged, "
                            "re-run `yggc compile`") from None


def read_plan(bundle: str | Path) -> BundlePlan:
    """The plan of the bundle directory `bundle` (its plan.json); one YggcError line if it is missing or unreadable."""
    path = Path(bundle) / PLAN
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise YggcError(f"{bundle} has no {PLAN}; re-run `yggc compile`") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        raise YggcError(f"{path} is not readable JSON ({e}); the bundle is damaged, re-run `yggc compile`") from None
    return BundlePlan.from_json(raw, str(path))
