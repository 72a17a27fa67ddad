"""A queued request as the decoding thread sees it, and the events it sends back to the HTTP side.

The worker thread emits Started when the job leaves the queue, then Delta* and exactly one Finished or
Failed (a job failed while it waits gets Failed alone); the events cross to the
event loop through loop.call_soon_threadsafe, so the HTTP side only ever awaits an asyncio.Queue.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from ..runtime.constraint import Constraint
from .api_errors import ApiError
from .params import Sampling


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose K/V the last request left (not prefilled again)

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}


@dataclass(frozen=True)
class Started:
    """The job left the queue and decodes: a stream's 200 and its headers go out now, not while it waits."""


@dataclass(frozen=True)
class Delta:
    text: str  # newly finished text, already cut at a stop string
    logprobs: tuple[dict, ...] = ()  # the iteration's tokens (wire.content_logprobs), where the request asked


@dataclass(frozen=True)
class Finished:
    finish_reason: str  # "stop" (end of turn, EOS or a stop string) or "length" (max_tokens or a full KV cache)
    usage: Usage
    stats: dict = field(hash=False)  # the speculative stats of this request (the response's "yggc" field)


@dataclass(frozen=True)
class Failed:
    error: ApiError


Event = Started | Delta | Finished | Failed


class Job:
    """One request: prompt ids and sampling in, events out; cancel() stops it at the next iteration (its client
    went away: nothing more is sent), abort(error) too, and then it ends with Failed(error)."""

    def __init__(self, prompt_ids: tuple[int, ...], sampling: Sampling, loop: asyncio.AbstractEventLoop,
                 logprobs: int | None = None, cache_prompt: bool = True, constraint: Constraint | None = None,
                 grammar_param: str | None = None):
        self.prompt_ids, self.sampling, self.loop = prompt_ids, sampling, loop
        self.logprobs, self.cache_prompt = logprobs, cache_prompt  # CompletionRequest's fields
        self.constraint, self.grammar_param = constraint, grammar_param  # the grammar's state and request field
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.cancelled = threading.Event()
        self.abort_error: ApiError | None = None  # why the server stopped it (None: cancelled by its client)
        self.submitted = time.perf_counter()

    def emit(self, event: Event) -> None:
        """From the worker thread: hand an event to the event loop (a closed loop cancels the job)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:
            self.cancelled.set()

    def cancel(self) -> None:
        self.cancelled.set()

    def abort(self, error: ApiError) -> None:
        """Stop the job at its next iteration and answer `error` (the server is shutting down)."""
        self.abort_error = error
        self.cancelled.set()
