"""Conserved quantities: the row combinations of the state that every phase of a run leaves
unchanged, whatever the gradients (:func:`conserved_quantities`)."""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from jaxtyping import Bool, Float

from ..._validate import as_int
from ...engine import Method, Phase
from .operators import _masks, run_context

__all__ = [
    "CONSERVED_RTOL",
    "DENSE_PHASE",
    "conserved_quantities",
    "phase_block",
]

#: Eigenvalues of the conserved-quantity scan's Gram matrix below this (relative) are null.
CONSERVED_RTOL = 1e-13
DENSE_PHASE = 1 << 16  # a phase with (rows x columns used) at most this is scanned dense


class _ConservedScan:
    """Accumulates ``G = sum_p A_p A_p^T`` over phases, ``A_p = [M_p - I, B_p]`` (rows of
    the state x (rows + gradient columns), each part scaled to unit max). The common left
    null space of every ``A_p``, the null space of ``G``, holds the v with ``v^T M_p = v^T``
    and ``v^T B_p = 0`` for every phase: linear combinations of rows that no phase changes,
    whatever the gradients."""

    def __init__(self, m: int):
        self.gram = np.zeros((m, m))
        self.row_max = np.zeros(m)

    def add_round(self, phases: list) -> None:
        """Add a round's phases (a phase object repeated within the round counts once)."""
        for phase in {id(p): p for p in phases}.values():
            self.add(phase)

    def add(self, phase: Phase) -> None:
        """Add one phase's ``A_p A_p^T`` (an identity phase adds nothing)."""
        if phase.is_identity:
            return
        self.add_block(phase.rows, *phase_block(phase))

    def add_block(self, rows: np.ndarray, block: np.ndarray, row_max: np.ndarray) -> None:
        """Add a block of :func:`phase_block` on the state rows ``rows`` (k,): those of its
        phase, or of another phase that is the same up to who participates."""
        self.row_max[rows] = np.maximum(self.row_max[rows], row_max)
        self.gram[np.ix_(rows, rows)] += block

    def basis(self) -> np.ndarray:
        # Then every row to unit max: the Gram of the row-scaled stack is D G D, whose null
        # vectors u give the conserved v = D u. A row that only small coefficients break (the
        # server row, when a phase also holds 1 / step-size entries) then shows too.
        scale = 1.0 / np.where(self.row_max > 0, self.row_max, 1.0)
        vals, vecs = scipy.linalg.eigh(scale[:, None] * self.gram * scale[None, :])
        # Exactly conserved combinations sit at rounding level, 1e-16 of the largest.
        tol = CONSERVED_RTOL * max(float(vals[-1]) if vals.size else 0.0, 1.0)
        null = scale[:, None] * vecs[:, vals <= tol]
        return scipy.linalg.orth(null) if null.shape[1] else null


def phase_block(phase: Phase) -> tuple[np.ndarray, np.ndarray]:
    """``(A A^T, row maxima of A)`` of a phase, ``A = [M - I, B]`` on its rewritten rows,
    each column of each part scaled to unit max: shapes (k, k) and (k,) for its k rows.

    Scaling a column leaves the left null space alone, and makes a combination broken only
    by small coefficients (a step size) still show. A phase touching few rows and columns
    (every phase of a small state, the server steps of a large one) is computed dense on
    the columns it uses; the others sparse.
    """
    rows, mix, inject = phase.rows, phase.mix, phase.inject
    k = rows.size
    cols = np.union1d(mix.indices, rows)
    block, row_max = np.zeros((k, k)), np.zeros(k)
    if k * (cols.size + (0 if inject is None else inject.shape[1])) <= DENSE_PHASE:
        diff = np.zeros((k, cols.size))
        np.add.at(
            diff,
            (np.repeat(np.arange(k), np.diff(mix.indptr)), np.searchsorted(cols, mix.indices)),
            mix.data,
        )
        diff[np.arange(k), np.searchsorted(cols, rows)] -= 1.0
        for part in [diff] if inject is None else [diff, inject.toarray()]:
            top = np.abs(part).max(axis=0)
            if not top.any():
                continue
            part = part / np.where(top > 0, top, 1.0)
            block += part @ part.T
            row_max = np.maximum(row_max, np.abs(part).max(axis=1))
        return block, row_max
    diff = sp.csr_array(mix) - sp.csr_array((np.ones(k), (np.arange(k), rows)), shape=mix.shape)
    for part in [diff] if inject is None else [diff, sp.csr_array(inject)]:
        part = sp.csc_array(part)
        part.eliminate_zeros()
        if not part.nnz:
            continue
        top = abs(part).max(axis=0).toarray().reshape(-1)
        part = sp.csr_array(part @ sp.diags_array(1.0 / np.where(top > 0, top, 1.0)))
        block += (part @ part.T).toarray()
        row_max = np.maximum(row_max, abs(part).max(axis=1).toarray().reshape(-1))
    return block, row_max


def conserved_quantities(
    method: Method,
    problem,
    masks: Bool[np.ndarray, "r n"],
    *,
    first_round: int = 0,
    probabilities=None,
) -> Float[np.ndarray, "m k"]:
    """An orthonormal basis V (m, k) of the row combinations every phase conserves.

    ``v`` is conserved when ``v^T M = v^T`` and ``v^T B = 0`` for every phase of rounds
    ``first_round, first_round + 1, ...`` with participants ``masks[0], masks[1], ...``: then
    ``v^T Z`` (each column) is the same after every round, for any gradients. FOCUS and
    gradient tracking conserve ``sum(y) - sum(g)``; a client missing from every mask keeps its
    rows. ``V (x) I_d`` spans the left eigenvectors of eigenvalue 1 that every round map
    shares (up to problem-specific ones, which a strongly convex problem does not have).
    Dense (m x m); meant for states of a few thousand rows.
    """
    ctx = run_context(method, problem, probabilities)
    masks = _masks(masks, ctx.n_clients)
    first_round = as_int(first_round, "first_round", minimum=0)
    scan = _ConservedScan(ctx.layout.size)
    for j, mask in enumerate(masks):
        scan.add_round(method.round_phases(first_round + j, np.flatnonzero(mask), ctx))
    return scan.basis()
