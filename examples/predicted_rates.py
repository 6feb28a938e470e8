"""Predicted against measured linear rates
=======================================

Predicted against measured linear rates.

On a quadratic problem every phase is affine, so a round is an exact affine map of the
stacked state (`stochmix.analysis.round_operator`). For a periodic participation pattern the
spectral radius of the period's map (leaving out the eigenvalues 1 of quantities the method
conserves) is the exact asymptotic rate; for random participation the top Lyapunov exponent
of the random product estimates the almost-sure rate. Here both are compared with the rate
fitted to actual runs (`Result.rate()`): FOCUS under a cyclic pattern and under Bernoulli
participation, and gradient tracking on a static ring.

Run: python examples/predicted_rates.py  (writes predicted_rates.png)
"""

import sys

import numpy as np

import stochmix as sm
from stochmix.algorithms import FOCUS, GradientTracking
from stochmix.analysis import lyapunov_rate, periodic_rate
from stochmix.mixing import StaticSequence
from stochmix.participation import Bernoulli, Full, Trace
from stochmix.problems import Quadratic


def cases(n=8, dim=3, seed=0):
    import networkx as nx

    problem = Quadratic.random(n, dim, seed=seed)
    lr = 0.3 / (n * problem.smoothness)
    cyclic = np.zeros((4, n), dtype=bool)
    for r in range(4):
        cyclic[r, r::4] = True  # each client once every 4 rounds
    ring = StaticSequence(nx.cycle_graph(n))
    return problem, [
        ("FOCUS, cyclic pattern", FOCUS(lr, 3), cyclic, None),
        (
            "GradientTracking, ring",
            GradientTracking(0.3 / problem.smoothness, ring),
            np.ones((1, n), dtype=bool),
            None,
        ),
        (
            "FOCUS, Bernoulli p in [0.2, 0.9]",
            FOCUS(lr, 3),
            None,
            Bernoulli.heterogeneous(n, 0.2, 0.9, seed=seed),
        ),
    ]


def main(rounds=400, lyapunov_rounds=3000, out="predicted_rates.png", plot=True):
    problem, todo = cases()
    rows = []
    print(f"{'case':>34}  {'predicted':>10}  {'measured':>9}  {'difference':>10}")
    for name, method, pattern, process in todo:
        if process is None:
            predicted = periodic_rate(method, problem, pattern).per_round
            repeats = -(-rounds // pattern.shape[0])
            participation = Trace(np.tile(pattern, (repeats, 1)))
            if pattern.all():
                participation = Full(problem.n_clients)
            measured = [sm.run(method, problem, participation, rounds, progress=False).rate()]
            low = high = predicted
        else:
            est = lyapunov_rate(method, problem, process, lyapunov_rounds, seed=1)
            predicted, low, high = est.rate, est.low, est.high
            measured = [
                sm.run(method, problem, process, rounds, seed=s, progress=False).rate()
                for s in range(10)
            ]
        m = float(np.mean(measured))
        rows.append((name, predicted, low, high, m))
        print(f"{name:>34}  {predicted:10.5f}  {m:9.5f}  {abs(m - predicted) / predicted:9.2%}")
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        y = np.arange(len(rows))
        ax.errorbar(
            [r[1] for r in rows],
            y,
            xerr=[[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]],
            fmt="o",
            label="predicted (analysis)",
        )
        ax.plot([r[4] for r in rows], y, "x", ms=10, label="measured (runs)")
        ax.set_yticks(y, [r[0] for r in rows])
        ax.set_xlabel("linear rate per round")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"plot: {out}")
    return {r[0]: (r[1], r[4]) for r in rows}


#: The reduced size (`--quick`), which the documentation's CI build runs.
QUICK = dict(rounds=300, lyapunov_rounds=2000)

if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else {}))
