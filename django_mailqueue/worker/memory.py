"""Keeping a worker's memory bounded: message-sized buffers handed back to the system when freed."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

logger = logging.getLogger("django_mailqueue")

#: glibc's `mallopt` parameter number for the mmap threshold (malloc.h: M_MMAP_THRESHOLD).
_M_MMAP_THRESHOLD = -3
#: Buffers from this size up get pages of their own, returned to the system on free.
MMAP_THRESHOLD = 1024 * 1024


def release_large_buffers(threshold: int = MMAP_THRESHOLD) -> bool:
    """On glibc, fix malloc's mmap threshold at `threshold` bytes; True when set.

    glibc's dynamic threshold would let freed 10 MiB messages stay with the
    process, far past MAX_BYTES_IN_FLIGHT (docs/performance.md, "Memory with
    10 MiB messages"). Left alone where MALLOC_MMAP_THRESHOLD_ is set, and off glibc.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    logger.debug("malloc's mmap threshold fixed at %d bytes: %s", threshold, done)
    return done
