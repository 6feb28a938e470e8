"""Randomized gossip: averaging time against the spectral gap
==========================================================

Randomized gossip: averaging time against the spectral gap (Boyd et al. 2006).

In randomized gossip (S. Boyd, A. Ghosh, B. Prabhakar, D. Shah, "Randomized gossip
algorithms", IEEE Trans. Inf. Theory 52(6):2508–2530, 2006) each tick of a clock
activates one edge ``{i, j}`` of a graph and its two endpoints replace their values by
their average, ``x <- W x`` with ``W = I - (e_i - e_j)(e_i - e_j)ᵀ / 2``. Since
``E[WᵀW] = E[W]``, the mean-square distance to the average shrinks at least by the factor
``λ₂(E[W])`` per tick, and the ε-averaging time is of the order of
``log(1/ε) / log(1/λ₂(E[W])) ≈ log(1/ε) / (1 - λ₂)`` ticks (their Theorem 3).

Here gossip runs on random geometric graphs of n nodes (radius ``sqrt(2 log n / n)``, the
connectivity regime) under Boyd's natural law, ``RandomEdge.boyd`` (a node wakes and
averages with a uniform neighbour). The method is CHOCO-Gossip with no compression and
``gamma = 1`` (``lr = 0``: ``x <- x + (W - I) x``, pure averaging), the nodes start on the
slowest mode of ``E[W]`` (the worst start, the ``sup`` of Boyd's definition), and the
ε-averaging time is the first tick at which the mean over seeds of the squared relative
distance ``||x(k) - x̄||² / ||x(0) - x̄||²`` (the ``consensus`` metric, relative to its start)
falls below ε². Two bounds hold for this start: the mean-square distance is at most
``λ₂^k`` (so the time is at most ``2 log(1/ε) / log(1/λ₂)``) and at least ``||E x(k) -
x̄||² = λ₂^{2k}`` (so at least half of it). The measured times stay between the two, at
about 0.55 of the upper bound, as n and ``1 / (1 - λ₂)`` grow: the averaging time scales
as ``log(1/ε) / (1 - λ₂(E[W]))``.

Run: python examples/gossip_averaging_time.py  (writes gossip_averaging_time.png)
"""

import sys

import networkx as nx
import numpy as np

import stochmix as sm
from stochmix.algorithms import CHOCO
from stochmix.mixing import StaticSequence
from stochmix.participation import RandomEdge
from stochmix.problems import Quadratic


def geometric_graph(n, seed=0):
    """A connected random geometric graph on n nodes, radius sqrt(2 log n / n)."""
    radius = np.sqrt(2 * np.log(n) / n)
    while True:
        graph = nx.random_geometric_graph(n, radius, seed=seed)
        if nx.is_connected(graph):
            return graph
        seed += 1000


def averaging_time(n, eps, seeds):
    """The measured ε-averaging time (ticks), the bound 2 log(1/ε) / log(1/λ₂) and the
    spectral gap 1 - λ₂(E[W]) of gossip on a random geometric graph of n nodes."""
    graph = geometric_graph(n)
    process = RandomEdge.boyd(graph)
    values, vectors = np.linalg.eigh(process.expected_matrix().toarray())
    lam2, slowest = values[-2], vectors[:, -2]
    bound = 2 * np.log(1 / eps) / np.log(1 / lam2)
    gossip = CHOCO(0.0, StaticSequence(graph), gamma=1.0, compression="none")
    problem = Quadratic.random(n, 1, seed=0)  # lr = 0: no gradient is taken
    ticks = int(1.1 * bound) + 10  # the mean-square is at most λ₂^k
    curves = [
        sm.run(
            gossip,
            problem,
            process,
            ticks,
            x0=slowest[:, None],
            seed=seed,
            metrics=("consensus",),
            progress=False,
        ).consensus
        for seed in range(seeds)
    ]
    mean = np.mean([c / c[0] for c in curves], axis=0)
    below = np.flatnonzero(mean <= eps**2)
    measured = int(below[0]) if below.size else np.nan
    return measured, bound, 1 - lam2, graph.number_of_edges()


def main(sizes=(20, 40, 80), eps=0.05, seeds=5, out="gossip_averaging_time.png", plot=True):
    rows = {}
    print(f"ε = {eps}, {seeds} seeds; ticks until mean ||x - x̄||² / ||x0 - x̄||² <= ε²")
    print(
        f"{'n':>4}  {'edges':>5}  {'1 - λ₂':>9}  {'1/(1-λ₂)':>9}  {'bound':>7}  "
        f"{'measured':>8}  {'ratio':>5}  {'time':>6}"
    )
    for n in sizes:
        measured, bound, gap, edges = averaging_time(n, eps, seeds)
        rows[n] = (measured, bound, gap)
        print(
            f"{n:4d}  {edges:5d}  {gap:9.2e}  {1 / gap:9.1f}  {bound:7.0f}  "
            f"{measured:8.0f}  {measured / bound:5.2f}  {measured / n:6.1f}"
        )
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 4))
        x = np.array([np.log(1 / eps) / rows[n][2] for n in sizes])
        ax.loglog(x, [rows[n][0] for n in sizes], "o", label="measured (RandomEdge.boyd)")
        upper = np.array([rows[n][1] for n in sizes])
        ax.loglog(x, upper, "--", label="upper bound 2 log(1/ε) / log(1/λ₂)")
        ax.loglog(x, upper / 2, ":", label="lower bound log(1/ε) / log(1/λ₂)")
        for n, xi in zip(sizes, x, strict=True):
            ax.annotate(f"n = {n}", (xi, rows[n][0]), textcoords="offset points", xytext=(5, -12))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("log(1/ε) / (1 - λ₂(E[W]))")
        ax.set_ylabel("ε-averaging time (ticks)")
        ax.set_title("Randomized gossip on random geometric graphs")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot: {out}")
    return rows


#: The reduced size (`--quick`), which the documentation's CI build runs.
QUICK = dict(sizes=(10, 20), seeds=3)

if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else {}))
