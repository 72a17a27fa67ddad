"""Rank processes the distributed tests start with mp.spawn."""
import contextlib
import os
import sys
from collections.abc import Iterator

from yggc.runtime.tp_processes import process_group


@contextlib.contextmanager
def spawned_rank(backend: str, **init_args) -> Iterator[None]:
    """process_group(backend, **init_args) in a rank process mp.spawn started, which ends at the block's normal end
    without Python's and C++'s teardown (os._exit(0), streams flushed): tearing gloo's threads down at interpreter
    exit can abort a spawned child (SIGABRT, "terminate called without an active exception") after everything the
    test reads was written, and mp.spawn would fail the test for it. An exception leaves as usual, for mp.spawn to
    report. (`yggc run --tp` tolerates such an exit once rank 0 has reported: tp_processes.launch.)"""
    with process_group(backend, **init_args):
        yield
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
