"""Applying a whole-block form (:mod:`stochmix.engine.model.blockwise`) to a NumPy state:
each target block as its products with the mixing matrices (SciPy's kernel, into arrays
kept from round to round: :class:`Workspace`) plus its other terms, written into the state
or kept for a later target, and checked for NaN and Inf."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from ...mixing.rowsparse import rows_entries
from .block_pass import PREFETCH_BYTES, apply_compiled, term_kind
from .blockwise import BlockTerm, BlockwiseForm

__all__ = ["Workspace", "apply_blockwise_numpy", "product_into"]


try:  # SciPy's own kernel behind ``csr @ dense``, which adds into an array it is given
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover (a SciPy that moved it: products go through @)
    _csr_matvecs = None


def product_into(matrix, values: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = matrix @ values`` without a temporary where SciPy's kernel can take
    the arrays as they are (the same kernel and order of additions as ``@``: the same
    bits), else through ``@``."""
    if (
        _csr_matvecs is not None
        and matrix.format == "csr"
        and values.ndim == 2
        and values.shape[1] > 1
        and matrix.dtype == values.dtype == out.dtype
        and matrix.indices.dtype == matrix.indptr.dtype
        and values.flags.c_contiguous
        and out.flags.c_contiguous
    ):
        out[...] = 0.0
        m, n = matrix.shape
        _csr_matvecs(
            m, n, values.shape[1], matrix.indptr, matrix.indices, matrix.data,
            values.ravel(), out.ravel(),
        )  # fmt: skip
    else:
        out[...] = matrix @ values


class Workspace:
    """Arrays that a backend keeps for the whole-block path from round to round: each
    target block's accumulator and one temporary (its products, scaled terms), so that
    a round allocates nothing and SciPy's products write into them (:func:`product_into`,
    the same bits as ``@``). Kept for one state at a time (a new state clears them)."""

    def __init__(self) -> None:
        self._arrays: dict = {}
        self._state: int | None = None

    def scratch(self, z: np.ndarray, block: str, rows: int):
        """``role -> array`` for target ``block`` of ``rows`` rows of ``z``: "acc" or
        "tmp", float64 of shape ``(rows, z.shape[1])``, the same arrays every round."""
        if self._state != id(z):
            self._arrays.clear()
            self._state = id(z)
        # a partial of a module function, not a closure: a closure is a new function
        # every round, which a run-time type checker's import hook wraps every round
        return partial(_scratch_array, self._arrays, block, (rows, z.shape[1]))


def _scratch_array(arrays: dict, block: str, shape: tuple, role: str) -> np.ndarray:
    """The workspace's float64 array ``role`` of ``block``, made when first asked or when
    the shape changed."""
    found = arrays.get((block, role))
    if found is None or found.shape != shape:
        found = arrays[block, role] = np.empty(shape)
    return found


