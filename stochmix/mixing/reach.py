"""Can an activation process's rounds carry information to every node?

A decentralized method checks that the graphs of its own W_k are strongly connected
(over each period). Under an activation process the rounds mix over less: gossip
(``activates = "edges"``) over the edges the process activates, node activation over the
rows of W of the nodes active in the round. :func:`activation_reach_problem` checks the
union of what the rounds can activate, over every round:

* edge activation (:class:`~stochmix.participation.RandomEdge`,
  :class:`~stochmix.participation.RandomMatching`): the graph of the edges activated with
  positive probability (``edge_probabilities > 0``: zero weights remove edges; every
  edge of a random maximal matching's graph is drawn with positive probability), and,
  when the process mixes with the method's ``"weights"``, only those edges that the
  method's graphs hold (their union over a period), must be connected over all n nodes;
* node activation: every node must be active in some round (``probabilities > 0``, or,
  for a recorded trace, active in one of its rounds): then the union of the rounds'
  ``D W + I - D`` over a window is W's graph, which the method checks itself.

Processes that state neither (no ``edge_list``, no marginals and no masks) are not
checked here.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "activation_reach_problem",
]


def _components(n: int, edges: np.ndarray) -> np.ndarray:
    """The connected component of each of the n nodes of the undirected ``edges`` (m, 2)."""
    from scipy.sparse.csgraph import connected_components  # imported when first needed

    graph = sp.coo_array((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def _method_pattern(graphs) -> sp.csr_array | None:
    """The union of the graphs' patterns over one period, symmetrized (None without a
    period: a sequence that changes every step)."""
    period = getattr(graphs, "period", None)
    if graphs is None or not period:
        return None
    union = graphs.adjacency(0)
    for k in range(1, int(period)):
        union = union + graphs.adjacency(k)
    return sp.csr_array((union + union.T) != 0)


def _edge_problem(process, graphs) -> str | None:
    edge_list = getattr(process, "edge_list", None)
    if edge_list is None:
        return None  # e.g. OnePeerPermutation: any pair may meet
    n = int(process.n_clients)
    edges = np.asarray(edge_list, dtype=np.int64).reshape(-1, 2)
    said = "edges"
    probabilities = getattr(process, "edge_probabilities", None)
    if probabilities is not None:
        positive = np.asarray(probabilities) > 0
        if not positive.all():
            said = f"edges of positive probability ({int((~positive).sum())} weighted 0)"
        edges = edges[positive]
    if getattr(process, "mixing", "pairwise") == "weights":
        pattern = _method_pattern(graphs)
        if pattern is not None:
            kept = np.asarray(pattern[edges[:, 0], edges[:, 1]]).ravel() != 0
            if not kept.all():
                said += f", of which {int((~kept).sum())} the method's graphs lack"
            edges = edges[kept]
    labels = _components(n, edges)
    count = int(labels.max()) + 1 if n else 0
    if count <= 1:
        return None
    sizes = np.bincount(labels)
    isolated = np.flatnonzero(sizes[labels] == 1)
    where = (
        f"node {int(isolated[0])} has no activated edge"
        if isolated.size
        else f"nodes {np.flatnonzero(labels != labels[0])[:5].tolist()} are cut off from node 0"
    )
    return f"the graph of its activated {said} is not connected ({count} components: {where})"


def _node_problem(process) -> str | None:
    p = getattr(process, "probabilities", None)
    if p is not None:
        never = np.flatnonzero(np.asarray(p, dtype=float) <= 0)
        what = "has probability 0"
    else:
        masks = getattr(process, "masks_array", None)
        if masks is None:
            return None
        never = np.flatnonzero(~np.asarray(masks, dtype=bool).any(axis=0))
        what = "is active in no round of the trace"
    if never.size == 0:
        return None
    return f"node {int(never[0])} {what} ({never.size} such): no round ever mixes into it"


def activation_reach_problem(process, graphs=None) -> str | None:
    """What keeps the rounds of ``process`` from reaching every node (see the module
    docstring), as one line, or None when nothing does (or nothing is known).

    Args:
        process: a participation or activation process over n nodes.
        graphs: the method's :class:`~stochmix.mixing.GraphSequence` (used for an edge
            process that mixes with the method's ``"weights"``), or None.
    """
    if getattr(process, "activates", "nodes") == "edges":
        return _edge_problem(process, graphs)
    if getattr(process, "drops_nodes", False):
        return None  # thinned by a clock or lost uploads: marginals unknown
    return _node_problem(process)
