"""Amplified FedAvg, Wang & Ji's three clients
===========================================

Wang & Ji (2022), appendix B.1: three clients, one per round in turn.

F_n(x) = 1/2 ||x - z_n||^2 with z = (-1, 0), (1, 0), (0, sqrt 3); x* is their centroid.
Client 1 alone in round 0, client 2 in round 1, client 3 in round 2, and so on; x0 = (1, 2);
one local step. Left: plain FedAvg for several step sizes (their Figure B.1). Right: step
0.05 with the update of every P = 3 rounds amplified by eta (their Figure B.2).

Run: python examples/wang_ji_three_clients.py  (writes wang_ji_three_clients.png)
"""

import numpy as np

import stochmix as sm
from stochmix.algorithms import AmplifiedFedAvg
from stochmix.participation import Trace
from stochmix.problems import Quadratic

CENTERS = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, np.sqrt(3.0)]])


def trajectory(lr, eta, rounds=15):
    problem = Quadratic(CENTERS, np.ones((3, 2)))
    masks = np.eye(3, dtype=bool)[np.arange(rounds) % 3]
    method = AmplifiedFedAvg(lr, local_steps=1, amplification=eta, period=3)
    return sm.run(method, problem, Trace(masks), rounds, x0=np.array([1.0, 2.0]))


def main(rounds=15, out="wang_ji_three_clients.png", plot=True):
    rows = {}
    print(f"{'figure':>6} {'lr':>6} {'eta':>4}  x_15                      ||x_15 - x*||")
    for figure, settings in (
        ("B.1", [(lr, 1.0) for lr in (0.05, 0.1, 0.25, 0.5)]),
        ("B.2", [(0.05, eta) for eta in (1.0, 2.0, 5.0, 10.0)]),
    ):
        for lr, eta in settings:
            res = trajectory(lr, eta, rounds)
            rows[(figure, lr, eta)] = res
            x = res.final
            print(
                f"{figure:>6} {lr:6.2f} {eta:4.0f}  ({x[0]: .6f}, {x[1]: .6f})"
                f"      {res.distance[-1]:.6f}"
            )
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
        for ax, figure in zip(axes, ("B.1", "B.2"), strict=True):
            ax.scatter(*CENTERS.T, marker="s", color="gray", label="z_n")
            ax.scatter(0.0, np.sqrt(3) / 3, marker="*", s=120, color="k", label="x*")
            for (fig_name, lr, eta), res in rows.items():
                if fig_name == figure:
                    ax.plot(*res.server.T, marker=".", label=f"lr {lr}, eta {eta:g}")
            ax.set_title(f"Figure {figure}")
            ax.set_aspect("equal")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot: {out}")
    return {key: float(res.distance[-1]) for key, res in rows.items()}


if __name__ == "__main__":
    main()
