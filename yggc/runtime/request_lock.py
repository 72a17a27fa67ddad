"""One request at a time on a Runtime: its models share one static KV cache, so two interleaved
requests would each decode on slots the other overwrote.

A request holds the lock from its first step until it ends, is closed, or is garbage-collected (the
stream generators release it in `finally`). Every resumed step checks that its request still holds
the lock, so a stream can never yield tokens computed on a cache another request reused:

- another thread's request waits for the holder to finish (or raises RuntimeBusy, non-blocking);
- the holder's own thread starting a new request while its stream is suspended (waiting would
  deadlock) takes the lock over: the suspended stream raises StreamInterrupted when resumed.
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import RuntimeBusy, StreamInterrupted

BUSY = ("this Runtime is decoding another request (one KV cache, one request at a time); "
        "wait for it with blocking=True, or finish or close() its stream first")
INTERRUPTED = ("this stream was interrupted: another request on the same Runtime reused its KV cache "
               "after it was suspended; start the request again (or finish one stream before starting the next)")


class RequestLock:
    """Mutual exclusion between requests, owned by a ticket per request rather than by a thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tickets = itertools.count(1)
        self._holder: int | None = None         # ticket of the request that owns the cache
        self._holder_thread: int | None = None  # the thread that last ran one of its steps
        self._stepping = False                  # the holder is computing right now (not suspended)

    @property
    def busy(self) -> bool:
        return self._holder is not None

    def acquire(self, blocking: bool = True) -> int:
        """A ticket for a new request; blocks while another thread's request holds the cache."""
        me = threading.get_ident()
        with self._cond:
            while self._holder is not None:
                if self._holder_thread == me and not self._stepping:
                    break  # our own suspended stream: waiting for it would deadlock, so it is preempted
                if not blocking or self._holder_thread == me:  # a request started from inside a step
                    raise RuntimeBusy(BUSY)
                self._cond.wait()
            ticket = next(self._tickets)
            self._holder, self._holder_thread, self._stepping = ticket, me, False
            return ticket

    def holds(self, ticket: int) -> bool:
        return self._holder == ticket

    @contextmanager
    def step(self, ticket: int) -> Iterator[None]:
        """Around each resumed step of request `ticket`: raises StreamInterrupted if it lost the cache."""
        with self._cond:
            if self._holder != ticket:
                raise StreamInterrupted(INTERRUPTED)
            self._holder_thread, self._stepping = threading.get_ident(), True
        try:
            yield
        finally:
            with self._cond:
                if self._holder == ticket:
                    self._stepping = False

    def release(self, ticket: int) -> None:
        """End of request `ticket` (finished, closed, failed or preempted: a no-op if it no longer holds)."""
        with self._cond:
            if self._holder == ticket:
                self._holder = self._holder_thread = None
                self._stepping = False
                self._cond.notify_all()
