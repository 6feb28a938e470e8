"""Gossip against synchronous iterations, by messages sent
=========================================================

Gossip against synchronous iterations, by messages sent.

A synchronous decentralized iteration sends one message per edge direction of the graph
(every node reads every neighbour); randomized gossip (``RandomEdge``: one random edge a
tick, its two endpoints average) sends two. Plotted against the messages sent
(``Result.plot(x="messages")``, the running sum of the per-round ``messages`` column),
the two are compared at equal communication: left, pure averaging (CHOCO-Gossip with no
compression and ``gamma = 1``, exactly ``x <- W x``; the ``consensus`` metric relative to
its start); right, gradient tracking on a quadratic (relative error), whose iterations
under edge gossip keep the doubly stochastic mixing tracking needs. The graph is a
connected random geometric graph of 50 nodes, synchronous mixing with Metropolis weights.

Run: python examples/gossip_vs_synchronous.py  (writes gossip_vs_synchronous.png)
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

import stochmix as sm  # noqa: E402
from stochmix.algorithms import CHOCO, GradientTracking  # noqa: E402
from stochmix.mixing import StaticSequence  # noqa: E402
from stochmix.participation import Full, RandomEdge  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402

#: Full size, and the ``--quick`` size the tests and the docs build run.
FULL = {"n": 50, "messages": 60_000}
QUICK = {"n": 20, "messages": 6_000}


def geometric_graph(n, seed=1):
    """A connected random geometric graph on n nodes, radius sqrt(2 log n / n)."""
    radius = np.sqrt(2 * np.log(n) / n)
    while True:
        graph = nx.random_geometric_graph(n, radius, seed=seed)
        if nx.is_connected(graph):
            return graph
        seed += 1000


def runs(n, messages):
    """The four runs (averaging and gradient tracking, gossip and synchronous), each long
    enough to send about ``messages`` messages."""
    graph = geometric_graph(n)
    sequence = StaticSequence(graph)
    edges = 2 * graph.number_of_edges()
    problem = Quadratic.random(n, 5, seed=0)
    x0 = np.random.default_rng(0).standard_normal((n, 5))
    lr = 0.2 / problem.smoothness
    out = {}
    # messages a round: a tick mixes one edge (2 messages) per mixed block, a synchronous
    # iteration every edge direction; gradient tracking mixes two blocks (x and y)
    for name, process, per_mix in (
        ("gossip", RandomEdge(graph), 2),
        ("synchronous", Full(n), edges),
    ):
        average = CHOCO(0.0, sequence, gamma=1.0, compression="none")
        out["averaging", name] = sm.run(average, problem, process, messages // per_mix,
                                        x0=x0, seed=1, metrics=("consensus",),
                                        progress=False)  # fmt: skip
        tracking = GradientTracking(lr, sequence)
        out["tracking", name] = sm.run(tracking, problem, process, messages // (2 * per_mix),
                                       seed=1, metrics=("distance",),
                                       progress=False)  # fmt: skip
    return out


def at(result, metric, messages):
    """The metric (relative to its start) after ``messages`` messages."""
    sent = result.axis("messages")
    rounds, values = result.evaluated(metric)
    values = values / values[0]
    k = np.searchsorted(sent[rounds], messages, side="right") - 1
    return values[max(k, 0)]


def main(n=FULL["n"], messages=FULL["messages"], out="gossip_vs_synchronous.png"):
    """Run, print the table and save the figure; returns the table's rows
    ``{messages: (averaging gossip, averaging synchronous, tracking gossip, tracking
    synchronous)}``."""
    size = {"n": n, "messages": messages}
    results = runs(**size)
    table = {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    marks = [size["messages"] // 4, size["messages"] // 2, size["messages"]]
    print(f"{'messages':>9} {'avg gossip':>11} {'avg sync':>10} {'GT gossip':>10} {'GT sync':>10}")
    for m in marks:
        row = [at(results[k, v], "consensus" if k == "averaging" else "relative_error", m)
               for k in ("averaging", "tracking") for v in ("gossip", "synchronous")]  # fmt: skip
        print(f"{m:>9} " + " ".join(f"{value:>10.2e}" for value in row))
        table[m] = tuple(row)
    for ax, kind, metric in zip(
        axes, ("averaging", "tracking"), ("consensus", "relative_error"), strict=True
    ):
        for name in ("gossip", "synchronous"):
            result = results[kind, name]
            sent = result.axis("messages")
            rounds, values = result.evaluated(metric)
            ax.semilogy(sent[rounds], values / values[0], label=name)
        ax.set_xlabel("messages sent")
        ax.set_ylabel(f"{metric.replace('_', ' ')} (relative)")
        ax.set_title("pure averaging" if kind == "averaging" else "gradient tracking")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return table


if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else FULL))
