"""Square matrices stored by the few rows they set.

Almost every mixing matrix of a federated round is the identity except on the rows of the
server and the participants. :class:`RowSparse` keeps just those rows, so building and
applying it costs what the participants cost, not what the number of nodes costs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from .._validate import as_bool, as_client_indices, as_int, as_real_array, show

__all__ = [
    "Broadcast",
    "Reduce",
    "RowSparse",
    "csr_from_triplets",
    "rows_entries",
    "sorted_unique",
    "whole_rows",
]


@dataclass(frozen=True)
class Broadcast:
    """Structure of a matrix whose set rows are ``M[rows] = coef * e_source`` (every row
    copies one row, as the assign step A_S does)."""

    rows: np.ndarray
    source: int
    coef: float | np.floating = 1.0


@dataclass(frozen=True)
class Reduce:
    """Structure of a matrix with one set row that sums many others,
    ``M[row] = self_coef * e_row + sum_t coefs[t] * e_{cols[t]}``, and, when ``clears``,
    the rows ``cols`` set to zero (the collect step C_S; without ``clears``, averaging).
    ``coefs`` is a number or an array aligned with ``cols``; ``row`` is not in ``cols``."""

    row: int
    self_coef: float | np.floating
    cols: np.ndarray
    coefs: float | np.floating | np.ndarray
    clears: bool = False


class RowSparse:
    """An ``(size, size)`` matrix ``M`` given by ``M[rows] = values``.

    Rows not in ``rows`` are those of the identity when ``identity_elsewhere`` is true
    (a mixing step that leaves other nodes alone), else zero (a selector such as D_S).

    Attributes:
        size: number of nodes n.
        rows: sorted unique row indices, shape (k,).
        values: CSR array of shape (k, n), the rows themselves (built on first use when the
            matrix was made from entries).
        identity_elsewhere: what the remaining rows are.
        reusable: whether phases built from this operator may be kept and handed out again
            when a later round writes the same equations with it (True by default; an
            operator made afresh for one step only, such as a non-periodic sequence's
            W_k, says False so that nothing keeps it; see
            :mod:`stochmix.engine.model.phase_cache`).
        pattern: a :class:`Broadcast` or :class:`Reduce` that says the same as the entries
            in structured form, or None. Builders that know their structure set it so that
            the engine can recognise node-local phases without inspecting the entries.
    """

    reusable: bool = True
    #: how equations activate this operator when only some nodes are active: "pull"
    #: (``D W + I - D``) or "push" (``W D + I - D``); see :mod:`stochmix.mixing.activation`
    mixes: str = "pull"
    #: whether it sets exactly the rows of an activated edge set and mixes only among
    #: them (:func:`~stochmix.mixing.activation.edge_matrix`): activating it changes nothing
    closed: bool = False

    def __init__(
        self,
        size: int,
        rows: Int[np.ndarray, " k"],
        values: sp.csr_array | None = None,
        identity_elsewhere: bool = True,
        *,
        entries: tuple | None = None,
        pattern: Broadcast | Reduce | None = None,
    ):
        if (values is None) == (entries is None):
            raise ValueError("give RowSparse either values or entries")
        self.size = as_int(size, "size", minimum=0)
        self.rows = as_client_indices(rows, self.size, "rows", increasing=True)
        self.identity_elsewhere = as_bool(identity_elsewhere, "identity_elsewhere")
        self._values = values
        # the triplets, or a function that makes them (see _lazy)
        self._entries: tuple | Callable[[], tuple] | None = entries
        self.pattern = pattern
        if values is not None:
            if not sp.issparse(values):
                raise TypeError(f"values must be a SciPy sparse matrix, got {show(values)}")
            if values.shape != (len(self.rows), self.size):
                raise ValueError(
                    f"values must have shape ({len(self.rows)}, {self.size}), got {values.shape}"
                )

    @classmethod
    def from_entries(
        cls,
        size: int,
        rows,
        cols,
        vals,
        *,
        identity_elsewhere: bool = True,
        set_rows=None,
        pattern: Broadcast | Reduce | None = None,
    ) -> RowSparse:
        """Build from COO entries ``M[rows[t], cols[t]] += vals[t]``.

        ``rows`` and ``cols`` are integers in ``[0, size)`` (repeats add up), ``vals`` finite
        real numbers (one per entry, or one for all). ``set_rows`` lists rows that are set
        even if they have no entry (zero rows); the rows that carry an entry are always set.
        ``pattern``: see the class.
        """
        size = as_int(size, "size", minimum=0)
        rows = as_client_indices(rows, size, "rows")
        cols = as_client_indices(cols, size, "cols")
        if cols.shape != rows.shape:
            raise ValueError(f"cols must have the shape of rows {rows.shape}, got {cols.shape}")
        vals = as_real_array(vals, "vals")
        if vals.ndim and vals.shape != rows.shape:
            raise ValueError(f"vals must be one number or of shape {rows.shape}, got {vals.shape}")
        if set_rows is not None:
            set_rows = as_client_indices(set_rows, size, "set_rows")
        identity_elsewhere = as_bool(identity_elsewhere, "identity_elsewhere")
        return cls._from_entries(
            size,
            rows,
            cols,
            vals,
            identity_elsewhere=identity_elsewhere,
            set_rows=set_rows,
            pattern=pattern,
        )

    @classmethod
    def _from_entries(
        cls,
        size: int,
        rows,
        cols,
        vals,
        *,
        identity_elsewhere: bool = True,
        set_rows=None,
        pattern: Broadcast | Reduce | None = None,
    ) -> RowSparse:
        """:meth:`from_entries` without the argument checks, for the builders that made the
        entries themselves (the hot path of every round)."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=float)
        if vals.shape != rows.shape:
            vals = np.full(rows.shape, vals)
        touched = rows if set_rows is None else np.concatenate([rows, np.asarray(set_rows)])
        unique = sorted_unique(touched.astype(np.int64, copy=False))
        if rows.size > 1 and (rows[1:] < rows[:-1]).any():
            order = np.argsort(rows, kind="stable")
            rows, cols, vals = rows[order], cols[order], vals[order]
        out = cls.__new__(cls)
        out.size, out.rows, out.identity_elsewhere = int(size), unique, bool(identity_elsewhere)
        out._values, out._entries, out.pattern = None, (rows, cols, vals), pattern
        return out

    @classmethod
    def _lazy(
        cls,
        size: int,
        rows,
        entries: Callable[[], tuple],
        pattern: Broadcast | Reduce,
    ) -> RowSparse:
        """A RowSparse that sets the sorted, distinct ``rows`` and whose triplets
        ``entries()`` (in row order) are made only when asked for: the fast path reads
        ``pattern`` instead, which spares a round at 10^7 clients several arrays of |S|
        numbers that nothing would read."""
        out = cls.__new__(cls)
        out.size, out.rows, out.identity_elsewhere = int(size), rows, True
        out._values, out._entries, out.pattern = None, entries, pattern
        return out

    @classmethod
    def whole(cls, matrix: sp.csr_array) -> RowSparse:
        """A square ``(n, n)`` CSR matrix as a RowSparse that sets every row (a mixing
        matrix over all nodes), without copying ``matrix`` or checking it: ``rows`` is a
        shared read-only ``arange(n)``, so building one costs O(1)."""
        out = cls.__new__(cls)
        n = int(matrix.shape[0])
        out.size, out.rows, out.identity_elsewhere = n, whole_rows(n), True
        out._values, out._entries, out.pattern = matrix, None, None
        return out

    @classmethod
    def rows_of(cls, whole: RowSparse, rows: Int[np.ndarray, " k"]) -> RowSparse:
        """The rows ``rows`` (sorted, distinct, unchecked) of ``whole``, an operator that
        sets every row, as a RowSparse that sets them, with the rest of the identity: the
        operator ``D W + (I - D)`` of an activated pull (:func:`~stochmix.mixing.
        activation.pulled`).

        Nothing is copied when it is made: :attr:`parent` keeps ``whole``, so that a
        kernel multiplies by the rows of ``whole.values`` where they lie, and the sliced
        CSR (:attr:`values`) and the triplets are made only when something asks for
        them (the analysis, a backend that multiplies by the CSR itself). Cost: O(1).
        Always a plain RowSparse, whatever class it is called on.
        """
        out = RowSparse.__new__(RowSparse)
        out.size, out.rows, out.identity_elsewhere = int(whole.size), rows, True
        out._values, out._entries, out.pattern = None, None, None
        out.parent = whole
        out.reusable = False
        return out

    #: the whole operator whose rows this one takes (:meth:`rows_of`), or None
    parent: RowSparse | None = None

    @property
    def values(self) -> sp.csr_array:
        if self._values is None and self.parent is not None and self._entries is None:
            self._values = sp.csr_array(self.parent.values[self.rows])
        if self._values is None:
            rows, cols, vals = self.entries()
            self._values = csr_from_triplets(
                np.searchsorted(self.rows, rows), cols, vals, (self.rows.size, self.size)
            )
        return self._values

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stored entries as ``(rows, cols, vals)`` with rows of the full matrix, in
        row order."""
        found = self._entries
        if found is None:
            v = self.values
            assert v is not None  # a RowSparse holds its values, its entries or both
            local = np.repeat(np.arange(v.shape[0]), np.diff(v.indptr))
            found = (self.rows[local], v.indices.astype(np.int64, copy=False), v.data)
            self._entries = found
        elif callable(found):
            found = self._entries = found()
        return found

    def __repr__(self) -> str:
        return f"RowSparse(size={self.size}, rows={self.rows.size})"

    def tocsr(self) -> sp.csr_array:
        """The full ``(size, size)`` matrix as a CSR array."""
        keep = np.ones(self.size, dtype=bool)
        keep[self.rows] = False
        if self.identity_elsewhere:
            base = sp.diags_array(keep.astype(float), format="csr")
        else:
            base = sp.csr_array((self.size, self.size))
        rows, cols, vals = self.entries()
        placed = sp.csr_array((vals, (rows, cols)), shape=(self.size, self.size))
        return (base + placed).tocsr()

    def toarray(self) -> np.ndarray:
        """The full matrix as a dense array (small cases and tests)."""
        return self.tocsr().toarray()


@lru_cache(maxsize=16)
def whole_rows(n: int) -> np.ndarray:
    """``arange(n)`` as int64, read-only, shared by every whole-matrix RowSparse of size n
    (and the equations' whole-block rows, :meth:`~stochmix.engine.model.phase_cache.PhaseCache.
    whole`: the same object, so that ``x[:] = W @ x`` matches rows by identity)."""
    rows = np.arange(n, dtype=np.int64)
    rows.flags.writeable = False
    return rows


def csr_from_triplets(local_rows, cols, vals, shape) -> sp.csr_array:
    """CSR array with entries ``(local_rows[t], cols[t], vals[t])``; duplicates are kept
    (products sum them). Faster than SciPy's COO route for the small matrices of a round."""
    order = np.argsort(local_rows, kind="stable")
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_rows, minlength=shape[0]), out=indptr[1:])
    return sp.csr_array((vals[order], cols[order], indptr), shape=shape)


def sorted_unique(values) -> np.ndarray:
    """``np.unique`` for integer arrays made of a few sorted runs (the usual case here):
    a stable sort merges the runs in about linear time, far faster than hashing."""
    values = np.asarray(values)
    if values.size < 2 or (values[1:] > values[:-1]).all():
        return values
    ordered = np.sort(values, kind="stable")
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def rows_entries(matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the entries of the rows ``rows`` of the CSR ``matrix`` lie in its arrays,
    row after row, each row's in its order (int64), and how many each row has: what
    ``matrix[rows]`` would hold, without the copy."""
    starts = matrix.indptr[rows].astype(np.int64)
    counts = matrix.indptr[rows + 1].astype(np.int64) - starts
    at = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
    return at, counts
