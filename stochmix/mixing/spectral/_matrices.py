"""What every spectral tool does with its matrix argument: validate it, hold it as a dense
array or a canonical CSR array, and choose the dense (LAPACK) or sparse (ARPACK) branch.

Also the settings shared by the spectral tools: ``DENSE_LIMIT``, ``METHODS``, ``ATOL``.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import scipy.sparse as sp
from jaxtyping import Float, Real

from ..._validate import choice
from ..checks import check_matrix
from ..rowsparse import RowSparse

Matrix: TypeAlias = Real[np.ndarray, "m n"] | sp.sparray | sp.spmatrix | RowSparse
Result: TypeAlias = Float[np.ndarray, "n n"] | sp.csr_array

#: Largest n handled by LAPACK under ``method="auto"``.
DENSE_LIMIT = 500
#: Branch choices accepted by the ``method`` argument.
METHODS = ("auto", "dense", "sparse")
#: Tolerance of the stochasticity tests.
ATOL = 1e-10


def _matrix(W, name: str = "W", square: bool = True) -> np.ndarray | sp.csr_array:
    """``W`` as a float ndarray or canonical float CSR array, after validation."""
    if isinstance(W, RowSparse):
        W = W.tocsr()
    check_matrix(W, name)
    if isinstance(W, np.ndarray):
        A = np.array(W, dtype=float)
        values = A
    else:
        A = sp.csr_array(W).astype(float)
        A.sum_duplicates()
        values = A.data
    if square and A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {A.shape}")
    if A.shape[0] == 0:
        raise ValueError(f"{name} must have at least one row, got shape {A.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} must have finite entries")
    return A


def _use_sparse(n: int, method: str) -> bool:
    method = choice(method, "method", METHODS)
    if method == "auto":
        return n > DENSE_LIMIT
    return method == "sparse"


def _dense(A) -> np.ndarray:
    return A.toarray() if sp.issparse(A) else A


def _transpose(A):
    return A.T.tocsr() if sp.issparse(A) else A.T


def _nonnegative(A) -> bool:
    values = A.data if sp.issparse(A) else A
    return bool((values >= 0).all())
