"""Keep freed memory in the process, so large temporaries do not page-fault on every step.

A NumPy training step allocates and frees many arrays of a megabyte or so. glibc's malloc
hands such blocks back to the kernel (mmap/munmap, or trimming the heap top), and the next
step pays a page fault for every 4 KiB page it touches again: measured, a fifth of a names
training step (docs/performance.md). `keep_freed_memory()` raises glibc's mmap and trim
thresholds so those blocks are reused instead. It is a no-op off glibc (macOS, Windows,
musl), and calling it twice is harmless (the first call does the work, later ones return
at once).

It changes the whole process's malloc, so nothing calls it behind a user's back: `train()`
and every `scratchformer` command call it; a script of your own (a hand-written training
loop, `SentenceEncoder.encode` over many texts) calls it once at its start:

    from scratchformer.allocator import keep_freed_memory
    keep_freed_memory()
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # from glibc's malloc.h
_done = False


def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 512 << 20) -> bool:
    """Returns True when the allocator was tuned (glibc), False otherwise."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
    return _done
