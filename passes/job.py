"""A compile job: what `yggc compile` was asked to build (the flags, checked)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..bundle.manifest import OptLevel
from ..plan.shape import TreeShape

if TYPE_CHECKING:
    from .calibrate import CalibrationSpec


@dataclass(frozen=True)
class CompileJob:
    """One bundle to write: the pair, the tree shape (fixed) or the calibration that chooses it, the target."""

    verifier_dir: Path
    drafter_dir: Path
    out: Path
    shape: TreeShape | None  # None: chosen by calibration
    dtype: torch.dtype = torch.float32
    max_seq: int = 1024
    device: str = "cpu"
    overwrite: bool = False
    profile_repeats: int = 20
    opt: OptLevel = OptLevel.O1  # see lower.INDUCTOR_CONFIGS
    calib: CalibrationSpec | None = None
    backend: str = "inductor"  # forward buckets: "inductor", or "tensorrt" (CUDA; phases stay Inductor)
    tp: int = 1  # tensor-parallel ranks of the verifier (this process is one of them; O1, a fixed shape)
    weights: str = ""  # the verifier's linear layers: "" float (dtype), a block format, or "file" (as stored)

    def __post_init__(self):
        if (self.shape is None) == (self.calib is None):
            raise ValueError("a compile job needs exactly one of a fixed tree shape and a calibration spec")
        object.__setattr__(self, "opt", OptLevel(self.opt))  # "O1" or "O2" as a string too
