"""Is a matrix what it claims to be? Stochasticity tests and their raising twins.

=======================  ===========================================================
claim                    test (entries and sums to within ``atol``)
=======================  ===========================================================
row-stochastic           ``W >= 0`` and ``W @ 1 = 1`` (a node pulls / averages)
column-stochastic        ``W >= 0`` and ``1^T W = 1^T`` (a node pushes; sums kept)
doubly stochastic        square, both of the above
rows sum to one          ``W @ 1 = 1``, signed entries allowed (server lr > 1, ...)
columns sum to one       ``1^T W = 1^T``, signed entries allowed
=======================  ===========================================================

Every test accepts a dense ``(m, n)`` NumPy array or any SciPy sparse matrix and needs no
dense copy of a sparse one. Non-finite entries fail every test. The ``is_*`` functions
answer ``True``/``False``; the ``check_*`` functions raise a ``ValueError`` that names the
argument and says what failed (the first bad row or column and its sum, or the first
negative entry and where it is).
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import scipy.sparse as sp
from jaxtyping import Real

from .._validate import as_float, choice, show

Matrix: TypeAlias = Real[np.ndarray, "m n"] | sp.sparray | sp.spmatrix

_LABELS = {
    "row": "row-stochastic",
    "column": "column-stochastic",
    "doubly": "doubly stochastic",
    "rows_sum": "a matrix whose rows sum to one",
    "columns_sum": "a matrix whose columns sum to one",
}


def check_matrix(W, name: str = "W", *, square: bool = False) -> None:
    """Raise unless ``W`` is a 2-d NumPy array or SciPy sparse matrix of real numbers
    (``TypeError`` for another type or dtype, booleans and complex numbers included;
    ``ValueError`` for another number of dimensions, or a non-square ``W`` when
    ``square``). The one check every function of :mod:`stochmix.mixing` that takes a
    matrix starts with."""
    if not isinstance(W, np.ndarray) and not sp.issparse(W):
        raise TypeError(
            f"{name} must be a NumPy array or SciPy sparse matrix, got {type(W).__name__}: "
            f"{show(W)}"
        )
    if W.dtype.kind not in "fiu":
        raise TypeError(f"{name} must have real entries, got dtype {W.dtype}")
    if W.ndim != 2:
        raise ValueError(f"{name} must be a 2-d matrix, got shape {W.shape}")
    if square and W.shape[0] != W.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {W.shape}")


def _problem(W, kind: str, atol: float, name: str = "W") -> str | None:
    """What is wrong with ``W`` as a matrix of ``kind``, or ``None`` when nothing is.

    Input that is no matrix at all (wrong type, not 2-d, not real) raises instead.
    """
    atol = as_float(atol, "atol", nonnegative=True)
    check_matrix(W, name)
    if isinstance(W, np.ndarray):
        return _problem_dense(W.astype(float, copy=False), kind, atol)
    coo = sp.coo_array(W)
    rows, cols, shape = coo.row, coo.col, coo.shape
    vals = np.asarray(coo.data, dtype=float)
    bad = ~np.isfinite(vals)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        return f"entry [{rows[t]}, {cols[t]}] is {float(vals[t])}, not finite"
    if kind == "doubly" and shape[0] != shape[1]:
        return f"it is not square (shape {shape})"
    if kind in ("row", "column", "doubly"):
        neg = vals < -atol
        if neg.any():
            t = int(np.flatnonzero(neg)[0])
            return f"entry [{rows[t]}, {cols[t]}] is {float(vals[t])!r}, negative"
    if kind in ("row", "doubly", "rows_sum"):
        sums = np.bincount(rows, weights=vals, minlength=shape[0])
        message = _sum_problem(sums, "row", atol)
        if message:
            return message
    if kind in ("column", "doubly", "columns_sum"):
        sums = np.bincount(cols, weights=vals, minlength=shape[1])
        message = _sum_problem(sums, "column", atol)
        if message:
            return message
    return None


def _problem_dense(W: np.ndarray, kind: str, atol: float) -> str | None:
    bad = ~np.isfinite(W)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        return f"entry [{i}, {j}] is {float(W[i, j])}, not finite"
    if kind == "doubly" and W.shape[0] != W.shape[1]:
        return f"it is not square (shape {W.shape})"
    if kind in ("row", "column", "doubly"):
        neg = W < -atol
        if neg.any():
            i, j = np.argwhere(neg)[0]
            return f"entry [{i}, {j}] is {float(W[i, j])!r}, negative"
    if kind in ("row", "doubly", "rows_sum"):
        message = _sum_problem(W.sum(axis=1), "row", atol)
        if message:
            return message
    if kind in ("column", "doubly", "columns_sum"):
        message = _sum_problem(W.sum(axis=0), "column", atol)
        if message:
            return message
    return None


def _sum_problem(sums: np.ndarray, what: str, atol: float) -> str | None:
    off = np.abs(sums - 1.0) > atol
    if off.any():
        i = int(np.flatnonzero(off)[0])
        more = int(off.sum()) - 1
        tail = f" (and {more} more)" if more else ""
        return f"{what} {i} sums to {float(sums[i])!r}, not 1 (atol={atol}){tail}"
    return None


#: What each ``kind`` of :func:`stochasticity_problem` is called in messages.
KINDS = _LABELS


def stochasticity_problem(W: Matrix, kind: str, atol: float = 1e-12) -> str | None:
    """What keeps ``W`` from being a matrix of ``kind`` ("row", "column" or "doubly"
    stochastic; "rows_sum" / "columns_sum": sums one, signed entries allowed), as one
    line, or None when nothing does."""
    choice(kind, "kind", _LABELS)
    return _problem(W, kind, atol)


def _raise(W, kind: str, atol: float, name: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a string (what messages call W), got {show(name)}")
    if not name.strip():
        raise ValueError(f"name must be a non-empty string (what messages call W), got {name!r}")
    message = _problem(W, kind, atol, name)
    if message is not None:
        raise ValueError(f"{name} is not {_LABELS[kind]}: {message}")


def is_row_stochastic(W: Matrix, atol: float = 1e-12) -> bool:
    """True when ``W >= -atol`` entrywise and every row sum is within ``atol`` of 1.

    ``W``: dense ``(m, n)`` array or SciPy sparse matrix.
    """
    return _problem(W, "row", atol) is None


def is_column_stochastic(W: Matrix, atol: float = 1e-12) -> bool:
    """True when ``W >= -atol`` entrywise and every column sum (``1^T W``) is within
    ``atol`` of 1. ``W``: dense ``(m, n)`` array or SciPy sparse matrix."""
    return _problem(W, "column", atol) is None


def is_doubly_stochastic(W: Matrix, atol: float = 1e-12) -> bool:
    """True when ``W`` is square, row-stochastic and column-stochastic (to ``atol``)."""
    return _problem(W, "doubly", atol) is None


def rows_sum_to_one(W: Matrix, atol: float = 1e-12) -> bool:
    """True when ``|W @ 1 - 1| <= atol`` in every row; entries may be negative."""
    return _problem(W, "rows_sum", atol) is None


def columns_sum_to_one(W: Matrix, atol: float = 1e-12) -> bool:
    """True when ``|1^T W - 1^T| <= atol`` in every column; entries may be negative."""
    return _problem(W, "columns_sum", atol) is None


def check_row_stochastic(W: Matrix, name: str = "W", atol: float = 1e-12) -> None:
    """Raise ``ValueError`` naming ``name`` unless :func:`is_row_stochastic` holds."""
    _raise(W, "row", atol, name)


def check_column_stochastic(W: Matrix, name: str = "W", atol: float = 1e-12) -> None:
    """Raise ``ValueError`` naming ``name`` unless :func:`is_column_stochastic` holds."""
    _raise(W, "column", atol, name)


def check_doubly_stochastic(W: Matrix, name: str = "W", atol: float = 1e-12) -> None:
    """Raise ``ValueError`` naming ``name`` unless :func:`is_doubly_stochastic` holds."""
    _raise(W, "doubly", atol, name)


def check_rows_sum_to_one(W: Matrix, name: str = "W", atol: float = 1e-12) -> None:
    """Raise ``ValueError`` naming ``name`` unless :func:`rows_sum_to_one` holds."""
    _raise(W, "rows_sum", atol, name)


def check_columns_sum_to_one(W: Matrix, name: str = "W", atol: float = 1e-12) -> None:
    """Raise ``ValueError`` naming ``name`` unless :func:`columns_sum_to_one` holds."""
    _raise(W, "columns_sum", atol, name)


__all__ = [
    "check_column_stochastic",
    "check_columns_sum_to_one",
    "check_doubly_stochastic",
    "check_row_stochastic",
    "check_rows_sum_to_one",
    "columns_sum_to_one",
    "is_column_stochastic",
    "is_doubly_stochastic",
    "is_row_stochastic",
    "rows_sum_to_one",
]
