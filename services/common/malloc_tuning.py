"""glibc malloc options for the edge process (bench/PROFILE.md).

With 200 sessions streaming, a third of the edge's malloc heap was free memory
that glibc kept resident (25–45 MB of 70–90 MB): every gRPC thread got its own
malloc arena (15 arenas), and the transient large buffers of the relay — the
≤ 128 KiB Attach batches as received bytes and as parsed messages — were carved
out of those arenas, since glibc's *dynamic* mmap threshold rises to the size of
the first large block freed (up to 32 MiB) and from then on serves such blocks
from an arena, where the space they leave behind is rarely returned.

:func:`tune_malloc` sets, through ``mallopt``:

- ``M_MMAP_THRESHOLD`` = 64 KiB, fixed (setting it turns the dynamic threshold
  off): a block this large is its own mapping, unmapped when freed, so a batch
  in flight costs RSS only while it lives. The price is an mmap/munmap and
  ~32 page faults per 128 KiB batch (hundreds of relayed updates): noise.
- ``M_ARENA_MAX`` = 2: the loop thread's arena and one shared by gRPC's
  threads, instead of one per thread (free space in one is not reusable by
  another). It only affects arenas created later, hence the call before the
  process starts any thread (before gRPC is imported).

Why ``mallopt`` at the start of the process rather than ``MALLOC_ARENA_MAX`` /
``MALLOC_MMAP_THRESHOLD_`` in the environment: the environment would have to be
set by whoever spawns the edge — ``acpgate serve``, a Docker Compose file, a
systemd unit, a shell — and would also reach every process those spawn; the
call in ``acpgate edge`` itself holds however the edge is started and for it
alone. An operator who sets either glibc variable keeps their value: the
matching option is then left alone. Without glibc (musl, macOS) nothing happens.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

#: ``mallopt`` parameter numbers (glibc ``malloc.h``).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


@dataclass(frozen=True)
class MallocOption:
    """One ``mallopt`` setting and the glibc environment variable that overrides it."""

    param: int
    value: int
    env: str


#: What the edge runs with (measured in bench/PROFILE.md).
EDGE_MALLOC: tuple[MallocOption, ...] = (
    MallocOption(M_MMAP_THRESHOLD, 64 * 1024, "MALLOC_MMAP_THRESHOLD_"),
    MallocOption(M_ARENA_MAX, 2, "MALLOC_ARENA_MAX"),
)


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``gnu_get_libc_version``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def tune_malloc(options: tuple[MallocOption, ...] = EDGE_MALLOC,
                environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Apply ``options`` with ``mallopt``; returns ``{env name: value}`` of those applied.

    An option whose environment variable is set is skipped (the operator's
    value, which glibc already read, stands); so is everything without glibc.
    """
    env = os.environ if environ is None else environ
    libc = _glibc()
    applied: dict[str, int] = {}
    if libc is None:
        return applied
    for option in options:
        if option.env in env:
            continue
        if libc.mallopt(option.param, option.value) == 1:  # 1 = success, 0 = refused
            applied[option.env] = option.value
    return applied
