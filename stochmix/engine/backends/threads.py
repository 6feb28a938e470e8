"""Torch's intra-op threads during a run: set when the run starts, restored when it ends.

A run's Torch work (the Torch backend's rounds, a :class:`~stochmix.problems.TorchModel`'s
per-client gradients on any backend) is many small calls: on one intra-op thread they run
at their arithmetic's cost, while Torch's default (one thread a core) makes its OpenMP
threads wake and spin-wait for each other on every call, which costs 10-25x the
arithmetic wherever the cores are shared (a 64-32-10 MLP on digits, 20 clients, 30 rounds
of FedAvg on a busy 2-core machine: 6.9-26 s on the NumPy backend with Torch's two
threads, 1.0-1.7 s with one; ``benchmarks/bench_torch_model.py``).

So :func:`stochmix.run` runs under :func:`torch_threads` with the count its backend
resolved (:func:`resolve_threads`): ``torch.set_num_threads(n)`` on the run's thread when
the run starts, and the count found before put back when it ends, returns or raises. Torch
is never imported here: where it is not loaded, nothing in the run can use it and nothing
is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["THREADS_VARIABLE", "resolve_threads", "torch_threads"]

#: The environment variable that sets the count when no ``threads=`` is given.
THREADS_VARIABLE = "STOCHMIX_TORCH_THREADS"


def resolve_threads(threads=None, device=None) -> int | None:
    """The intra-op thread count a run uses, or None to leave Torch's setting alone.

    ``threads=n`` (n >= 1): n. ``threads=0``: None, never touch Torch's setting.
    ``threads=None`` (default): ``$STOCHMIX_TORCH_THREADS`` when set (same meaning), else
    None when the user chose a count through ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``,
    else **1**. A ``device`` other than the CPU (a ``torch.device``, or anything with a
    ``type``): None. Errors name the argument or the variable."""
    if threads is None:
        chosen = os.environ.get(THREADS_VARIABLE, "").strip()
        if chosen:
            try:
                threads = int(chosen)
            except ValueError:
                raise ValueError(
                    f"${THREADS_VARIABLE} must be a whole number of threads, got {chosen!r}"
                ) from None
            if threads < 0:
                raise ValueError(f"${THREADS_VARIABLE} must be >= 0, got {threads}")
        elif any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
            threads = 0
        else:
            threads = 1
    elif isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"threads must be a whole number or None, got {threads!r}")
    elif threads < 0:
        raise ValueError(f"threads must be >= 0 (0: leave Torch's setting), got {threads}")
    if threads == 0 or (device is not None and device.type != "cpu"):
        return None
    return int(threads)


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Inside, Torch's intra-op threads on this thread are ``count``; after, even when
    the block raises, they are what they were before. ``count=None``, or Torch not
    imported by anyone yet: nothing is read or set (Torch is not imported here)."""
    torch = sys.modules.get("torch")
    if count is None or torch is None:
        yield
        return
    before = torch.get_num_threads()
    if before == count:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
