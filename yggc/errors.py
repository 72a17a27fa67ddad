"""User-facing errors: each carries one line saying what is wrong and what to do (CLI exit 2)."""
from __future__ import annotations

from .graphs.config import CheckpointError


class YggcError(ValueError):
    """Bad input to yggc (flags, prompts, bundles); the message is shown to the user as is."""


USER_ERRORS = (YggcError, CheckpointError)
