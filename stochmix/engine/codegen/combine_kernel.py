"""A whole-block target's terms added in one compiled pass.

The whole-block path (:func:`~stochmix.engine.model.whole_block.apply_blockwise_numpy`)
computes a target block as its products with the mixing matrices (SciPy's kernel) plus
other terms: rows of blocks and the gradients, each times a number or a per-row
coefficient. In NumPy each such term is one or two passes over the block and a final
pass checks it for NaN and Inf. :func:`combine_kernel` gives a Numba function that does
all of it in one pass, entry by entry, with the same operations in the same order (so
the same bits: no fused multiply-add), one function per shape of the terms (written as
source, compiled once per machine through the disk cache of
:mod:`~stochmix.engine.codegen.disk_cache`).

A term's kind: 0 ``v + s``, 1 ``v - s``, 2 ``v + c s`` (c a number), 3 ``v + c_i s`` (a
coefficient per row); the first term starts the value when there is no product to start
from (kind 0 ``s``, 1 ``-s``, 2 and 3 the product).
"""

from __future__ import annotations

import threading

from ..plan.gradients import numba_available
from .disk_cache import compiled_rows

__all__ = ["combine_kernel", "kernel_source"]

_KERNELS: dict = {}
_LOCK = threading.Lock()


def _term(kind: int, t: int) -> str:
    s = f"s{t}[i, j]"
    return (s, f"-{s}", f"c[{t}] * {s}", f"rc[{t}, i] * {s}")[kind]


def kernel_source(kinds: tuple[int, ...], start: bool) -> str:
    """The kernel's source: ``rows(out, start, s0, ..., c, rc)`` (``start`` omitted
    when the value starts from the first term) returning whether every entry written is
    finite (x - x is 0 for finite x, NaN otherwise)."""
    if start:
        value = "start[i, j]"
        rest = range(len(kinds))
    else:
        value = _term(kinds[0], 0)
        rest = range(1, len(kinds))
    for t in rest:
        op = " - " if kinds[t] == 1 else " + "
        value = f"({value}{op}{_term(0 if kinds[t] == 1 else kinds[t], t)})"
    names = ["out", *(["start"] if start else []), *(f"s{t}" for t in range(len(kinds))), "c"]
    lines = [
        f"def rows({', '.join(names)}, rc):",
        "    m, d = out.shape",
        "    bad = False",
        "    for i in range(m):",
        "        for j in range(d):",
        f"            v = {value}",
        "            out[i, j] = v",
        "            bad |= v - v != 0.0",
        "    return not bad",
    ]
    return "\n".join(lines) + "\n"


def combine_kernel(kinds: tuple[int, ...], start: bool):
    """The compiled kernel for terms of these ``kinds`` (from a start value or not), or
    None without Numba."""
    key = (kinds, start)
    found = _KERNELS.get(key)
    if found is not None:
        return found
    if not numba_available():
        return None
    with _LOCK:
        found = _KERNELS.get(key)
        if found is None:
            found = _KERNELS[key] = compiled_rows(
                kernel_source(kinds, start), None, "<stochmix combine kernel>"
            )
    return found
