"""What yggc needs from newer Pythons than the oldest it supports (3.10)."""
from __future__ import annotations

try:
    from enum import StrEnum  # Python 3.11+
except ImportError:  # Python 3.10: the same behaviour for what yggc uses
    from enum import Enum

    class StrEnum(str, Enum):
        """A member equals, hashes and prints as its plain string value."""

        def __str__(self) -> str:
            return self.value

        def __format__(self, spec: str) -> str:
            return self.value.__format__(spec)

__all__ = ["StrEnum"]
