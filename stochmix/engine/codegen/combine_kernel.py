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

A form on some rows of its blocks (an activated round's active nodes A: :attr:`~stochmix.
engine.model.blockwise.BlockwiseForm.subset`) gets :func:`rows_kernel`: the products of
the rows A of whole mixing matrices, read where they lie in the matrices' CSR arrays, and
the other terms read through their row indices, all in one pass over A (mixing inside the
program: nothing is sliced or gathered), with the rows a few active nodes ahead asked of
the memory early (the reads are scattered: latency, not arithmetic, is their cost). Each
product is summed in the CSR row's order from 0.0 and then scaled, as SciPy's kernel and
the NumPy statements do: the same bits.
"""

from __future__ import annotations

import threading

from ..plan.gradients import numba_available
from .disk_cache import compiled_rows

__all__ = [
    "combine_kernel",
    "kernel_source",
    "push_kernel",
    "rows_kernel",
    "rows_kernel_source",
    "scatter_kernel",
]

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
    return _compiled((kinds, start), lambda: kernel_source(kinds, start), "combine kernel")


def _compiled(key, source, name: str):
    """The kernel kept under ``key``, compiled from ``source()`` when first asked (through
    the disk cache), or None without Numba."""
    found = _KERNELS.get(key)
    if found is not None or not numba_available():
        return found
    with _LOCK:
        found = _KERNELS.get(key)
        if found is None:
            found = _KERNELS[key] = compiled_rows(source(), None, f"<stochmix {name}>")
    return found


def rows_kernel_source(
    scaled: tuple[bool, ...],
    kinds: tuple[int, ...],
    indexed: tuple,
    direct: bool = False,
    whole: bool = False,
    width: int = 0,
) -> str:
    """The source of ``rows(out, [orow,] [sel,] ip0, ix0, dv0, x0, ..., s0[, i0], ..., c,
    ms, rc, far)`` for a target on the rows ``sel`` of its block (``whole``: on every row, in
    order, with no ``sel``, and ``m`` the rows of ``out``): a product per entry of
    ``scaled`` (``x_u`` the source block, ``ip/ix/dv`` the whole matrix's CSR arrays, times
    ``ms[u]`` where scaled), then the terms of ``kinds`` (:func:`kernel_source`), each
    read at row ``i_t[k]`` of ``s_t`` where ``indexed[t]``, else at row k; the value of
    row k is written into row k of ``out``, or ``direct``, into row ``orow[k]`` of ``out``
    (the state itself). ``width``: the rows' length d written into the source as a
    number (the compiler then unrolls the loops over a row and keeps a product's row in
    registers), or 0: read from ``out``. ``far``: whether to prefetch (data far out of the
    caches; for data in them the extra loads cost more than they save). Returns whether
    every entry written is finite (an entry's ``v - v`` is 0 for finite v and NaN
    otherwise: their sum is 0 exactly when every entry is finite, a check that costs an
    add where a test and a branch would stop the loop from being vectorized)."""
    names = ["out", *(["orow"] if direct else []), *([] if whole else ["sel"])]
    for u in range(len(scaled)):
        names += [f"ip{u}", f"ix{u}", f"dv{u}", f"x{u}"]
    for t, flag in enumerate(indexed):
        names += [f"s{t}", *([f"i{t}"] if flag else [])]
    names += ["c", "ms", "rc", "far"]

    def row(k: str) -> str:  # the matrix row of target row k
        return k if whole else f"sel[{k}]"

    def term(kind: int, t: int) -> str:
        s = f"s{t}[{'g' + str(t) if indexed[t] else 'k'}, j]"
        return (s, f"-{s}", f"c[{t}] * {s}", f"rc[{t}, k] * {s}")[kind]

    lines = [
        f"def rows({', '.join(names)}):",
        f"    m = {'out.shape[0]' if whole else 'sel.shape[0]'}",
        f"    d = {width}" if width else "    d = out.shape[1]",
        "    bad = 0.0",
    ]
    lines += [f"    t{u} = np.empty(d)" for u in range(len(scaled))]
    # loads started ahead (they never change a value): the CSR offsets of a row 16 ahead,
    # its entries 12 ahead, the rows its products and indexed terms read 8 ahead (rows in
    # order stream through the hardware's own prefetcher: only the scattered reads)
    lines += ["    for k in range(m):"]
    if scaled and not whole:
        lines += [
            "        if far and k + 16 < m:",
            f"            later = np.int64({row('k + 16')})",
        ]
        lines += [f"            prefetch_read(ip{u}, later)" for u in range(len(scaled))]
        lines += ["        if far and k + 12 < m:", f"            soon = {row('k + 12')}"]
        for u in range(len(scaled)):
            lines += [
                f"            prefetch_read(ix{u}, np.int64(ip{u}[soon]))",
                f"            prefetch_read(dv{u}, np.int64(ip{u}[soon]))",
            ]
    if scaled or any(indexed):
        lines += ["        if far and k + 8 < m:", f"            ahead = {row('k + 8')}"]
        for u in range(len(scaled)):
            lines += [
                f"            for q in range(ip{u}[ahead], ip{u}[ahead + 1]):",
                f"                prefetch_read(x{u}, np.int64(ix{u}[q]))",
            ]
        lines += [
            f"            prefetch_read(s{t}, np.int64(i{t}[k + 8]))"
            for t, flag in enumerate(indexed)
            if flag
        ]
        if lines[-1].endswith("ahead = k + 8"):  # nothing to ask for that far ahead
            lines = lines[:-2]
    lines += [f"        r = {row('k')}"]
    lines += [f"        g{t} = i{t}[k]" for t, flag in enumerate(indexed) if flag]
    for u in range(len(scaled)):
        lines += [
            "        for j in range(d):",
            f"            t{u}[j] = 0.0",
            f"        for q in range(ip{u}[r], ip{u}[r + 1]):",
            f"            a = dv{u}[q]",
            f"            col = ix{u}[q]",
            "            for j in range(d):",
            f"                t{u}[j] += a * x{u}[col, j]",
        ]
    value = None
    for u, flag in enumerate(scaled):
        product = f"t{u}[j] * ms[{u}]" if flag else f"t{u}[j]"
        value = product if value is None else f"({value} + {product})"
    for t, kind in enumerate(kinds):
        if value is None:
            value = term(kind, t)
        else:
            op = " - " if kind == 1 else " + "
            value = f"({value}{op}{term(0 if kind == 1 else kind, t)})"
    lines += [
        "        for j in range(d):",
        f"            v = {value}",
        f"            out[{'orow[k]' if direct else 'k'}, j] = v",
        "            bad += v - v",
        "    return bad == 0.0",
    ]
    return "\n".join(lines) + "\n"


def rows_kernel(
    scaled: tuple[bool, ...],
    kinds: tuple[int, ...],
    indexed: tuple,
    direct: bool = False,
    whole: bool = False,
    width: int = 0,
):
    """The compiled kernel of :func:`rows_kernel_source` for this shape, or None without
    Numba."""
    key = ("rows", scaled, kinds, indexed, direct, whole, width)
    return _compiled(
        key,
        lambda: rows_kernel_source(scaled, kinds, indexed, direct, whole, width),
        "rows kernel",
    )


_SCATTER = """def rows(z, rows, values):
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(values.shape[1]):
            z[r, j] = values[k, j]
    return True
"""


def scatter_kernel():
    """``rows(z, rows, values)``: ``z[rows] = values`` compiled (a NumPy fancy assignment
    of the same values, faster for the thousands of short rows of an activated round), or
    None without Numba."""
    return _compiled("scatter", lambda: _SCATTER, "scatter kernel")


_PUSH = """def rows(z, base, indptr, indices, data, senders, values, coef):
    d = values.shape[1]
    n = senders.shape[0]
    bad = 0.0
    for p in range(n):
        if p + AHEAD < n:
            ahead = senders[p + AHEAD]
            for k in range(indptr[ahead], indptr[ahead + 1]):
                prefetch_write(z, base + indices[k])
        j = senders[p]
        for k in range(indptr[j], indptr[j + 1]):
            a = coef * data[k]
            r = base + indices[k]
            for q in range(d):
                v = z[r, q] + a * values[p, q]
                z[r, q] = v
                bad += v - v
    return bad == 0.0
""".replace("AHEAD", "8")


def push_kernel():
    """``rows(z, base, indptr, indices, data, senders, values, coef)``: an activated
    push compiled (:func:`~stochmix.engine.model.whole_block.push_rows`: the same
    operations in the same order, so the same bits), the rows of the column 8 senders
    ahead asked of the memory early (the writes are scattered), returning whether every
    row it reached is finite (a sum that is not finite stays so: each entry is checked as
    it is written); None without Numba."""
    return _compiled("push", lambda: _PUSH, "push kernel")
