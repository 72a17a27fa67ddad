"""What the compile's passes hand on to each other (CompileState), typed field by field, and what a pass declares
(CompilePass): the fields it reads and writes, named by attribute through FIELD (dataclasses.Field objects), so a
misspelt field fails at import and tests/passes/test_pipeline.py checks the order against the fields themselves."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import Field, dataclass, field, fields
from types import SimpleNamespace
from typing import Generic, TypeVar

from ..artifacts.buckets import CompiledModel
from ..bundle.manifest import BucketSpec
from ..plan.bundle_plan import AdaptivePlan, BundlePlan
from ..plan.bundle_profile import ModelTimes, Profile
from ..plan.objective import StageCosts
from ..plan.shape import TreeShape
from ..runtime.loading import LoadedModel
from ..runtime.speculative import SpeculativeDecoder
from . import package_cache
from .job import CompileJob
from .write_bundle import BundleWriter

Log = Callable[[str], None]  # the progress callback: one line (a pass's is shown under the pass's number)


M = TypeVar("M")
MODEL_NAMES = ("verifier", "drafter")  # the pair's models as bucket specs and the manifest name them


@dataclass(frozen=True)
class Pair(Generic[M]):
    """One value per model of the pair; `pair[name]` reads it by the name a BucketSpec carries."""
    verifier: M
    drafter: M

    def items(self) -> Iterator[tuple[str, M]]:
        """(name, value), verifier first: the order the passes lower and copy the models in."""
        yield from (("verifier", self.verifier), ("drafter", self.drafter))

    def __getitem__(self, name: str) -> M:
        if name not in MODEL_NAMES:
            raise KeyError(name)
        return getattr(self, name)


LoadedPair = Pair[LoadedModel]  # the checked pair as loaded (the verifier a tensor-parallel rank's slice, --tp > 1)
Widths = Pair[list[int]]  # the forward widths lowered for each model (ascending; empty: no forward buckets)
CompiledPair = Pair[CompiledModel]  # each model's forward buckets, loaded


@dataclass(frozen=True)
class Calibrated:
    shape: TreeShape
    plan: BundlePlan
    record: dict                          # calibration.json
    forward: dict[str, ModelTimes]        # the forward profile, reused by the final profile
    candidates: dict[TreeShape, float]    # tokens per iteration of every priced shape
    samples: list                         # the calibration trees (TreeSample)
    costs: StageCosts                     # the cost curves the shapes were ranked with


@dataclass
class CompileState:
    """What the passes hand on to each other; each CompilePass names the fields it reads and writes."""
    job: CompileJob
    log: Callable[[str], None]
    stack: ExitStack  # the open bundle writer and compiler choice, closed (or cleaned up) after the last pass
    head: bool = False  # the drafter kind's `head`: it drafts from the verifier's features (an EAGLE-3 head)
    widths: Widths | None = None  # forward widths lowered before calibration
    loaded: LoadedPair | None = None
    writer: BundleWriter | None = None
    cxx: str = ""
    packages: package_cache.PackageCache | None = None  # lowered packages kept across compiles
    buckets: list[BucketSpec] = field(default_factory=list)
    compiled: CompiledPair | None = None
    shape: TreeShape | None = None
    plan: BundlePlan | None = None  # the calibrated plan; a fixed shape's is made by the stage-plan pass
    cal: Calibrated | None = None
    adaptive: AdaptivePlan | None = None
    decoder: SpeculativeDecoder | None = None
    profile: Profile | None = None
    started: float = field(default_factory=time.perf_counter)


# CompileState's fields by attribute: FIELD.loaded is the dataclasses.Field of CompileState.loaded
FIELD = SimpleNamespace(**{f.name: f for f in fields(CompileState)})


@dataclass(frozen=True)
class CompilePass:
    """One pass: its function, the state it needs and what it writes (FIELD entries; beside those, the calibration's
    record `cal` and the predictor's `adaptive` are read where a calibrated job wrote them), and which jobs run it."""
    run: Callable[[CompileState, Log], str | None]  # returns its closing line, or None when its log lines said it all
    reads: tuple[Field, ...]
    writes: tuple[Field, ...]
    runs_for: Callable[[CompileJob], bool] = lambda job: True
