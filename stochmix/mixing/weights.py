"""Weight rules of decentralized optimization: from a graph to a stochastic matrix.

All rules read only the graph's structure (edge weights are ignored; self-loops too, since
every node always keeps a share of its own value) and follow the library's convention, an
edge ``j -> i`` meaning that node i receives from node j, so that ``W[i, j] > 0``.

=========================  ==================  ===============================================
rule                       graph               matrix
=========================  ==================  ===============================================
``metropolis_hastings``    undirected          ``W[i, j] = 1 / (1 + max(d_i, d_j))`` on edges,
                                               diagonal the rest: symmetric, doubly stochastic
``uniform_in_neighbors``   directed            ``W[i, j] = 1 / (1 + d_in(i))`` for j = i or
                                               j -> i: row-stochastic (pull)
``uniform_out_neighbors``  directed            ``W[i, j] = 1 / (1 + d_out(j))`` for i = j or
                                               j -> i: column-stochastic (push)
=========================  ==================  ===============================================

Each rule takes an ``nx.Graph``/``nx.DiGraph`` on the nodes ``0..n-1`` or, without
networkx, a square SciPy sparse matrix in the same convention whose nonzero entries are the
edges (entry ``[i, j]`` is the edge ``j -> i``). The work is sparse and vectorized (degree
vectors), so graphs of 10^5 nodes and more are fine.
"""

from __future__ import annotations

from typing import TypeAlias

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .._validate import as_int, show
from .checks import check_matrix
from .graphs import _edge_arrays
from .rowsparse import csr_from_triplets, sorted_unique

GraphLike: TypeAlias = nx.Graph | sp.sparray | sp.spmatrix


def _links(graph, n_nodes: int | None, name: str = "graph") -> tuple[np.ndarray, np.ndarray, int]:
    """``(dst, src, n)``: the distinct edges ``src -> dst`` with ``src != dst``, sorted by
    ``(dst, src)``, i.e. the nonzero pattern of the adjacency in CSR order."""
    if isinstance(graph, nx.Graph):
        src, dst, _, n = _edge_arrays(graph, n_nodes, name, weights=False)
    elif isinstance(graph, (sp.sparray, sp.spmatrix)):
        check_matrix(graph, name, square=True)
        coo = sp.coo_array(graph)
        if n_nodes is not None:
            n_nodes = as_int(n_nodes, "n_nodes", minimum=0)
            if coo.shape[0] != n_nodes:
                raise ValueError(f"{name} has shape {coo.shape}, expected n_nodes={n_nodes}")
        nonzero = coo.data != 0
        dst, src, n = coo.row[nonzero], coo.col[nonzero], coo.shape[0]
    else:
        raise TypeError(
            f"{name} must be a networkx graph or a SciPy sparse matrix, got "
            f"{type(graph).__name__}: {show(graph)}"
        )
    off = src != dst
    # parallel edges count once (sorted_unique: NumPy's hashing unique is ~50x slower on
    # these keys)
    keys = sorted_unique(dst[off].astype(np.int64) * n + src[off])
    return keys // n, keys % n, n


