"""Paging out a package library's file pages after load: the mapping is found, and its contents never change."""
import mmap
import os
import sys

import pytest

from yggc.artifacts.file_pages import file_mappings, page_out, pages_out_after


def kernel_version() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps and madvise are Linux's")
def test_pages_out_the_files_mapped_in_the_block_and_keeps_their_contents(tmp_path):
    data = os.urandom(1 << 20)
    (tmp_path / "lib.bin").write_bytes(data)
    with open(tmp_path / "lib.bin", "rb") as f, pages_out_after():
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        assert mapped[:] == data  # every page resident
    ours = {m for m in file_mappings() if m[2] == str(tmp_path / "lib.bin")}
    assert ours and sum(end - start for start, end, _ in ours) >= len(data)
    if kernel_version() >= (5, 4):  # MADV_PAGEOUT's first kernel; older ones refuse the hint, harmlessly
        assert page_out(ours) >= len(data)  # the kernel took the hint for the whole mapping
    else:
        page_out(ours)
    assert mapped[:] == data  # pages read back from the file
    mapped.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps is Linux's")
def test_writable_and_device_file_mappings_are_never_paged_out(tmp_path):
    (tmp_path / "data.bin").write_bytes(os.urandom(1 << 16))
    with open(tmp_path / "data.bin", "r+b") as f, open("/dev/zero", "r+b") as zero:
        writable = mmap.mmap(f.fileno(), 0)  # shared, read-write: a library's data would look like this
        device = mmap.mmap(zero.fileno(), 1 << 16, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        paths = {m[2] for m in file_mappings()}
        assert str(tmp_path / "data.bin") not in paths and not any(p.startswith("/dev/") for p in paths)
        writable.close()
        device.close()