def apply_blockwise_numpy(
    z: np.ndarray,
    form: BlockwiseForm,
    gradients,
    product=None,
    handed=None,
    workspace=None,
    fused=None,
    rows_kernel=None,
    scatter=None,
    push=None,
    split=None,
) -> bool:
    """Apply ``form`` to the NumPy state ``z`` in place (``gradients``: shape (c, d), the
    gradients of ``form.clients``, or None); False if a new entry is not finite (the
    non-finite rows are written all the same). ``product(term, z)`` computes a "mix"
    term's ``term.matrix @ z[term.rows]`` (by default exactly that; the distributed
    backend's shards multiply their rows of the matrix with their rows and the halo).

    Each target is computed as: the products of its "mix" terms into a fresh array, the
    other terms but its last added in place, and the last one added with the result
    written straight into the target's slice of ``z`` (no separate copy). A target is
    written at once where no target computed after it reads it (:attr:`BlockwiseForm.
    order`); the others are kept in buffers and written when every target is computed.

    ``handed``: a dict that carries the rows of :attr:`BlockwiseForm.hand_off` from this
    phase to the next (:attr:`BlockwiseForm.take`; see :func:`chained`), keyed by the
    state's identity as well (runs that share a backend do not share what they hand).

    ``workspace``: a :class:`Workspace` whose arrays take the place of the fresh arrays
    (float64 states with the default products): the same operations in the same order,
    into arrays kept from round to round.

    ``fused``: ``(kinds, start) -> kernel or None``, compiled kernels that add a target's
    terms other than its products in one pass and check them (see
    :mod:`stochmix.engine.codegen.combine_kernel`; used with a workspace): the same
    operations in the same order, so the same bits.

    ``rows_kernel``: ``(scaled, kinds, indexed, direct, whole) -> kernel or None``, the
    compiled kernels of :mod:`~stochmix.engine.model.block_pass` (used with a workspace):
    each target in one pass over its rows, products included, nothing sliced or gathered;
    the same bits; for a form on some rows, and for whole blocks of a state of at least
    :data:`~stochmix.engine.model.block_pass.PREFETCH_BYTES` (a smaller one sits in the
    caches, where SciPy's product and the terms' pass are as fast). ``scatter(z, rows,
    values)``: writes ``z[rows] = values`` for a form on some rows (a compiled loop; by
    default NumPy's assignment); ``split(calls)``: the calls run on threads (a large
    form on some rows is computed in halves: see ``apply_compiled``). Where a target has
    a shape no kernel takes (a float32
    state, a matrix of another dtype), the form is applied as above.

    A form's pushes (:attr:`BlockwiseForm.pushes`, an activated push) are applied after
    its targets' other terms are written, from the source rows as the phase found them:
    :func:`push_rows`, or ``push`` (its compiled kernel, the same bits)."""
    if form.pushes:
        sent = [z[term.rows] for _, _, term in form.pushes]  # (copies: read before writing)
        finite = apply_blockwise_numpy(
            z, replace(form, pushes=()), gradients, product, handed, workspace, fused,
            rows_kernel, scatter, split=split,
        )  # fmt: skip
        for (_, base, term), values in zip(form.pushes, sent, strict=True):
            finite = push_rows(z, base, term, values, push) and finite
        return finite
    scratch = None
    if workspace is not None and product is None and z.dtype == np.float64:
        scratch = workspace.scratch
    # whole blocks of a state that sits in the caches: SciPy's product and the terms' pass
    # below are as fast (the same bits either way)
    compiled = form.subset or z.nbytes >= PREFETCH_BYTES
    if scratch is not None and rows_kernel is not None and compiled:
        done = apply_compiled(
            form, z, gradients, scratch, rows_kernel, scatter or _assign, handed, split
        )
        if done is not None:
            return done
    product = _product if product is None else product
    finite = True
    if form.take is not None:
        (target, _, check), values = form.order[0], handed.pop((id(z), form.take))
        out = z[target.rows]
        product_into(target.terms[0].matrix, values, out)
        return not check or bool(np.isfinite(out.sum()))
    later = []
    for target, direct, check in form.order:
        rows = target.rows
        size = rows.stop - rows.start if isinstance(rows, slice) else rows.size
        own = None if scratch is None else scratch(z, target.block, size)
        if own is not None and fused is not None:
            out = z[rows] if direct and target.block != form.hand_off else None
            done = _combine_fused(target.terms, z, gradients, out, own, fused)
            if done is not None:
                new, ok = done
                if target.block == form.hand_off:
                    handed[id(z), target.block] = new
                elif not direct:
                    later.append((target, new, False))
                finite = finite and (not check or ok)
                continue
        if target.block == form.hand_off:
            new = _combine(target.terms, rows, z, gradients, None, product, own)
            handed[id(z), target.block] = new
            finite = finite and (not check or bool(np.isfinite(new.sum())))
            continue
        if direct:
            out = z[rows]
            _combine(target.terms, rows, z, gradients, out, product, own)
            if check:
                finite = finite and bool(np.isfinite(out.sum()))
        else:
            new = _combine(target.terms, rows, z, gradients, None, product, own)
            later.append((target, new, check))
    for target, new, check in later:
        if isinstance(target.rows, slice):
            out = z[target.rows]
            out[...] = new
        else:  # rows of a subset: written by index
            z[target.rows] = new
            out = new
        if check:
            finite = finite and bool(np.isfinite(out.sum()))
    return finite


