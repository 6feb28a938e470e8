"""FedStale, Figure 1: two clients, p1 / p2 = 100
==============================================

Rodio & Neglia (2024), Figure 1: two clients, 2-D quadratics, p1 / p2 = 100.

The global optimum is not the mean of the two local optima. Client 1 takes part in every
round, client 2 in one round of a hundred. FedAvg (unbiased weights 1/(N p_i), beta = 0)
jumps whenever client 2 appears; FedVARP (beta = 1) leans on client 2's ever older update;
FedStale with beta = 0.8 mixes the two. The paper gives neither the objectives nor the step
sizes; ours: H1 = [[2, 1], [1, 2]], c1 = (0, 5), H2 = diag(1, 0.2), c2 = (5, 0), client step
3e-3, server step 1, K = 5, T = 4000, start (-10, -10), 10 seeds.

Run: python examples/fedstale_two_clients.py  (writes fedstale_two_clients.png)
"""

import sys

import numpy as np

import stochmix as sm
from stochmix.algorithms import FedStale
from stochmix.participation import Bernoulli
from stochmix.problems import Quadratic

BETAS = {"FedAvg (beta 0)": 0.0, "FedStale (beta 0.8)": 0.8, "FedVARP (beta 1)": 1.0}


def setup():
    hessians = np.array([[[2.0, 1.0], [1.0, 2.0]], [[1.0, 0.0], [0.0, 0.2]]])
    problem = Quadratic(np.array([[0.0, 5.0], [5.0, 0.0]]), hessians)
    return problem, Bernoulli(np.array([1.0, 0.01]))


def main(rounds=4000, seeds=10, out="fedstale_two_clients.png", plot=True):
    problem, participation = setup()
    x0 = np.array([-10.0, -10.0])
    runs = {
        name: [
            sm.run(
                FedStale(3e-3, 5, beta),
                problem,
                participation,
                rounds,
                x0=x0,
                seed=seed,
                metrics=("objective",),
                progress=False,
            )
            for seed in range(seeds)
        ]
        for name, beta in BETAS.items()
    }
    print(
        f"{'method':>20}  {'mean loss over the run':>22}  {'final loss':>10}   (means over "
        f"{seeds} seeds)"
    )
    summary = {}
    for name, results in runs.items():
        mean_loss = float(np.mean([r.objective_gap.mean() for r in results]))
        final = float(np.mean([r.objective_gap[-1] for r in results]))
        summary[name] = (mean_loss, final)
        print(f"{name:>20}  {mean_loss:22.4f}  {final:10.3e}")
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
        for name, results in runs.items():
            left.plot(*results[0].server.T, lw=0.8, label=name)
            curves = np.array([r.objective_gap for r in results])
            right.semilogy(curves.mean(axis=0), label=name)
        left.scatter(*problem.centers.T, marker="s", color="gray", label="local optima")
        left.scatter(*problem.x_star, marker="*", s=150, color="k", label="x*")
        left.set_title("trajectories (seed 0)")
        left.legend(fontsize=7)
        right.set_xlabel("round")
        right.set_ylabel("F(w) - F*  (mean over seeds)")
        right.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot: {out}")
    return summary


#: The reduced size (`--quick`), which the documentation's CI build runs.
QUICK = dict(rounds=400, seeds=2)

if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else {}))
