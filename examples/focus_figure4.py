"""FOCUS, Figure 4: three participation patterns
=============================================

The FOCUS paper's Figure 4: least squares over 16 clients under three participation
patterns, FedAvg, FedAU, SCAFFOLD, MIFA and FOCUS with one shared step size per panel.

Set-up (from the authors' notebook): 8000 rows in dimension 50, A = diag(s) G with s uniform
in [0.5, 1) and G Gaussian, b = A x_o + 0.1 noise, client i holds rows i, i+16, ...;
f_i = 1/2 ||A_i x - b_i||^2; x0 = 0; K = 3. Participation: full; uniform, 4 of 16 per round;
arbitrary, 4 of 16 drawn without replacement with fixed random weights. Step sizes 6e-4,
1.5e-4 and 1e-4. Error: ||x - x*|| / ||x*||.

Run: python examples/focus_figure4.py  (writes focus_figure4.png)
"""

import sys

import numpy as np

import stochmix as sm
from stochmix.algorithms import FOCUS, MIFA, SCAFFOLD, FedAvg
from stochmix.participation import Full, UniformSample, WeightedSample
from stochmix.problems import LeastSquares

N, DIM, ROWS, K = 16, 50, 8000, 3


def problem(seed=1234):
    rng = np.random.default_rng(seed)
    a = ((rng.random(ROWS) + 1) / 2)[:, None] * rng.standard_normal((ROWS, DIM))
    b = a @ rng.standard_normal(DIM) + 0.1 * rng.standard_normal(ROWS)
    return LeastSquares([a[i::N] for i in range(N)], [b[i::N] for i in range(N)])


def panels(seed=5):
    weights = np.random.default_rng(seed).random(N) + 0.01
    return {
        "full": (Full(N), 6e-4),
        "uniform (4 of 16)": (UniformSample(N, 4), 1.5e-4),
        "arbitrary (4 of 16, weighted)": (WeightedSample(weights / weights.sum(), 4), 1e-4),
    }


def methods(lr):
    return [
        FedAvg(lr, K),
        FedAvg(lr, K, weights="fedau", cutoff=10),
        SCAFFOLD(lr, K),
        MIFA(lr, K),
        FOCUS(lr, K),
    ]


def main(rounds=500, out="focus_figure4.png", plot=True):
    prob = problem()
    results = {}
    print(f"{'panel':>30} {'method':>9}  {'final ||x-x*||/||x*||':>22}  {'rate':>7}")
    for panel, (participation, lr) in panels().items():
        for method in methods(lr):
            res = sm.run(
                method, prob, participation, rounds, seed=0, metrics=("distance",), progress=False
            )
            results[(panel, method.name)] = res
            print(
                f"{panel:>30} {method.name:>9}  {res.relative_error[-1]:22.3e}  {res.rate():7.4f}"
            )
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
        for ax, panel in zip(axes, panels(), strict=True):
            for (name, method), res in results.items():
                if name == panel:
                    ax.semilogy(res.relative_error, label=method)
            ax.set_title(panel)
            ax.set_xlabel("round")
        axes[0].set_ylabel("||x - x*|| / ||x*||")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot: {out}")
    return {key: float(res.relative_error[-1]) for key, res in results.items()}


#: The reduced size (`--quick`), which the documentation's CI build runs.
QUICK = dict(rounds=150)

if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else {}))
