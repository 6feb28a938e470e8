"""The process's pool of worker threads, shared by every part that splits work over two
cores (the engine's compiled passes and programs, large row sums)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["CORES", "PREFIX", "on_pool_thread", "on_threads", "thread_pool"]

#: the CPUs this process may run on
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

#: the name every pool thread's name starts with
PREFIX = "stochmix-pool"

_POOLS: dict = {}


def thread_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (a forked child, whose copy of the
    parent's pool has no threads, gets its own)."""
    key = (workers, os.getpid())
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix=PREFIX)
    return pool


def on_pool_thread() -> bool:
    """Whether the calling thread is one of the pools' own: work it handed to a pool could
    wait behind itself (every worker busy), so it runs such work on its own thread."""
    return threading.current_thread().name.startswith(PREFIX)


def on_threads(calls: list) -> list:
    """The answers of ``calls`` (functions of no argument that release the GIL), the first
    on the calling thread and the others on the pool."""
    pool = thread_pool(2)
    later = [pool.submit(call) for call in calls[1:]]
    first = calls[0]()
    return [first, *(found.result() for found in later)]
