"""Heterogeneity (issue 28): what uneven local work and asynchronous aggregation cost.

Two measurements, each in one process, every argument of :func:`stochmix.run` at its
default but ``progress=False`` and ``metrics=("distance",)``:

* **uneven local steps**: FedAvg on a diagonal quadratic and on least squares (5 rows a
  client), N = 10^6 clients (``--quick``: 10^5), d = 10, |S| = 10^5 (10^4) sampled
  uniformly a round: the median seconds of a round with K_i ~ uniform on {1..5}
  (``RandomSteps.uniform(1, 5)``) against every K_i = 3, the same expected work, with
  the default ``compiled="auto"`` and compiled; the issue's target is a ratio <= 1.3;
* **FedBuff arrivals**: M = 1000 (``--quick``: 100) updates a round, concurrency
  C = 1000, N = 10^6 (10^5) clients, K = 1 local step, Pareto(1.5) step times: arrivals
  processed per second of a whole run (schedule, local steps, server updates, metrics;
  start-up included); the issue's target is >= 10^5 a second.

Prints a table and writes ``benchmarks/results-heterogeneity.json``. Run:
``.venv/bin/python benchmarks/bench_heterogeneity.py [--quick]`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

import stochmix as sm
from stochmix.algorithms import FedAvg, FedBuff, RandomSteps
from stochmix.timing import Clock, Pareto, TimeModel


def uneven_steps(n: int, cohort: int, rounds: int) -> dict:
    """Per problem (a diagonal quadratic: cheap gradients; least squares, 5 rows a
    client), the median seconds of a round past the first two, K_i ~ U{1..5} against
    K = 3, with the default ``compiled="auto"`` and compiled."""
    problems = {
        "quadratic": sm.problems.Quadratic.random(n, 10, seed=0),
        "least squares": sm.problems.LeastSquares.random(n, 10, rows_per_client=5, seed=0),
    }
    process = sm.participation.UniformSample(n, cohort)
    out: dict = {}
    for kind, problem in problems.items():
        lr = 0.1 / problem.smoothness
        found: dict = {}
        # compiled="auto" (the default) leaves these short runs on NumPy programs; a long
        # run (rounds x participants x d >= 3e8) is compiled: both are measured
        for compiled in ("auto", True):
            tag = "" if compiled == "auto" else " compiled"
            for name, steps in (("K=3", 3), ("K~U{1..5}", RandomSteps.uniform(1, 5))):
                options = {"seed": 1, "progress": False, "compiled": compiled}
                sm.run(FedAvg(lr, steps), problem, process, 3, **options)  # warm-up
                result = sm.run(FedAvg(lr, steps), problem, process, rounds, **options,
                                metrics=("distance",))  # fmt: skip
                found[name + tag] = float(np.median(np.diff(result.wall_time)[2:]))
                found[name + tag + " gradients/round"] = float(result.gradients[1:].mean())
            found["ratio" + tag] = found["K~U{1..5}" + tag] / found["K=3" + tag]
        out[kind] = found
    return out


def fedbuff_arrivals(n: int, buffer: int, rounds: int) -> dict:
    problem = sm.problems.Quadratic.random(n, 10, seed=0)
    method = FedBuff(0.1 / problem.smoothness, 1, buffer=buffer, concurrency=1000)
    clock = Clock(TimeModel(compute=Pareto(1.5, 1.0)))
    full = sm.participation.Full(n)
    sm.run(method, problem, full, 3, clock=clock, progress=False)  # warm-up (compiles)
    start = time.perf_counter()
    result = sm.run(method, problem, full, rounds, clock=clock, progress=False,
                    metrics=("distance",))  # fmt: skip
    seconds = time.perf_counter() - start
    arrivals = int(result.participants[1:].sum())
    return {"arrivals": arrivals, "seconds": seconds, "arrivals_per_second": arrivals / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 10**5 if args.quick else 10**6
    results = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "quick": args.quick,
        "uneven_steps": uneven_steps(n, n // 10, 20 if args.quick else 40),
        "fedbuff": fedbuff_arrivals(n, 100 if args.quick else 1000, 200),
    }
    u, f = results["uneven_steps"], results["fedbuff"]
    for kind, found in u.items():
        for tag in ("", " compiled"):
            print(f"uneven local steps{tag}, {kind}, N = {n}: "
                  f"K=3 {found['K=3' + tag] * 1e3:.2f} ms/round, "
                  f"K~U{{1..5}} {found['K~U{1..5}' + tag] * 1e3:.2f} ms/round, "
                  f"ratio {found['ratio' + tag]:.2f}")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"FedBuff: {f['arrivals']} arrivals in {f['seconds']:.2f} s = "
          f"{f['arrivals_per_second']:.3g} arrivals/s")  # fmt: skip
    path = os.path.join(os.path.dirname(__file__), "results-heterogeneity.json")
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