def _product(term: BlockTerm, z):
    """A "mix" term's product ``term.matrix @ z[term.rows]`` (before its scale)."""
    return term.rows_matrix() @ z[term.rows]


def _values(term: BlockTerm, z, gradients):
    return gradients if term.kind == "grad" else z[term.rows]


def _mixed(term: BlockTerm, z, product_of, scratch, role: str):
    """A "mix" term's product, scaled: into ``scratch(role)`` where there is one."""
    if scratch is None:
        product = product_of(term, z)
    else:
        product = scratch(role)
        product_into(term.rows_matrix(), z[term.rows], product)
    if term.coef != 1.0:
        product *= term.coef
    return product


def _combine(
    terms: tuple, rows: slice | np.ndarray, z, gradients, out, product_of=_product, scratch=None
):
    """The sum of ``terms``, written into ``out`` (a view of ``z``) or, when ``out`` is
    None, into a fresh array (or one of ``scratch``, see :class:`Workspace`) that is
    returned. ``terms`` lists "mix" terms first (the form's order), so that every read of
    the target's old rows by a product happens before ``out`` is written; at most one
    other term reads the target, and it is the last (read and written element by
    element)."""
    if not terms:
        if out is None:
            size = rows.stop - rows.start if isinstance(rows, slice) else rows.size
            return np.zeros((size, z.shape[1]), dtype=z.dtype)
        out[...] = 0.0
        return out
    acc = None
    for term in terms[:-1]:
        if term.kind == "mix":
            product = _mixed(term, z, product_of, scratch, "acc" if acc is None else "tmp")
            if acc is None:
                acc = product
            else:
                acc += product
        else:
            acc = _scaled_add(acc, _values(term, z, gradients), term.coef, scratch)
    last = terms[-1]
    if last.kind == "mix":
        product = _mixed(last, z, product_of, scratch, "acc" if acc is None else "tmp")
        if acc is None:
            if out is None:
                return product
            out[...] = product
            return out
        if out is None:
            acc += product
            return acc
        return np.add(acc, product, out=out)  # acc += product, written into out
    values, coef = _values(last, z, gradients), last.coef
    own = False  # values is an array of ours (coef times the term's values)
    if isinstance(coef, np.ndarray):
        values = np.multiply(coef[:, None], values, out=None if scratch is None else scratch("tmp"))
        own = True
    elif coef == -1.0:
        if acc is None:
            if out is None and scratch is not None:
                return np.negative(values, out=scratch("acc"))
            return np.negative(values, out=out)
        return np.subtract(acc, values, out=acc if out is None else out)
    elif coef != 1.0:
        values = np.multiply(coef, values, out=None if scratch is None else scratch("tmp"))
        own = True
    if acc is None:
        if out is None:
            if scratch is None:
                return np.array(values, dtype=np.result_type(values, np.float64))
            if own:
                return values
            acc = scratch("acc")
            np.copyto(acc, values)
            return acc
        out[...] = values
        return out
    return np.add(acc, values, out=acc if out is None else out)


