"""Keep glibc's heap through a generation instead of handing it back to the kernel after every decoding step.

Every step frees the last step's outputs (logits, the self-attention values: tens of MB at batch 32 x beam 4) and
allocates the next ones. With glibc's defaults the freed top of the heap goes back to the kernel (the trim
threshold is twice the largest freed mmapped block: a few MB) and the next step faults every page in again,
one minor page fault per page, every step.
`hold()` (once per process) raises the trim threshold, fixing the mmap threshold at glibc's own dynamic ceiling,
and `release()` (malloc_trim after every `Translator.generate` or `translate` call, not between the batches of
one, once more than RELEASE_ABOVE lies free) gives the memory back, so RSS between calls does not grow.
Trimming after every call, short ones included, would fault a one-sentence call's pages in again each time:
hence the RELEASE_ABOVE floor.
Hand-written because no library does this: two libc calls through ctypes. Not glibc (macOS, Windows, musl): no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
TRIM_THRESHOLD = 1 << 30  # free memory the heap may keep during a generation: above any step's working set
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: where its dynamic threshold stops
RELEASE_ABOVE = 16 << 20  # free heap kept after a generation: a short call's working set (trimming it cost ~12 %)


class _Mallinfo2(ctypes.Structure):
    """glibc's struct mallinfo2: ten size_t counters; `fordblks` is the free space inside the heap."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """glibc, or None where malloc is not glibc's."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc


@functools.lru_cache(maxsize=1)
def hold() -> bool:
    """Stop glibc trimming the heap between decoding steps (once per process); True where it applied."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def free_bytes() -> int | None:
    """Bytes free inside glibc's heap, every arena (mallinfo2, glibc 2.33+); None where it cannot tell."""
    libc = _libc()
    return libc.mallinfo2().fordblks if libc is not None and hasattr(libc, "mallinfo2") else None


def release() -> None:
    """Give the heap's free memory back to the kernel after a generation (every arena, every free page), once more
    than RELEASE_ABOVE lies free: a short call's few MB stay, or the next call would fault them in again."""
    if not hold():
        return
    free = free_bytes()
    if free is None or free > RELEASE_ABOVE:  # without mallinfo2, always trim
        _libc().malloc_trim(0)
