"""Incremental detokenization for streaming: emit text only once it is complete UTF-8."""
from __future__ import annotations

from tokenizers import Tokenizer


class StreamDecoder:
    """Feeds token ids, returns newly finished text (byte-level BPE may split a character)."""

    def __init__(self, tokenizer: Tokenizer | None):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # an unfinished multi-byte character: wait for its other bytes
            return ""
        new = text[len(self.emitted):] if text.startswith(self.emitted) else text
        self.emitted = text
        return new

    def text(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True) if self.tokenizer else ""