def _combine_fused(terms: tuple, z, gradients, out, scratch, fused):
    """:func:`_combine` with its terms but the products added by one compiled kernel
    (``fused``), which also checks what it writes: ``(array, finite)``, or None where no
    kernel applies (a float32 state, a term of another shape, nothing but products).
    ``out``: a view of ``z`` to write, or None (into ``scratch("acc")``)."""
    mixes = [t for t in terms if t.kind == "mix"]
    others = terms[len(mixes) :]
    if not others or z.dtype != np.float64 or any(t.kind == "mix" for t in others):
        return None
    kinds: list[int] = []
    scalars: list[float] = []
    sources: list[np.ndarray] = []
    per_row: list[tuple[int, np.ndarray]] = []
    for term in others:
        values = _values(term, z, gradients)
        if not (
            isinstance(values, np.ndarray)
            and values.dtype == np.float64
            and values.ndim == 2
            and values.flags.c_contiguous
        ):
            return None
        kind, scalar = term_kind(term.coef)
        kinds.append(kind)
        scalars.append(scalar)
        if kind == 3:
            per_row.append((len(sources), term.coef))
        sources.append(values)
    kernel = fused(tuple(kinds), bool(mixes))
    if kernel is None:
        return None
    m = sources[0].shape[0]
    if out is None:  # (a product starts in scratch("acc") too: read and written entry by entry)
        out = scratch("acc")
    start: tuple = ()
    if mixes:
        acc = None
        for term in mixes:
            product = _mixed(term, z, _product, scratch, "acc" if acc is None else "tmp")
            if acc is None:
                acc = product
            else:
                acc += product
        start = (acc,)
    rows_array = np.zeros((len(kinds), m)) if per_row else np.empty((len(kinds), 0))
    for t, coef in per_row:
        rows_array[t] = coef
    ok = kernel(out, *start, *sources, np.asarray(scalars), rows_array)
    return out, bool(ok)


def _scaled_add(acc, values, coef, scratch=None):
    """``acc + coef * values``, in place when ``acc`` is an array (a fresh array, or
    ``scratch("acc")``, when ``acc`` is None; never ``values`` itself)."""
    fresh = None if scratch is None else scratch("acc") if acc is None else scratch("tmp")
    if isinstance(coef, np.ndarray):
        coef = coef[:, None]
    elif coef == 1.0:
        if acc is None:
            if fresh is not None:
                np.copyto(fresh, values)
                return fresh
            return np.array(values, dtype=np.result_type(values, np.float64))
        acc += values
        return acc
    elif coef == -1.0:
        if acc is None:
            if fresh is not None:
                return np.negative(values, out=fresh)
            return np.negative(values, dtype=np.result_type(values, np.float64))
        acc -= values
        return acc
    if acc is None:
        if fresh is not None:
            return np.multiply(coef, values, out=fresh)
        return np.multiply(coef, values, dtype=np.result_type(values, np.float64))
    if fresh is not None:
        acc += np.multiply(coef, values, out=fresh)
    else:
        acc += coef * values
    return acc


def _assign(z, rows, values) -> None:
    z[rows] = values


def push_rows(z: np.ndarray, base: int, term: BlockTerm, values: np.ndarray, kernel=None) -> bool:
    """Add ``term.coef * C[i, j] * values[p]`` to row ``base + i`` of ``z`` for each
    sender ``j = term.select[p]`` and each entry ``C[i, j]`` of its column (``term.matrix``
    holds C transposed), sender after sender, entry after entry; whether every row
    reached is finite. ``kernel``: :func:`~stochmix.engine.codegen.combine_kernel.
    push_kernel`'s (the same operations in the same order)."""
    columns, senders = term.matrix, term.select
    assert columns is not None and senders is not None  # (a "push" term has both)
    if kernel is not None and values.dtype == z.dtype and columns.dtype == np.float64:
        return bool(
            kernel(z, base, columns.indptr, columns.indices, columns.data, senders, values,
                   float(term.coef))  # fmt: skip
        )
    at, counts = rows_entries(columns, senders)
    rows = base + columns.indices[at].astype(np.int64)
    weights = float(term.coef) * columns.data[at]
    with np.errstate(over="ignore", invalid="ignore"):  # (said by the returned flag)
        pushed = weights[:, None] * values[np.repeat(np.arange(senders.size), counts)]
        np.add.at(z, rows, pushed)
    return bool(np.isfinite(z[rows]).all())
