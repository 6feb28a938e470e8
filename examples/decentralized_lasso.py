"""A decentralized LASSO: proximal, primal-dual and subgradient methods, and support recovery
==========================================================================================

A decentralized LASSO: proximal, primal-dual and subgradient methods, and support recovery.

Each of n nodes on a ring holds a least-squares problem whose ground truth has s nonzero
coordinates (``LeastSquares.random(..., support=s)``); the network minimises the average
of the nodes' losses plus lam ||x||_1 (:class:`~stochmix.problems.Composite` with
:class:`~stochmix.problems.L1`; its minimiser is certified to a prox-gradient residual of
1e-12). Four methods run on the same problem and graph:

- PG-EXTRA and NIDS with a prox (fixed steps, the prox as a row map): linear convergence
  to the exact minimiser, and its support from some iteration on;
- decentralized ADMM whose local problems (with the L1 term) are solved by three
  proximal-gradient steps: also exact;
- DGD with a subgradient of the L1 term and a decaying step
  (``problem.with_subgradients()``): it approaches the minimiser slowly and never zeroes a
  coordinate exactly.

The figure shows the relative error against iterations, and the support recovery: the
fraction of coordinates whose zero / nonzero pattern (``abs(x_j) > 1e-8``) matches the
minimiser's.

Run: python examples/decentralized_lasso.py  (writes decentralized_lasso.png)
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

import stochmix as sm  # noqa: E402
from stochmix.algorithms import DGD, PGEXTRA, DecentralizedADMM, ProxNIDS  # noqa: E402
from stochmix.problems import L1, Composite, LeastSquares  # noqa: E402

#: Full size, and the ``--quick`` size the tests and the docs build run.
FULL = {"nodes": 20, "dim": 40, "support": 6, "rounds": 600}
QUICK = {"nodes": 10, "dim": 20, "support": 4, "rounds": 300}


def methods(smooth, graphs):
    lip = smooth.smoothness
    admm_lr = 0.03
    return {
        "PG-EXTRA": PGEXTRA(0.5 / lip, graphs),
        "NIDS-prox": ProxNIDS(1.0 / lip, graphs),
        "ADMM (prox steps)": DecentralizedADMM(
            admm_lr, graphs, solver="gradient", local_lr=1 / (lip + 4 / admm_lr), local_steps=3
        ),
        "DGD + subgradient": DGD(1.0 / lip, graphs, decay=0.5),
    }


def support_match(models, x_star):
    """The fraction of coordinates whose zero / nonzero pattern matches x_star's, per row."""
    return np.mean((np.abs(models) > 1e-8) == (x_star != 0), axis=1)


def main(nodes=FULL["nodes"], dim=FULL["dim"], support=FULL["support"],
         rounds=FULL["rounds"], out="decentralized_lasso.png"):  # fmt: skip
    """Run, print the table and save the figure; returns ``{name: (error, support match)}``
    at the last iteration."""
    smooth = LeastSquares.random(nodes, dim, rows_per_client=dim // 2, support=support,
                                 heterogeneity=0.5, seed=0)  # fmt: skip
    problem = Composite(smooth, L1(2.0))
    x_star = problem.x_star
    graphs = sm.mixing.StaticSequence(nx.cycle_graph(nodes))
    full = sm.participation.Full(nodes)
    table, curves = {}, {}
    for name, method in methods(smooth, graphs).items():
        data = problem.with_subgradients() if name.startswith("DGD") else problem
        result = sm.run(method, data, full, rounds, progress=False)
        error = result.distance / np.linalg.norm(x_star)
        match = support_match(result.server, x_star)
        curves[name] = (error, match)
        table[name] = (float(error[-1]), float(match[-1]))
    print(f"minimiser: {np.count_nonzero(x_star)} nonzeros of {dim}; truth had {support}")
    print(f"{'method':>18} {'rel. error':>11} {'support match':>14}")
    for name, (error, match) in table.items():
        print(f"{name:>18} {error:>11.2e} {match:>14.2f}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for name, (error, match) in curves.items():
        left.semilogy(error, label=name)
        right.plot(match, label=name)
    left.set_xlabel("iteration")
    left.set_ylabel("relative error")
    right.set_xlabel("iteration")
    right.set_ylabel("support recovered")
    right.set_ylim(0, 1.05)
    left.legend(fontsize=8)
    fig.suptitle(f"decentralized LASSO, {nodes} nodes on a ring, d = {dim}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return table


if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else FULL))
