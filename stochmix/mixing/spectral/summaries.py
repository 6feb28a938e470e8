"""Spectral summaries of mixing matrices: :func:`mixing_summary` (kind, stochasticity,
spectral radius, SLEM, gap, ergodicity and consensus contraction of one matrix, as a dict)
and :func:`summary_table` (a plain-text table of several).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..._validate import _show, as_float, choice
from ..checks import columns_sum_to_one, is_column_stochastic, is_row_stochastic, rows_sum_to_one
from ._matrices import ATOL, METHODS, Matrix, _matrix, _transpose
from .eigen import second_largest_modulus, spectral_radius
from .ergodicity import consensus_contraction, ergodicity_coefficient

__all__ = [
    "SUMMARY_KEYS",
    "mixing_summary",
    "summary_table",
]

#: The keys of :func:`mixing_summary`'s dict, in the order ``stochmix spectrum`` prints them.
SUMMARY_KEYS = (
    "n",
    "nnz",
    "kind",
    "row_stochastic",
    "column_stochastic",
    "doubly_stochastic",
    "spectral_radius",
    "slem",
    "spectral_gap",
    "ergodicity",
    "consensus_contraction",
)


def mixing_summary(W: Matrix, method: str = "auto", atol: float = ATOL) -> dict:
    """The spectral facts of one mixing matrix, as a dict.

    Keys (``SUMMARY_KEYS``):

    * ``n``, ``nnz`` (stored nonzeros; ``n^2`` minus the zeros for dense input);
    * ``kind``: ``"doubly"``, ``"row"``, ``"column"`` (stochastic), ``"rows sum 1"``,
      ``"cols sum 1"`` (signed) or ``"general"``; and the three booleans
      ``row_stochastic``, ``column_stochastic``, ``doubly_stochastic`` (checks.py, to
      ``atol``);
    * ``spectral_radius``, ``slem``, ``spectral_gap``;
    * ``ergodicity``: Dobrushin's coefficient when ``W`` is row-stochastic, else ``None``;
    * ``consensus_contraction``: ``||W - 1 pi^T||_2`` (pi the left Perron vector) when
      the rows sum to one, ``||W - v 1^T||_2`` (v the right one) when only the columns
      do; ``None`` when neither, or when that Perron vector is not unique.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        method: ``"auto"``, ``"dense"`` or ``"sparse"`` for the eigen-solvers.
        atol: tolerance of the stochasticity tests.
    """
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    choice(method, "method", METHODS)
    n = A.shape[0]
    row, column = is_row_stochastic(A, atol), is_column_stochastic(A, atol)
    rows_one, columns_one = rows_sum_to_one(A, atol), columns_sum_to_one(A, atol)
    if row and column:
        kind = "doubly"
    elif row or column:
        kind = "row" if row else "column"
    elif rows_one or columns_one:
        kind = "rows sum 1" if rows_one else "cols sum 1"
    else:
        kind = "general"
    contraction = None
    try:
        if rows_one:
            contraction = consensus_contraction(A, method=method)
        elif columns_one:
            contraction = consensus_contraction(_transpose(A), method=method)
    except ValueError:
        contraction = None
    slem = second_largest_modulus(A, method=method, atol=atol)
    return {
        "n": n,
        "nnz": int(np.count_nonzero(A)) if isinstance(A, np.ndarray) else int(A.nnz),
        "kind": kind,
        "row_stochastic": row,
        "column_stochastic": column,
        "doubly_stochastic": row and column,
        "spectral_radius": spectral_radius(A, method=method, atol=atol),
        "slem": slem,
        "spectral_gap": 1.0 - slem,
        "ergodicity": ergodicity_coefficient(A, atol=atol) if row else None,
        "consensus_contraction": contraction,
    }


_COLUMNS = (
    ("matrix", None),
    ("kind", "kind"),
    ("n", "n"),
    ("rho", "spectral_radius"),
    ("SLEM", "slem"),
    ("gap", "spectral_gap"),
    ("delta", "ergodicity"),
    ("||W-1pi'||", "consensus_contraction"),
)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    return str(value)


def summary_table(matrices: Mapping[str, object], method: str = "auto") -> str:
    """A plain-text table of :func:`mixing_summary` for several named matrices.

    One line per entry of ``matrices`` (name -> matrix, or name -> a summary dict already
    computed), columns ``matrix kind n rho SLEM gap delta ||W-1pi'||`` right-aligned under
    a rule of dashes; ``-`` marks a quantity that does not apply. Numbers are printed with
    6 significant digits.
    """
    if not isinstance(matrices, Mapping):
        raise TypeError(
            f"matrices must be a mapping name -> matrix, got {type(matrices).__name__}: "
            f"{_show(matrices)}"
        )
    choice(method, "method", METHODS)
    lines = [[title for title, _ in _COLUMNS]]
    for name, value in matrices.items():
        if isinstance(value, Mapping):
            summary = value
        else:
            try:
                summary = mixing_summary(value, method=method)
            except (TypeError, ValueError) as error:
                raise type(error)(f"matrices[{name!r}]: {error}") from None
        lines.append([str(name)] + [_cell(summary.get(key)) for _, key in _COLUMNS[1:]])
    widths = [max(len(line[c]) for line in lines) for c in range(len(_COLUMNS))]
    rule = ["-" * len(title) for title, _ in _COLUMNS]
    rows = [lines[0], rule, *lines[1:]]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in rows
    )
