"""profile.json, a bundle's measured stage latencies (schema: profiles/schema.json), as one typed object.

`Profile` is the one reader and writer of the file's keys: the compile's profile pass builds one from its
measurements (`Profile.measured`) and saves it; the plan, the runtime and the CLI read it through its accessors.
It keeps the file's object as it was read or measured, so a profile saved again is the same file, and bundles
written by earlier versions load (a key they lack reads as absent).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import YggcError
from .cost_model import CostCurve, MeasuredCurve
from .shape import TreeShape

SCHEMA = "yggc-profile/1"
FILE = "profile.json"


def _by_width(raw: dict[str, Any]) -> dict[int, Any]:
    return {int(w): v for w, v in raw.items()}


def _by_name(by_width: dict[int, Any]) -> dict[str, Any]:
    return {str(w): v for w, v in by_width.items()}


@dataclass(frozen=True)
class ModelTimes:
    """One model's entry: the median ms of its call at each timed width, and the cost curve fitted to them."""
    bucket_ms: dict[int, float]
    cost_curve: dict[str, Any] | None = None  # CostCurve.to_dict(); None: an entry without a fitted curve

    @property
    def curve(self) -> CostCurve:
        return CostCurve(**self.cost_curve)

    def measured_curve(self) -> MeasuredCurve:
        """Its median at a width it timed, the fitted curve at any other."""
        return MeasuredCurve(self.curve, dict(self.bucket_ms))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bucket_ms": _by_name(self.bucket_ms)}
        return out if self.cost_curve is None else {**out, "cost_curve": self.cost_curve}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ModelTimes:
        return cls(_by_width(raw.get("bucket_ms", {})), raw.get("cost_curve"))


@dataclass(frozen=True)
class PhaseTimes:
    """The draft and verify phases timed whole at `shape` (host glue included) and the model calls timed in turn
    with them (model -> width -> ms)."""
    phase_ms: dict[str, float]  # "draft", "verify"
    calls_ms: dict[str, dict[int, float]]
    shape: TreeShape


@dataclass(frozen=True)
class ContextTimes:
    """The verifier's narrowest and widest bucket at the profile's context and with the cache nearly full."""
    contexts: tuple[int, int]
    ms: dict[int, tuple[float, float]]  # width -> (ms at contexts[0], ms at contexts[1])
    attention_share: dict[int, float]  # width -> the part of the long-context step that grows with the context

    def to_json(self) -> dict[str, Any]:
        return {"contexts": list(self.contexts), "ms": {str(w): list(v) for w, v in self.ms.items()},
                "attention_share": _by_name(self.attention_share)}


class JsonWriter(Protocol):
    def write_json(self, rel: str, obj: Any) -> None: ...


@dataclass(frozen=True)
class Profile:
    """A bundle's profile.json. `raw` is the file's object; read it through the accessors, never by key."""
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, bundle: str | Path) -> Profile:
        """The bundle's profile.json (an empty profile where it has none)."""
        path = Path(bundle) / FILE
        if not path.exists():
            return cls()
        try:
            return cls(json.loads(path.read_text()))
        except ValueError as e:
            raise YggcError(f"{path} is not valid JSON ({e}); re-run `yggc compile`") from None

    def to_json(self) -> dict[str, Any]:
        """The file's object (what `yggc inspect --json` prints)."""
        return self.raw

    def save(self, writer: JsonWriter) -> None:
        writer.write_json(FILE, self.to_json())

    @classmethod
    def measured(cls, context: int, models: dict[str, ModelTimes], host_ms: dict[str, float],
                 context_ms: ContextTimes | None = None, phases: PhaseTimes | None = None,
                 device: dict[str, Any] | None = None) -> Profile:
        """A profile from the profile pass's measurements, in the file's key order."""
        raw: dict[str, Any] = {"schema": SCHEMA, "context": context,
                               "models": {name: m.to_json() for name, m in models.items()}}
        if context_ms is not None:
            raw["context_ms"] = context_ms.to_json()
        raw["host_ms"] = host_ms
        if phases is not None:
            raw.update(phase_ms=phases.phase_ms, phase_calls_ms={m: _by_name(c) for m, c in phases.calls_ms.items()},
                       phase_shape=[phases.shape.depth, phases.shape.width, phases.shape.verify])
        if device is not None:
            raw["device"] = device
        return cls(raw)

    def with_contention(self, record: dict[str, Any]) -> Profile:
        """This profile marked as taken while other programs took CPU time (passes/contention.py's record)."""
        return Profile({**self.raw, "contention": record})

    def __bool__(self) -> bool:
        return bool(self.raw)

    @property
    def context(self) -> int | None:
        """Committed tokens in view while timing."""
        return self.raw.get("context")

    @property
    def models(self) -> dict[str, ModelTimes]:
        return {name: ModelTimes.from_json(m) for name, m in self.raw.get("models", {}).items()}

    @property
    def host_ms(self) -> dict[str, float]:
        return dict(self.raw.get("host_ms", {}))

    @property
    def phase_ms(self) -> dict[str, float]:
        """The draft and verify phases' ms ({} where not timed)."""
        return dict(self.raw.get("phase_ms", {}))

    @property
    def phase_calls_ms(self) -> dict[str, dict[int, float]]:
        return {m: _by_width(c) for m, c in self.raw.get("phase_calls_ms", {}).items()}

    @property
    def phases(self) -> PhaseTimes | None:
        """The phases timed whole at a recorded shape (None where the profile has no shape for them)."""
        if "phase_ms" not in self.raw or "phase_shape" not in self.raw:
            return None
        return PhaseTimes(self.phase_ms, self.phase_calls_ms, TreeShape(*self.raw["phase_shape"]))

    @property
    def context_ms(self) -> ContextTimes | None:
        raw = self.raw.get("context_ms")
        if not raw:
            return None
        return ContextTimes(tuple(raw["contexts"]), {w: tuple(v) for w, v in _by_width(raw["ms"]).items()},
                            _by_width(raw["attention_share"]))

    @property
    def fuzzy(self) -> dict[str, float]:
        """Fuzzy drafting's measured draft_factor and acceptance_ratio ({} where not measured)."""
        return dict(self.raw.get("fuzzy", {}))

    @property
    def core_groups(self) -> tuple[float, float] | None:
        """(verifier, drafter): each role's cost factor on its own core group, where the profile measured them."""
        groups = self.raw.get("core_groups")
        return (groups["verifier_factor"], groups["drafter_factor"]) if groups else None

    @property
    def contention(self) -> dict[str, Any] | None:
        """What other programs took while the compile profiled (passes/contention.py), None on a quiet machine."""
        return self.raw.get("contention") or None


def iteration_cost(profile: Profile) -> Callable[[int], float] | None:
    """A bundle's profile -> the cost in ms of a greedy iteration that verifies r tree nodes: the profiled draft
    phase and host stages plus the verifier at r + 1 rows (None: a profile without them)."""
    verifier, draft_ms = profile.models.get("verifier"), profile.phase_ms.get("draft")
    if verifier is None or verifier.cost_curve is None or draft_ms is None:
        return None
    curve, fixed = verifier.measured_curve(), draft_ms + sum(profile.host_ms.values())
    return lambda r: fixed + curve(r + 1)
