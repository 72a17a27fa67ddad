"""Paging out a package library's file pages after load: the mapping is found, and its contents never change."""
import mmap
import os
import sys

import pytest

from yggc.runtime.file_pages import file_mappings, page_out, pages_out_after


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps and madvise are Linux's")
def test_pages_out_the_files_mapped_in_the_block_and_keeps_their_contents(tmp_path):
    data = os.urandom(1 << 20)
    (tmp_path / "lib.bin").write_bytes(data)
    with open(tmp_path / "lib.bin", "rb") as f, pages_out_after():
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        assert mapped[:] == data  # every page resident
    ours = {m for m in file_mappings() if m[2] == str(tmp_path / "lib.bin")}
    assert ours and sum(end - start for start, end, _ in ours) >= len(data)
    assert page_out(ours) >= len(data)  # the kernel took the hint for the whole mapping
    assert mapped[:] == data  # pages read back from the file
    mapped.close()
