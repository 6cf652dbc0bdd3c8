"""Host buffers (collectives/backends/base.py page_aligned): every launch's buffers sit the same way,
page-aligned and on base pages, whatever numpy's allocator or the kernel's THP mode would do."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from collectives.backends import page_aligned

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not Path("/proc/self/smaps").exists(),
                                reason="reads the buffer's mapping from Linux's /proc/self/smaps")


def vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps: nh no huge pages, hg asked for them)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0] if line.split() else ""
        if "-" in head and not head.endswith(":"):
            start, end = (int(v, 16) for v in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("nbytes", [1, 4096, 4 << 20, (8 << 20) + 3])
def test_host_buffers_are_page_aligned_zeroed_and_never_on_huge_pages(nbytes):
    buf = page_aligned(nbytes)
    assert buf.size == nbytes and buf.flags.writeable
    assert buf.ctypes.data % 4096 == 0
    assert not buf.any()
    buf[:] = 7                                   # written like a send buffer, pages faulted in
    for address in {buf.ctypes.data, buf.ctypes.data + nbytes - 1}:
        flags = vm_flags(address)
        assert "nh" in flags and "hg" not in flags, flags


def test_numpys_own_large_arrays_ask_for_huge_pages():
    """Why page_aligned maps its own memory: a numpy array of 4 MiB or more is madvised for THP
    (its 2 MiB-aligned part only, a different part per launch). Where this numpy does not, the
    difference the test above guards is gone, and this says so."""
    arr = np.zeros((4 << 20) + 4096, np.uint8)
    inside = arr.ctypes.data + 2 * 4096          # past the allocator's header page, which numpy leaves out
    if "hg" not in vm_flags(inside):
        pytest.skip(f"numpy {np.__version__} does not madvise large arrays for huge pages here")
    assert "nh" not in vm_flags(inside)


def test_an_empty_buffer_is_empty():
    assert page_aligned(0).size == 0
