"""Stop sequences on streamed text: release only text that cannot be the start of a stop string.

    m = StopMatcher(("\\n\\n",))
    m.push("a\\n")   -> "a"      ("\\n" is held back: it may begin "\\n\\n")
    m.push("\\nb")   -> ""       (stopped; the stop string itself is never sent)

Invariant: the concatenation of everything released equals the text up to the first stop string
(or all of it, after flush()), whatever the split into pieces.
"""
from __future__ import annotations

from tokenizers import Tokenizer

from ..runtime.detokenize import StreamDecoder


class StopMatcher:
    """Text pieces in, text safe to send out; `stopped` once a stop string appeared."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = stops
        self.text = ""      # everything pushed
        self.sent = 0       # characters of self.text released so far
        self.stopped = False

    def held_back(self) -> int:
        """Length of the longest unsent tail that is a proper prefix of some stop string."""
        longest = min(max((len(s) for s in self.stops), default=1) - 1, len(self.text) - self.sent)
        for k in range(longest, 0, -1):
            tail = self.text[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return k
        return 0

    def push(self, piece: str) -> str:
        """Newly releasable text (empty once stopped)."""
        if self.stopped:
            return ""
        self.text += piece
        hits = [i for i in (self.text.find(s, self.sent) for s in self.stops) if i >= 0]
        end = min(hits) if hits else len(self.text) - self.held_back()
        self.stopped = bool(hits)
        out, self.sent = self.text[self.sent:end], max(self.sent, end)
        return out

    def flush(self) -> str:
        """The end of the text: release what was held back."""
        if self.stopped:
            return ""
        out, self.sent = self.text[self.sent:], len(self.text)
        return out


class TextStream:
    """Token ids in, finished UTF-8 text out, cut at the first stop string (detokenize.StreamDecoder)."""

    def __init__(self, tokenizer: Tokenizer | None, stops: tuple[str, ...]):
        self.decoder, self.matcher = StreamDecoder(tokenizer), StopMatcher(stops)

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    def push(self, tokens: list[int]) -> str:
        return self.matcher.push(self.decoder.push(tokens))

    def finish(self) -> str:
        """The rest, as Runtime.generate's text ends (an unfinished character included as U+FFFD)."""
        full, emitted = self.decoder.text(), self.decoder.emitted
        out = self.matcher.push(full[len(emitted):]) if full.startswith(emitted) else ""
        return out + self.matcher.flush()