def _undirected_links(graph, n_nodes: int | None, rule: str) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`_links` of a graph that must be undirected (every edge in both directions)
    for ``rule``; a ``ValueError`` naming ``graph`` and the first one-way edge otherwise."""
    dst, src, n = _links(graph, n_nodes)
    reversed_keys = np.sort(src * n + dst)  # the key each edge's reverse would have
    missing = np.setdiff1d(reversed_keys, dst * n + src, assume_unique=True)
    if missing.size:  # the edge j -> i is there, i -> j is not
        i, j = divmod(int(missing[0]), n)
        raise ValueError(
            f"graph must be undirected for {rule} (every edge in both directions): it has"
            f" the edge {i} -> {j} but not {j} -> {i}"
        )
    return dst, src, n


def _adjacency(graph, n_nodes: int | None, name: str = "graph") -> sp.csr_array:
    """Binary ``(n, n)`` CSR: ``A[i, j] = 1`` iff the edge ``j -> i`` exists, ``i != j``."""
    dst, src, n = _links(graph, n_nodes, name)
    return csr_from_triplets(dst, src, np.ones(dst.size), (n, n))


def _with_diagonal(dst, src, vals, diagonal, n) -> sp.csr_array:
    """The off-diagonal entries ``(dst, src, vals)`` (CSR order) plus ``diagonal``, as one
    canonical CSR array, built directly (no sparse arithmetic: at a few dozen nodes SciPy's
    per-call checks cost more than the numbers)."""
    nodes = np.arange(n, dtype=np.int64)
    order = np.argsort(np.concatenate([dst * n + src, nodes * (n + 1)]), kind="stable")
    rows = np.concatenate([dst, nodes])[order]
    cols = np.concatenate([src, nodes])[order]
    return csr_from_triplets(rows, cols, np.concatenate([vals, diagonal])[order], (n, n))


def metropolis_hastings(graph: GraphLike, n_nodes: int | None = None) -> sp.csr_array:
    """Metropolis-Hastings weights of an undirected graph: symmetric, doubly stochastic.

    ``W[i, j] = 1 / (1 + max(d_i, d_j))`` for each edge ``{i, j}`` (``i != j``, ``d`` the
    degree without self-loops), ``W[i, i] = 1 - sum_{j != i} W[i, j] > 0``, zero elsewhere.

    Args:
        graph: an undirected ``nx.Graph``, a ``nx.DiGraph`` holding every edge in both
            directions, or a square sparse matrix with symmetric nonzero pattern; nodes
            ``0..n-1``.
        n_nodes: n, when some nodes are absent from the graph (see ``graph_to_matrix``).

    Returns:
        ``(n, n)`` CSR array.
    """
    dst, src, n = _undirected_links(graph, n_nodes, "metropolis_hastings")
    degree = np.bincount(dst, minlength=n)
    values = 1.0 / (1.0 + np.maximum(degree[dst], degree[src]))
    diagonal = 1.0 - np.bincount(dst, weights=values, minlength=n)
    return _with_diagonal(dst, src, values, diagonal, n)


def uniform_in_neighbors(graph: GraphLike, n_nodes: int | None = None) -> sp.csr_array:
    """Row-stochastic pull weights: node i averages itself and its in-neighbours equally.

    ``W[i, j] = 1 / (1 + d_in(i))`` for ``j = i`` and every edge ``j -> i`` (``j != i``),
    zero elsewhere, where ``d_in(i)`` counts the distinct in-neighbours. An undirected
    graph counts each edge in both directions.

    Args:
        graph: ``nx.DiGraph``/``nx.Graph`` on ``0..n-1`` or a square sparse matrix whose
            nonzero ``[i, j]`` are the edges ``j -> i``.
        n_nodes: n, when some nodes are absent from the graph.

    Returns:
        ``(n, n)`` CSR array with ``W @ 1 = 1``.
    """
    dst, src, n = _links(graph, n_nodes)
    scale = 1.0 / (1.0 + np.bincount(dst, minlength=n))
    return _with_diagonal(dst, src, scale[dst], scale, n)


def uniform_out_neighbors(graph: GraphLike, n_nodes: int | None = None) -> sp.csr_array:
    """Column-stochastic push weights: node j splits its value equally among itself and
    its out-neighbours.

    ``W[i, j] = 1 / (1 + d_out(j))`` for ``i = j`` and every edge ``j -> i`` (``i != j``),
    zero elsewhere, where ``d_out(j)`` counts the distinct out-neighbours.

    Args:
        graph: ``nx.DiGraph``/``nx.Graph`` on ``0..n-1`` or a square sparse matrix whose
            nonzero ``[i, j]`` are the edges ``j -> i``.
        n_nodes: n, when some nodes are absent from the graph.

    Returns:
        ``(n, n)`` CSR array with ``1^T W = 1^T``.
    """
    dst, src, n = _links(graph, n_nodes)
    scale = 1.0 / (1.0 + np.bincount(src, minlength=n))
    return _with_diagonal(dst, src, scale[src], scale, n)


__all__ = ["metropolis_hastings", "uniform_in_neighbors", "uniform_out_neighbors"]
