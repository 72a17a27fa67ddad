"""The Equal-Growth Tree shape (yggdrasil.txt, 4.1): D draft steps of W new nodes, V nodes verified.

Plain values shared by the planner (calibration, objective) and the runtime's draft/verify phases;
they live on the pure side so the planner never imports a decoder.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import YggcError

HEAD_WIDTH = 2  # the draft phase's head step feeds at most [accepted leaf the drafter never saw, root]


@dataclass(frozen=True)
class TreeShape:
    depth: int  # D: drafter calls per iteration
    width: int  # W: new nodes per draft step
    verify: int  # V: draft nodes sent to the verifier

    def __str__(self) -> str:
        """D=3 W=2 V=5, as the CLI's lines name a shape."""
        return f"D={self.depth} W={self.width} V={self.verify}"

    @property
    def short(self) -> str:
        """D3 W2 V5, as benchmark tables name a shape."""
        return f"D{self.depth} W{self.width} V{self.verify}"

    @property
    def n_nodes(self) -> int:
        """Nodes of the full tree: the root plus D*W drafts."""
        return 1 + self.depth * self.width

    @classmethod
    def from_args(cls, depth: int, width: int, verify: int | None) -> TreeShape:
        """Checked shape from user flags; verify defaults to every drafted node."""
        if depth < 1 or width < 1:
            raise YggcError(f"--depth and --width must be >= 1, got {depth} and {width}")
        verify = depth * width if verify is None else verify
        if not 1 <= verify <= depth * width:
            raise YggcError(f"--verify must be in 1..depth*width = {depth * width}, got {verify}")
        return cls(depth, width, verify)
