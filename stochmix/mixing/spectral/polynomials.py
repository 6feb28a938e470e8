"""The spectra of polynomial mixing operators (:mod:`stochmix.mixing.polynomial`), read
off ``W``'s eigenvalues: the eigenvalues of ``p(W)`` are ``p(lambda_i)`` for the
eigenvalues ``lambda_i`` of ``W`` (same eigenvectors), so no eigen-solve of ``p(W)``
(often much denser than ``W``) is needed. :func:`polynomial_summary` gives one operator's
figures, :func:`polynomial_table` prints several (``stochmix spectrum --chebyshev K``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ..._validate import _show
from ._matrices import Matrix, _dense, _matrix
from .eigen import DENSE_FALLBACK, _is_symmetric
from .summaries import _cell

if TYPE_CHECKING:
    from ..polynomial import PolynomialMixing

__all__ = ["POLYNOMIAL_KEYS", "polynomial_summary", "polynomial_table"]

#: The keys of :func:`polynomial_summary`'s dict, in the order ``stochmix spectrum``
#: prints them.
POLYNOMIAL_KEYS = ("rounds", "lambda_2", "lambda_min", "slem", "spectral_gap", "gap_per_round")


def _all_eigenvalues(A) -> np.ndarray:
    """Every eigenvalue of ``A`` (real, ascending, for a symmetric ``A``; complex
    otherwise), by LAPACK on a dense copy."""
    n = A.shape[0]
    if n > DENSE_FALLBACK:
        raise ValueError(
            f"W has {n} nodes: the spectrum of a polynomial of W is computed from every "
            f"eigenvalue of W, densely, up to {DENSE_FALLBACK} nodes"
        )
    dense = _dense(A)
    if _is_symmetric(A):
        return np.linalg.eigvalsh(dense)
    values = np.linalg.eigvals(dense)
    return values.real if np.all(values.imag == 0) else values


def polynomial_summary(op: PolynomialMixing | Matrix) -> dict:
    """The spectral figures of ``p(W)`` from the eigenvalues of ``W``, as a dict.

    ``op`` is a :class:`~stochmix.mixing.PolynomialMixing` (its ``base`` W and its
    polynomial p, of degree K = ``op.hops``), or a plain mixing matrix W (taken as
    ``p(lambda) = lambda``, one round). With ``lambda_1`` the eigenvalue of W closest
    to 1 (the consensus eigenvalue, ``p(lambda_1) = 1``) and ``mu_i = p(lambda_i)`` the
    others (one copy of ``lambda_1`` left out), the keys (:data:`POLYNOMIAL_KEYS`) are:

    * ``rounds``: K, the rounds of W's messages one application of ``p(W)`` costs;
    * ``lambda_2``, ``lambda_min``: the largest and smallest ``mu_i`` (None when some
      ``mu_i`` is complex, i.e. W is not symmetric and has complex eigenvalues);
    * ``slem``: ``max_i |mu_i|``, the factor by which ``p(W)`` contracts the consensus
      error of a symmetric W (the second-largest eigenvalue modulus of ``p(W)``);
    * ``spectral_gap``: ``1 - slem``;
    * ``gap_per_round``: ``1 - slem^(1/K)``, the gap per round of communication (for
      ``W^K`` it equals W's gap), the figure to compare polynomials of different degree.

    Args:
        op: a PolynomialMixing, or an ``(n, n)`` matrix (dense, SciPy sparse, RowSparse)
            with ``n <= DENSE_FALLBACK`` (every eigenvalue of W is computed densely).
    """
    from ..polynomial import PolynomialMixing  # noqa: F811 (the class, not the annotation)

    if isinstance(op, PolynomialMixing):
        lam = _all_eigenvalues(op.base.values)
        mu, rounds = op.eigenvalues(lam), op.hops
    else:
        A = _matrix(op, "op")
        lam = _all_eigenvalues(A if sp.issparse(A) else np.asarray(A))
        mu, rounds = lam, 1
    if lam.size < 2:
        raise ValueError(f"op must have at least 2 nodes, got {lam.size}")
    consensus = int(np.argmin(np.abs(lam - 1)))
    rest = np.delete(mu, consensus)
    real = not np.iscomplexobj(rest)
    slem = float(np.abs(rest).max())
    return {
        "rounds": rounds,
        "lambda_2": float(rest.max()) if real else None,
        "lambda_min": float(rest.min()) if real else None,
        "slem": slem,
        "spectral_gap": 1.0 - slem,
        "gap_per_round": 1.0 - slem ** (1.0 / rounds),
    }


_COLUMNS = (
    ("matrix", None),
    ("K", "rounds"),
    ("lambda_2", "lambda_2"),
    ("lambda_min", "lambda_min"),
    ("SLEM", "slem"),
    ("gap", "spectral_gap"),
    ("gap/round", "gap_per_round"),
)


def polynomial_table(operators: Mapping[str, object]) -> str:
    """A plain-text table of :func:`polynomial_summary` for several named operators
    (name -> a PolynomialMixing, a matrix, or a summary dict already computed): columns
    ``matrix K lambda_2 lambda_min SLEM gap gap/round``, right-aligned under a rule of
    dashes, 6 significant digits, ``-`` where a figure does not apply."""
    if not isinstance(operators, Mapping):
        raise TypeError(
            f"operators must be a mapping name -> operator, got {type(operators).__name__}: "
            f"{_show(operators)}"
        )
    lines = [[title for title, _ in _COLUMNS]]
    for name, value in operators.items():
        if isinstance(value, Mapping):
            summary = value
        else:
            try:
                summary = polynomial_summary(value)
            except (TypeError, ValueError) as error:
                raise type(error)(f"operators[{name!r}]: {error}") from None
        lines.append([str(name)] + [_cell(summary.get(key)) for _, key in _COLUMNS[1:]])
    widths = [max(len(line[c]) for line in lines) for c in range(len(_COLUMNS))]
    rule = ["-" * len(title) for title, _ in _COLUMNS]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in (lines[0], rule, *lines[1:])
    )
