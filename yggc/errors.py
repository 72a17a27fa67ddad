"""User-facing errors: each carries one line saying what is wrong and what to do (CLI exit 2)."""
from __future__ import annotations

from .graphs.config import CheckpointError


class YggcError(ValueError):
    """Bad input to yggc (flags, prompts, bundles); the message is shown to the user as is."""


class RuntimeBusy(YggcError):
    """A Runtime decodes one request at a time; another request holds it and the caller chose not to wait."""


class StreamInterrupted(YggcError):
    """A stream was resumed after another request on the same Runtime reused its KV cache."""


USER_ERRORS = (YggcError, CheckpointError)
