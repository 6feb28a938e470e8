"""Variance-reduced gradient tracking: what an iteration of GT-SAGA, GT-SVRG and GT-SARAH
costs against gradient tracking's, on one run each.

n nodes (default 10^4) on a random 4-regular graph (``rule="metropolis"``), least
squares with 5 rows a node, d = 10. Each method runs ``--iterations`` iterations through
``stochmix.run(..., metrics=(), progress=False)`` with every other argument at its default
(the NumPy backend, ``compiled="auto"``); an iteration's time is the median of the run's
own round times (``Result.wall_time`` differences) past its first five, and the whole
run's seconds per iteration stand beside it. Methods alternate over ``--repeats`` runs and
the medians of the repeats are reported. The script prints a table and, with ``--out``,
writes it as JSON.

Run: ``.venv/bin/python benchmarks/bench_variance_reduced.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import networkx as nx
import numpy as np

import stochmix as sm
from stochmix.algorithms import GTSAGA, GTSARAH, GTSVRG, GradientTracking
from stochmix.mixing import StaticSequence

METHODS = {
    "GradientTracking": lambda lr, g: GradientTracking(lr, g),
    "GT-SAGA": lambda lr, g: GTSAGA(lr, g),
    "GT-SVRG": lambda lr, g: GTSVRG(lr, g, snapshot_every=10),
    "GT-SARAH": lambda lr, g: GTSARAH(lr, g, restart_every=10),
}


def one_run(name: str, n: int, iterations: int) -> tuple[float, float]:
    problem = sm.problems.LeastSquares.random(n, 10, rows_per_client=5, seed=0)
    graphs = StaticSequence(nx.random_regular_graph(4, n, seed=0))
    method = METHODS[name](0.05 / problem.smoothness, graphs)
    start = time.perf_counter()
    result = sm.run(
        method, problem, sm.participation.Full(n), iterations, metrics=(), progress=False,
    )  # fmt: skip
    whole = (time.perf_counter() - start) / iterations
    per = float(np.median(np.diff(result.wall_time)[5:]))
    return per, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    times: dict = {name: [] for name in METHODS}
    for _ in range(args.repeats):
        for name in METHODS:
            times[name].append(one_run(name, args.n, args.iterations))
    rows = {}
    base = float(np.median([t[0] for t in times["GradientTracking"]]))
    print(f"n = {args.n}, d = 10, {args.iterations} iterations, medians of {args.repeats}")
    for name, found in times.items():
        per = float(np.median([t[0] for t in found]))
        whole = float(np.median([t[1] for t in found]))
        rows[name] = {"iteration_ms": 1e3 * per, "whole_run_ms": 1e3 * whole,
                      "vs_gradient_tracking": per / base}  # fmt: skip
        print(f"  {name:17s} {1e3 * per:7.2f} ms an iteration ({per / base:.2f}x GT), "
              f"whole run {1e3 * whole:7.2f} ms an iteration")  # fmt: skip
    if args.out is not None:
        record = {
            "what": "benchmarks/bench_variance_reduced.py",
            "setting": vars(args) | {"out": str(args.out)},
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f}",
            "rows": rows,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
