"""The four building blocks of a federated round, built straight from the participants.

Nodes are numbered 0..N: node 0 is the server, node ``i + 1`` holds client ``i``. Each
``*_rows`` function takes the sorted indices of the participating clients and returns a
:class:`RowSparse` whose rows are only those the block changes; the functions without the
suffix take a boolean mask over the N clients and return the full ``(N+1, N+1)`` SciPy
CSR array. :mod:`stochmix.mixing.star` builds the same matrices from the round's graph.

========================  ======================  ==========================================
block                     kind                    rows it changes
========================  ======================  ==========================================
``assign`` (A_S)          row-stochastic          row i+1 in S becomes e_0 (pull the server)
``average`` (S, q, eta)   rows sum to one         row 0 becomes (1 - eta sum q) e_0
                                                  + eta sum_{i in S} q_i e_{i+1}
``collect`` (C_S)         column-stochastic       y_0 += sum_{i in S} y_{i+1}; y_{i+1} <- 0
``local_diagonal`` (D_S)  diagonal 0/1            1 on participant rows, 0 elsewhere
========================  ======================  ==========================================
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from jaxtyping import Bool, Float, Int

from .._validate import as_client_indices, as_float, as_int, as_mask, as_nonnegative
from .rowsparse import Broadcast, Reduce, RowSparse

_SERVER = np.zeros(1, dtype=np.int64)  # the one row an average sets
_SERVER.flags.writeable = False


def _nodes(participants, n_clients) -> tuple[np.ndarray, int]:
    """The participants' nodes (client i is node i + 1) and N, after checking both:
    ``participants`` sorted, distinct integers in ``[0, N)`` (one pass over them)."""
    n = as_int(n_clients, "n_clients", minimum=0)
    return as_client_indices(participants, n, "participants", increasing=True) + 1, n


def assign_rows(participants: Int[np.ndarray, " s"], n_clients: int) -> RowSparse:
    """A_S: every participant's row copies the server's row 0.

    ``participants``: the sorted, distinct indices of the participating clients in
    ``[0, n_clients)`` (as every ``*_rows`` builder takes them)."""
    nodes, n = _nodes(participants, n_clients)

    def entries():
        return nodes, np.zeros_like(nodes), np.ones(nodes.size)

    return RowSparse._lazy(n + 1, nodes, entries, Broadcast(nodes, 0))


def average_rows(
    participants: Int[np.ndarray, " s"],
    weights: Float[np.ndarray, " s"],
    n_clients: int,
    server_lr: float = 1.0,
) -> RowSparse:
    """Row 0 becomes ``(1 - server_lr * sum q) e_0 + server_lr * sum_i q_i e_{i+1}``.

    ``weights`` are the participants' q_i, aligned with ``participants``: finite and
    nonnegative. With no participant the matrix is the identity. Rows sum to one; the
    server's own entry is negative when ``server_lr * sum q > 1``.
    """
    nodes, n_clients = _nodes(participants, n_clients)
    q = as_nonnegative(weights, "weights", nodes.size)
    server_lr = as_float(server_lr, "server_lr", positive=True)
    if nodes.size == 0:
        return RowSparse._from_entries(n_clients + 1, [], [], [])
    own = 1.0 - server_lr * float(q.sum())
    equal = bool((q == q[0]).all())  # uniform weights: one number for every node
    coefs = server_lr * float(q[0]) if equal else server_lr * q

    def entries():
        vals = np.empty(nodes.size + 1)
        vals[0], vals[1:] = own, coefs
        return np.zeros(nodes.size + 1, np.int64), np.concatenate([[0], nodes]), vals

    return RowSparse._lazy(n_clients + 1, _SERVER, entries, Reduce(0, own, nodes, coefs))


def collect_rows(participants: Int[np.ndarray, " s"], n_clients: int) -> RowSparse:
    """C_S: the server row adds the participants' rows, which become zero."""
    nodes, n_clients = _nodes(participants, n_clients)
    if nodes.size == 0:
        return RowSparse._from_entries(n_clients + 1, [], [], [])
    cols = np.concatenate([[0], nodes])  # also the rows it sets: the server's and theirs

    def entries():
        return np.zeros(cols.size, np.int64), cols, np.ones(cols.size)

    return RowSparse._lazy(n_clients + 1, cols, entries, Reduce(0, 1.0, nodes, 1.0, clears=True))


def local_diagonal_rows(participants: Int[np.ndarray, " s"], n_clients: int) -> RowSparse:
    """D_S: ones on the participants' diagonal entries, zero everywhere else."""
    nodes, n_clients = _nodes(participants, n_clients)
    return RowSparse._from_entries(n_clients + 1, nodes, nodes, 1.0, identity_elsewhere=False)


def _participants(mask, name: str = "mask") -> tuple[np.ndarray, int]:
    arr = as_mask(mask, None, name)
    return np.flatnonzero(arr), arr.shape[0]


def assign(mask: Bool[np.ndarray, " n"]) -> sp.csr_array:
    """Full ``(N+1, N+1)`` A_S for a participation mask over N clients."""
    participants, n = _participants(mask)
    return assign_rows(participants, n).tocsr()


def average(
    mask: Bool[np.ndarray, " n"], weights: Float[np.ndarray, " n"], server_lr: float = 1.0
) -> sp.csr_array:
    """Full ``(N+1, N+1)`` averaging matrix; ``weights`` has one entry per client
    (entries of absent clients are ignored) and must be nonnegative."""
    participants, n = _participants(mask)
    q = as_nonnegative(weights, "weights", n)
    eta = as_float(server_lr, "server_lr", positive=True)
    return average_rows(participants, q[participants], n, eta).tocsr()


def collect(mask: Bool[np.ndarray, " n"]) -> sp.csr_array:
    """Full ``(N+1, N+1)`` C_S (column-stochastic push to the server)."""
    participants, n = _participants(mask)
    return collect_rows(participants, n).tocsr()


def local_diagonal(mask: Bool[np.ndarray, " n"]) -> sp.csr_array:
    """Full ``(N+1, N+1)`` D_S."""
    participants, n = _participants(mask)
    return local_diagonal_rows(participants, n).tocsr()


__all__ = [
    "assign",
    "assign_rows",
    "average",
    "average_rows",
    "collect",
    "collect_rows",
    "local_diagonal",
    "local_diagonal_rows",
]
