"""The modelling route to the federated blocks: the round's star graph.

A federated round is a star between the server (node 0) and the participating clients
(client i is node ``i + 1``). :func:`star_graph` draws that star for one of the four blocks
of :mod:`stochmix.mixing.federated`, with the weights on its edges and self-loops, so that
``graph_to_matrix(star_graph(mask, block, ...))`` equals the direct builder exactly:

==================  ===================================================================
block               edges (``j -> i`` with weight w means ``W[i, j] = w``)
==================  ===================================================================
``assign``          ``0 -> 0`` (1); ``0 -> i+1`` (1) for i in S; ``i+1 -> i+1`` (1) else
``average``         ``0 -> 0`` (1 - eta sum_S q); ``i+1 -> 0`` (eta q_i) for i in S;
                    ``i+1 -> i+1`` (1) for every client
``collect``         ``0 -> 0`` (1); ``i+1 -> 0`` (1) for i in S; ``i+1 -> i+1`` (1) else
``local_diagonal``  ``i+1 -> i+1`` (1) for i in S; nothing else
==================  ===================================================================

Every node ``0..N`` is in the graph, isolated or not. The direct builders are the fast
path; this one is for modelling, drawing and checking (it costs a networkx graph).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from jaxtyping import Bool, Float

from .._validate import as_float, as_mask, as_nonnegative, choice

#: The names of the federated building blocks (``stochmix spectrum`` and the star graphs).
BLOCKS = ("assign", "average", "collect", "local_diagonal")


def star_graph(
    mask: Bool[np.ndarray, " n"],
    block: str,
    weights: Float[np.ndarray, " n"] | None = None,
    server_lr: float = 1.0,
) -> nx.DiGraph:
    """The round's star between the server and the participants for one federated block.

    Args:
        mask: boolean participation mask over the N clients, shape ``(N,)``.
        block: one of ``"assign"`` (A_S), ``"average"``, ``"collect"`` (C_S),
            ``"local_diagonal"`` (D_S).
        weights: the clients' q, shape ``(N,)``, nonnegative; required for
            ``"average"`` (entries of absent clients are ignored), refused otherwise.
        server_lr: eta > 0 of ``"average"``; must stay 1.0 for the other blocks.

    Returns:
        An ``nx.DiGraph`` on the nodes ``0..N`` (graph attribute ``block``) whose
        :func:`~stochmix.mixing.graphs.graph_to_matrix` is the ``(N+1, N+1)`` block, equal to
        ``assign(mask)``, ``average(mask, weights, server_lr)``, ``collect(mask)`` or
        ``local_diagonal(mask)``.
    """
    arr = as_mask(mask, None, "mask")
    block = choice(block, "block", BLOCKS)
    n = arr.shape[0]
    participants = np.flatnonzero(arr)
    nodes = (participants + 1).tolist()
    absent = (np.flatnonzero(~arr) + 1).tolist()

    if block == "average":
        if weights is None:
            raise ValueError("weights are required for block='average', got None")
        q = as_nonnegative(weights, "weights", n)
        eta = as_float(server_lr, "server_lr", positive=True)
    else:
        if weights is not None:
            raise ValueError(f"weights apply only to block='average', not block={block!r}")
        if as_float(server_lr, "server_lr", positive=True) != 1.0:
            raise ValueError(
                f"server_lr applies only to block='average', not block={block!r}; got {server_lr}"
            )

    graph = nx.DiGraph(block=block)
    graph.add_nodes_from(range(n + 1))
    if block == "assign":
        graph.add_edge(0, 0, weight=1.0)
        graph.add_edges_from(((0, i) for i in nodes), weight=1.0)
        graph.add_edges_from(((i, i) for i in absent), weight=1.0)
    elif block == "average":
        # The same arithmetic as federated.average_rows, so the numbers agree bit for bit.
        qs = q[participants]
        if nodes:
            graph.add_edge(0, 0, weight=1.0 - eta * qs.sum())
            graph.add_weighted_edges_from(
                zip(nodes, [0] * len(nodes), (eta * qs).tolist(), strict=True)
            )
        else:
            graph.add_edge(0, 0, weight=1.0)
        graph.add_edges_from(((i, i) for i in range(1, n + 1)), weight=1.0)
    elif block == "collect":
        graph.add_edge(0, 0, weight=1.0)
        graph.add_edges_from(((i, 0) for i in nodes), weight=1.0)
        graph.add_edges_from(((i, i) for i in absent), weight=1.0)
    else:  # local_diagonal
        graph.add_edges_from(((i, i) for i in nodes), weight=1.0)
    return graph


__all__ = ["BLOCKS", "star_graph"]
