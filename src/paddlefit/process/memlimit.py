"""The memory limit of a child of :class:`paddlefit.process.isolation.IsolatedCall`: ``RLIMIT_DATA`` set to what the
process holds plus an allowance, and lifted again when a ``MemoryError`` must be reported.

Linux >= 4.7 counts every private writable mapping against ``RLIMIT_DATA`` (``brk`` and anonymous ``mmap`` alike;
``man 2 setrlimit``); address space only reserved (``PROT_NONE``) does not count, unlike ``RLIMIT_AS``.
"""

from __future__ import annotations

import resource

#: In the child while its memory limit is set: (VmData when it was set, the allowance above it), bytes.
_LIMIT: list[int] = []


def vm_data() -> int:
    """This process's private writable memory, bytes (``VmData`` of ``/proc/self/status``, what ``RLIMIT_DATA``
    counts); 0 where ``/proc`` is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return int(next(x for x in f if x.startswith("VmData:")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return 0


def set_memory_limit(allowance: int) -> None:
    """Let this process allocate ``allowance`` bytes more than it holds now (``RLIMIT_DATA``, soft limit; the hard
    one stays, so :func:`end_memory_limit` can lift it)."""
    start = vm_data()
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    soft = start + allowance if hard == resource.RLIM_INFINITY else min(start + allowance, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    _LIMIT[:] = [start, allowance]


def end_memory_limit() -> tuple[int, int] | None:
    """In a child of :class:`~paddlefit.process.isolation.IsolatedCall`: lift its memory limit (so that what follows, an
    error message, can allocate) and return (bytes allocated since the call began, the call's allowance); None
    when no limit is set. Call it first thing when a ``MemoryError`` is caught."""
    if not _LIMIT:
        return None
    start, allowance = _LIMIT
    resource.setrlimit(resource.RLIMIT_DATA, (resource.getrlimit(resource.RLIMIT_DATA)[1],) * 2)
    _LIMIT.clear()
    return max(0, vm_data() - start), allowance
