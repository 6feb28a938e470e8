"""FedStale, Figure 2: the best beta over two heterogeneities
==========================================================

FedStale's Figure 2 on a convex problem: the best beta over a grid of data
heterogeneity x participation heterogeneity.

24 least-squares clients; half take part in every round, the other half with probability
p_min (participation heterogeneity p_avg / p_min = (1 + p_min) / (2 p_min), as in the
paper). Data heterogeneity: the spread of the clients' own ground truths. For each cell,
FedStale runs with beta in {0, 0.2, 0.5, 0.8, 1} (same steps, same masks) and the cell shows
the beta with the lowest loss averaged over the run (mean over seeds).

Run: python examples/fedstale_heatmap.py  (writes fedstale_heatmap.png)
"""

import sys

import numpy as np

import stochmix as sm
from stochmix.algorithms import FedStale
from stochmix.participation import Bernoulli
from stochmix.problems import LeastSquares

BETAS = (0.0, 0.2, 0.5, 0.8, 1.0)
N = 24


def main(
    heterogeneities=(0.0, 0.5, 1.0, 2.0),
    p_mins=(0.5, 0.2, 0.1, 0.05),
    rounds=300,
    seeds=2,
    out="fedstale_heatmap.png",
    plot=True,
):
    best = np.zeros((len(heterogeneities), len(p_mins)))
    print(
        f"{'heterogeneity':>13} {'p_avg/p_min':>11}  "
        + "  ".join(f"b={b:<4}" for b in BETAS)
        + "  best"
    )
    for i, h in enumerate(heterogeneities):
        problem = LeastSquares.random(N, 10, rows_per_client=20, heterogeneity=h, reg=0.01, seed=7)
        lr = 0.5 / problem.smoothness
        for j, p_min in enumerate(p_mins):
            p = np.concatenate([np.ones(N // 2), np.full(N // 2, p_min)])
            participation = Bernoulli(p)
            losses = []
            for beta in BETAS:
                runs = [
                    sm.run(
                        FedStale(lr, 5, beta),
                        problem,
                        participation,
                        rounds,
                        seed=s,
                        metrics=("objective",),
                        progress=False,
                        on_divergence="warn",
                    )
                    for s in range(seeds)
                ]
                losses.append(
                    np.mean([np.mean(r.objective_gap) if not r.diverged else np.inf for r in runs])
                )
            best[i, j] = BETAS[int(np.argmin(losses))]
            ratio = (1 + p_min) / (2 * p_min)
            print(
                f"{h:13.2f} {ratio:11.1f}  "
                + "  ".join(f"{v:6.3f}" for v in losses)
                + f"  {best[i, j]:.1f}"
            )
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4.5))
        image = ax.imshow(best, cmap="viridis", vmin=0, vmax=1, origin="lower")
        ax.set_xticks(range(len(p_mins)), [f"{(1 + p) / (2 * p):.1f}" for p in p_mins])
        ax.set_yticks(range(len(heterogeneities)), [f"{h:g}" for h in heterogeneities])
        ax.set_xlabel("participation heterogeneity p_avg / p_min")
        ax.set_ylabel("data heterogeneity")
        for (a, b), value in np.ndenumerate(best):
            ax.text(b, a, f"{value:.1f}", ha="center", va="center", color="w")
        fig.colorbar(image, label="best beta")
        ax.set_title("FedStale: best beta per cell")
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot: {out}")
    return best


#: The reduced size (`--quick`), which the documentation's CI build runs.
QUICK = dict(heterogeneities=(0.0, 2.0), p_mins=(0.5, 0.1), rounds=60, seeds=1)

if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else {}))
