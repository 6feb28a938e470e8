r"""Activated mixing: a mixing matrix W when only some nodes take part in an iteration.

With the active nodes A (the diagonal D, 1 on A) the three rules are

* **pull** (a row-stochastic W: a node reads its neighbours)::

      M = D W + (I - D)

  an active node mixes its neighbours' current rows, active or not; an inactive node
  keeps its row. Row-stochastic stays row-stochastic.
* **push** (a column-stochastic W: a node sends its mass)::

      M = W D + (I - D)

  only active nodes send; what they send to an inactive node is received all the same.
  Column sums are kept.
* **edge activation** (gossip): the activated edges E (directed pairs ``(j, i)``: i reads
  j; an undirected edge is both pairs) give ``W_E``: pairwise averaging, ``W_E = I -
  sum_{(i, j) in E} (e_i - e_j)(e_i - e_j)^T / 2`` for a matching (symmetric, doubly
  stochastic), or the method's own weights on the activated edges with the weight of the
  others kept on the diagonal. ``W_E`` is the identity outside the endpoints, so that the
  pull and push rules give ``W_E`` itself.

Each function costs what the active rows cost (their neighbours included), never what n
costs: :func:`pulled` slices rows of W, :func:`pushed` slices its columns (a CSC copy of
W is made once per operator and kept on it).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from .rowsparse import RowSparse, csr_from_triplets

__all__ = [
    "DIRECTIONS",
    "EDGE_MIXINGS",
    "column_rows",
    "columns_of",
    "edge_matrix",
    "expected_activated_matrix",
    "pulled",
    "pushed",
]

#: How a mixing term is activated: "pull" (D W + I - D) or "push" (W D + I - D).
DIRECTIONS = ("pull", "push")

#: The matrix of an iteration under edge activation: "pairwise" averaging over the
#: activated edges, or the method's "weights" restricted to them (the weight of the other
#: edges kept on the diagonal).
EDGE_MIXINGS = ("pairwise", "weights")


def _is_whole(op: RowSparse) -> bool:
    return op.rows.size == op.size


def _full_csr(op: RowSparse) -> sp.csr_array:
    """Every row of ``op`` as an (n, n) CSR array (the identity's rows where it sets none
    and ``identity_elsewhere``)."""
    if _is_whole(op):
        return op.values
    rows, cols, vals = op.entries()
    if op.identity_elsewhere:
        others = np.setdiff1d(np.arange(op.size), op.rows)
        rows = np.concatenate([rows, others])
        cols = np.concatenate([cols, others])
        vals = np.concatenate([vals, np.ones(others.size)])
    return csr_from_triplets(rows, cols, vals, (op.size, op.size))


def _closed(op: RowSparse, nodes: np.ndarray) -> bool:
    """Whether ``op`` sets exactly ``nodes`` and mixes only among them (an edge matrix)."""
    return getattr(op, "closed", False) and (
        op.rows is nodes or (op.rows.size == nodes.size and np.array_equal(op.rows, nodes))
    )


def pulled(op: RowSparse, nodes: Int[np.ndarray, " a"]) -> RowSparse:
    """The rows ``nodes`` of ``op``, as the operator ``D W + (I - D)`` restricted to the
    rows it changes (sorted, distinct ``nodes``).

    Cost: O(1) for an operator that sets every row (:meth:`RowSparse.rows_of`: its rows
    are read where they lie, and sliced only when something asks for the CSR), else
    O(|nodes| x degree)."""
    if _closed(op, nodes):
        return op
    if _is_whole(op):
        return RowSparse.rows_of(op, nodes)  # sliced only when something asks
    values = _full_csr(op)[nodes]
    out = RowSparse(op.size, nodes, sp.csr_array(values))
    out.reusable = False
    return out


def column_rows(op: RowSparse) -> sp.csr_array:
    """``op`` transposed, as CSR: row j holds column j of ``op`` (:func:`columns_of`'s
    arrays, not copied), made once per operator and kept on it."""
    found = op.__dict__.get("_column_rows")
    if found is None:
        csc = columns_of(op)
        found = sp.csr_array((csc.data, csc.indices, csc.indptr), shape=csc.shape[::-1])
        op.__dict__["_column_rows"] = found
    return found


def columns_of(op: RowSparse) -> sp.csc_array:
    """Every column of ``op`` (as :func:`_full_csr` gives its rows), a CSC array made once
    per operator and kept on it (the pushes of :func:`pushed` read its columns)."""
    found = op.__dict__.get("_csc")
    if found is None:
        found = sp.csc_array(_full_csr(op))
        op.__dict__["_csc"] = found
    return found


def pushed(op: RowSparse, nodes: Int[np.ndarray, " a"]) -> tuple[RowSparse, RowSparse | None]:
    """``W D`` (the columns ``nodes`` of ``op``) split by the rows it reaches:
    ``(on_active, to_others)``, the rows ``nodes`` and the other rows reached (None when
    none is). The push rule's matrix is ``on_active`` on the active rows and ``I +
    to_others`` on the others.

    Cost: O(|nodes| x degree) (plus one CSC copy of W per operator)."""
    if _closed(op, nodes):
        return op, None
    if _is_whole(op) and op.values.has_sorted_indices:
        return _pushed_by_rows(op, nodes)
    part = columns_of(op)[:, nodes].tocoo()
    rows = np.asarray(part.row, dtype=np.int64)
    cols = nodes[np.asarray(part.col, dtype=np.int64)]
    vals = np.asarray(part.data, dtype=float)
    pos = np.searchsorted(nodes, rows)
    inside = (pos < nodes.size) & (nodes[np.minimum(pos, nodes.size - 1)] == rows)
    on_active = RowSparse(
        op.size,
        nodes,
        csr_from_triplets(pos[inside], cols[inside], vals[inside], (nodes.size, op.size)),
    )
    on_active.reusable = False
    if inside.all():
        return on_active, None
    out_rows, out_cols, out_vals = rows[~inside], cols[~inside], vals[~inside]
    others = np.unique(out_rows)
    to_others = RowSparse(
        op.size,
        others,
        csr_from_triplets(
            np.searchsorted(others, out_rows), out_cols, out_vals, (others.size, op.size)
        ),
    )
    to_others.reusable = False
    return on_active, to_others


def edge_matrix(
    size: int,
    edges: Int[np.ndarray, "e 2"],
    nodes: Int[np.ndarray, " a"],
    weights: RowSparse | None = None,
) -> RowSparse:
    """The mixing matrix ``W_E`` of the activated ``edges`` (directed pairs ``(j, i)``:
    node i reads node j) over their endpoints ``nodes`` (sorted, distinct).

    Without ``weights``: pairwise averaging, ``W[i, j] = 1/2`` for every activated pair
    and ``W[i, i] = 1 - (in-pairs of i) / 2`` — a matching or a permutation gives
    ``W[i, i] = 1/2`` and a doubly stochastic matrix. With ``weights`` (the method's
    W_k): ``W[i, j] = W_k[i, j]`` on the activated pairs and ``W[i, i] = 1 - sum`` of
    them (row-stochastic; symmetric, hence doubly stochastic, when W_k is symmetric and
    E undirected).

    The result sets the rows ``nodes`` (identity elsewhere) and mixes only among them
    (its attribute ``closed`` says so: activating it changes nothing)."""
    senders = np.asarray(edges[:, 0], dtype=np.int64)
    receivers = np.asarray(edges[:, 1], dtype=np.int64)
    if weights is None:
        vals = np.full(senders.size, 0.5)
    else:
        full = weights.values if _is_whole(weights) else _full_csr(weights)
        vals = np.asarray(full[receivers, senders], dtype=float).ravel()
    lost = np.zeros(nodes.size)
    np.add.at(lost, np.searchsorted(nodes, receivers), vals)
    rows = np.concatenate([receivers, nodes])
    cols = np.concatenate([senders, nodes])
    entries = np.concatenate([vals, 1.0 - lost])
    local = np.searchsorted(nodes, rows)
    out = RowSparse(size, nodes, csr_from_triplets(local, cols, entries, (nodes.size, size)))
    out.reusable = False
    out.closed = True
    return out


def expected_activated_matrix(
    W, process, direction: str = "pull", rounds: int = 2000, seed: int = 0
) -> sp.csr_array:
    """``E[M]``, the expected activated matrix of W (an (n, n) matrix) under ``process``.

    Node activation (a process without ``activates = "edges"``) has the closed forms
    ``P W + I - P`` (pull) and ``W P + I - P`` (push), ``P = diag(p)`` (M is linear in
    D), with the process's marginals ``p``, or, where it has none, their estimate over
    ``rounds`` rounds of ``seed`` (the same as the mean of those rounds' matrices). Edge
    activation: :meth:`RandomEdge.expected_matrix` where it is exact (pairwise
    averaging), else the mean of :func:`edge_matrix` over ``rounds`` draws of
    ``process.activations(seed)``.

    Args:
        W: the method's mixing matrix (NumPy or SciPy, square).
        process: a participation process over the n nodes.
        direction: "pull" or "push" (see :data:`DIRECTIONS`).
        rounds: draws of the Monte Carlo mean, where one is needed.
        seed: its seed.

    Returns:
        The (n, n) expected matrix, CSR.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    W = sp.csr_array(W, dtype=float)
    n = W.shape[0]
    edges = getattr(process, "activates", "nodes") == "edges"
    mixing = getattr(process, "mixing", "pairwise")
    if edges and mixing == "pairwise" and hasattr(process, "expected_matrix"):
        return sp.csr_array(process.expected_matrix())
    if not edges:  # M is linear in D: E[M] is M at D = E[D] = diag(p)
        p = process.probabilities
        if p is None:
            p = process.estimate_probabilities(int(rounds), seed)
        P = sp.diags_array(np.asarray(p, dtype=float))
        eye = sp.eye_array(n)
        return sp.csr_array((P @ W if direction == "pull" else W @ P) + eye - P)
    weights = RowSparse.whole(W) if mixing == "weights" else None
    parts: list = []  # the entries of W_E - I, round by round
    records = process.activations(seed)
    for _ in range(int(rounds)):
        record = next(records)
        rows, cols, vals = edge_matrix(n, record.edges, record.nodes, weights).entries()
        parts.append((rows, cols, vals - (rows == cols)))
    rows, cols, vals = (np.concatenate(column) for column in zip(*parts, strict=True))
    change = sp.csr_array((vals / int(rounds), (rows, cols)), shape=(n, n))
    return sp.csr_array(sp.eye_array(n) + change)


def _masked_rows(matrix: sp.csr_array, rows: np.ndarray, keep: np.ndarray) -> sp.csr_array:
    """The rows ``rows`` of ``matrix`` with only the entries of the columns where ``keep``
    holds, each row's entries in their order: a CSR of shape (rows, n)."""
    sub = matrix[rows]
    kept = keep[sub.indices]
    done = np.zeros(sub.nnz + 1, dtype=np.int64)  # kept entries before each entry
    np.cumsum(kept, out=done[1:])
    indptr = done[sub.indptr]
    return sp.csr_array(
        (sub.data[kept], sub.indices[kept].astype(np.int64, copy=False), indptr),
        shape=(rows.size, matrix.shape[1]),
    )


def _pushed_by_rows(op: RowSparse, nodes: np.ndarray) -> tuple[RowSparse, RowSparse | None]:
    """:func:`pushed` for an operator that sets every row, its CSR's columns sorted in
    each row: the rows of ``W`` at the active nodes and at the other nodes they reach,
    each keeping the active columns only. The same operators as through the columns
    (entries in the same order), without sorting triplets: O(|nodes| x degree) plus two
    passes over n booleans."""
    matrix = op.values
    active = np.zeros(op.size, dtype=bool)
    active[nodes] = True
    on_active = RowSparse(op.size, nodes, _masked_rows(matrix, nodes, active))
    on_active.reusable = False
    reached = np.zeros(op.size, dtype=bool)
    reached[columns_of(op)[:, nodes].indices] = True
    reached &= ~active
    others = np.flatnonzero(reached)
    if not others.size:
        return on_active, None
    to_others = RowSparse(op.size, others, _masked_rows(matrix, others, active))
    to_others.reusable = False
    return on_active, to_others
