"""Giving back the page-cache pages a package load leaves mapped (Linux; elsewhere a no-op).

An AOTInductor package on a CPU copies every constant out of its shared library into a heap blob when
it loads, and the library's image stays mapped: its weight pages, read once by that copy, then count in
the process's RSS beside the copy (twice the weights). MADV_PAGEOUT asks the kernel to reclaim the
pages of a mapping; it is only a hint, so contents never change: a page touched again is read back
from the file.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager

MADV_PAGEOUT = 21  # linux/mman.h, Linux >= 5.4
MAPS = "/proc/self/maps"


def file_mappings() -> set[tuple[int, int, str]]:
    """(start, end, path) of every read-only mapping of a file outside /dev in this process. Writable mappings
    (a library's relocated data) and device files (a GPU driver's mappings) are never candidates."""
    found = set()
    try:
        with open(MAPS) as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/") and not fields[5].startswith("/dev/") \
                        and "w" not in fields[1]:
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    found.add((start, end, fields[5].rstrip("\n")))
    except OSError:
        pass
    return found


def page_out(mappings: set[tuple[int, int, str]]) -> int:
    """Ask the kernel to reclaim these mappings' resident pages; -> bytes asked for (0 where unsupported)."""
    if not sys.platform.startswith("linux") or not mappings:
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    asked = 0
    for start, end, _ in mappings:
        if libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_PAGEOUT) == 0:
            asked += end - start
    return asked


@contextmanager
def pages_out_after() -> Iterator[None]:
    """Page out the files mapped inside the block once it ends (a package's shared library)."""
    before = file_mappings()
    yield
    page_out(file_mappings() - before)
