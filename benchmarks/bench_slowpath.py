"""No silent slow paths (issue 24): FedLin written in the equation form, its corrections
``c[S] = grad(S); gbar.server = mean(grad(S))`` in one phase, against the same method with
them in two phases and against FedAvg, side by side in one process.

FedLin (Mitra et al. 2021) is FedAvg with a gradient correction: the participants pull
the server model, keep their gradient there (c_i) and the server their mean (gbar), take
K corrected local steps ``x_i -= lr (grad_i(x_i) - c_i + gbar)``, and the server
averages. The method below is written as the README's "Writing your own method" shows,
with nothing but the public API, so the same script runs on any version of stochmix
(``PYTHONPATH=<a checkout> python benchmarks/bench_slowpath.py`` times that checkout).

Each figure is the wall time of ``sm.run(method, problem, participation, rounds,
metrics=())`` (default arguments otherwise: NumPy programs at this size), after one
warm-up run of each method; the three methods run in turn, ``--repeats`` times, and the
median is printed. Least squares, N clients, d dimensions, |S| participants drawn
uniformly, K local steps.

Run: ``python benchmarks/bench_slowpath.py [--clients 100 --dim 10 --sample 10
--local-steps 2 --rounds 500 --repeats 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import numpy as np

import stochmix as sm
from stochmix.engine import grad, mean


class FedLin(sm.Method):
    """FedAvg with a gradient correction; ``split`` writes the corrections in two
    phases (the mean reading the kept gradients), else in one."""

    def __init__(self, lr, local_steps, split=False):
        self.lr, self.local_steps, self.split = lr, local_steps, split
        self.name = "FedLin, two phases" if split else "FedLin, one phase"

    def blocks(self, n):
        return [sm.Block("x", n + 1, "model"), sm.Block("c", n + 1), sm.Block("gbar", 1)]

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = sm.Equations(ctx)
        x, c, gbar = eq.blocks("x", "c", "gbar")
        x[S] = x.server
        pull = eq.build("pull")
        c[S] = grad(S)
        if self.split:
            first = eq.build("corrections")
            gbar.server = mean(c[S])
            corrections = [first, eq.build("mean gradient")]
        else:
            gbar.server = mean(grad(S))
            corrections = [eq.build("corrections")]
        x[S] -= self.lr * (grad(S) - c[S] + gbar.server)
        step = eq.build("corrected step")
        x.server = mean(x[S])
        return [pull, *corrections, *[step] * self.local_steps, eq.build("average")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    problem = sm.problems.LeastSquares.random(args.clients, args.dim, seed=0)
    participation = sm.participation.UniformSample(args.clients, args.sample)
    lr = 0.1 / problem.smoothness
    k = args.local_steps
    methods = [sm.algorithms.FedAvg(lr, k), FedLin(lr, k), FedLin(lr, k, split=True)]
    times = {m.name: [] for m in methods}
    finals = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for m in methods:  # warm-up
            sm.run(m, problem, participation, 20, seed=1, metrics=())
        for _ in range(args.repeats):
            for m in methods:
                start = time.perf_counter()
                result = sm.run(m, problem, participation, args.rounds, seed=1, metrics=())
                times[m.name].append(time.perf_counter() - start)
                finals[m.name] = result.server[-1]
    one, two = finals["FedLin, one phase"], finals["FedLin, two phases"]
    out = {
        "version": getattr(sm, "__file__", ""),
        "setting": {
            "clients": args.clients,
            "dim": args.dim,
            "sample": args.sample,
            "local_steps": k,
            "rounds": args.rounds,
            "repeats": args.repeats,
        },
        "median_s": {name: statistics.median(ts) for name, ts in times.items()},
        "times_s": times,
        "one_vs_two_max_relative": float(np.abs(one - two).max() / np.abs(two).max()),
        "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught}),
    }
    print(f"stochmix from {out['version']}")
    print(
        f"N = {args.clients}, d = {args.dim}, |S| = {args.sample}, K = {k}, "
        f"{args.rounds} rounds, median of {args.repeats}:"
    )
    for name, ts in times.items():
        print(f"  {name:20s} {statistics.median(ts):.3f} s   ({', '.join(f'{t:.3f}' for t in ts)})")
    print(
        f"  one phase vs two phases: max relative difference {out['one_vs_two_max_relative']:.1e}"
    )
    for line in out["warnings"]:
        print(f"  warned: {line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
