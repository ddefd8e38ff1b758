"""Handing a long stream's freed memory back to the system.

glibc's ``malloc`` keeps freed heap memory for reuse, and raises its threshold for serving large blocks from
``mmap`` as they are freed. A stream's model calls vary in size (an audio window between its minimum and the
longest buffer, decoder caches of every length), so their tensors come and go in the heap, which fragments: the
process's resident memory then grows for as long as the stream runs although nothing is kept. At each trim of its
buffer a :class:`~simulst.streaming.session.Session` calls :func:`release_free_memory`, which asks glibc to hand
the free pages back (``malloc_trim(0)``). With another C library it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the heap's free pages to the system where the C library can (glibc); True if it could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
