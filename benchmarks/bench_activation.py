"""Activation (issue 27): what a round of activated nodes or gossip costs, side by side.

Two measurements, each in one process with every argument of :func:`stochmix.run` at
its default but ``progress=False`` and the metrics named:

* **node-activated gradient tracking** (DIGing, ``check_mixing=False``: node activation
  breaks its doubly stochastic mixing, which is the point of the measurement) on a random
  4-regular graph, n = 10^5 nodes (``--quick``: 10^4), d = 10, on a diagonal quadratic
  (cheap gradients: the engine's overhead shows) and on least squares (5 rows a node):
  seconds per iteration with ``Bernoulli(0.1)`` (10% of the nodes active) against
  ``Full(n)``, both with ``metrics=()``, runs of 40 iterations (``--quick``: 20). An
  iteration is the median of the run's own round times (``Result.wall_time``) past its
  first five (the first starts every node's tracker, the next are planned in full and
  checked against the template); the whole run's seconds per iteration are given beside
  it. The issue's target is a ratio <= 0.2 an iteration;
* **pushes under node activation**: push-sum and push-DIGing on the same graph and
  diagonal quadratic, ``Bernoulli(0.1)`` against ``Full(n)`` (no target: such a push is
  built every round from W's columns at the active nodes, a noted slow path);
* **randomized gossip** (pairwise averaging over one random edge per tick, ``RandomEdge``;
  DGD's combine-then-adapt form on a problem whose gradients all vanish, so that a tick
  is pure averaging) on the same kind of graph at n = 10^4, d = 10: microseconds per
  tick of a run of a million ticks (``--quick``: 10^5), ``stochmix.run`` with
  ``metrics=("consensus",)``, start-up and compiling included
  against the loop a researcher writes by hand (``x[[i, j]] = x[[i, j]].mean(0)`` per
  tick); the issue's target is a million ticks in under 5 s (5 us a tick).

Both runs of a pair end at the same state (checked). Prints a table and writes
``benchmarks/results-activation.json``. Run: ``.venv/bin/python
benchmarks/bench_activation.py [--quick]`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings

import networkx as nx
import numpy as np

import stochmix as sm
from stochmix import algorithms, mixing, participation, problems


def _timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def node_activation(n: int, d: int, rounds: int, kind: str, method_name: str = "") -> dict:
    graph = nx.random_regular_graph(4, n, seed=1)
    sequence = mixing.StaticSequence(graph)
    if kind == "quadratic":  # diagonal Hessians: cheap gradients show the engine's overhead
        problem = problems.Quadratic.random(n, d, seed=1)
    else:
        problem = problems.LeastSquares.random(n, d, rows_per_client=5, seed=1)
    cls = getattr(algorithms, method_name or "GradientTracking")
    method = cls(0.01, sequence, check_mixing=False)
    out: dict = {}
    for name, process in (
        ("full", participation.Full(n)),
        ("bernoulli_0.1", participation.Bernoulli(0.1, n_clients=n)),
    ):
        sm.run(method, problem, process, 2, progress=False, metrics=())  # warm-up
        seconds, result = _timed(
            lambda process=process: sm.run(method, problem, process, rounds, progress=False,
                                           metrics=())
        )  # fmt: skip
        # an iteration: the median of the run's own round times past its first iterations
        # (the first starts every tracker; the next few are planned in full and checked)
        steps = np.diff(result.wall_time)[SETTLED:]
        out[name] = {"iteration": float(np.median(steps)), "whole_run": seconds / rounds}
    out["ratio"] = out["bernoulli_0.1"]["iteration"] / out["full"]["iteration"]
    out["whole_run_ratio"] = out["bernoulli_0.1"]["whole_run"] / out["full"]["whole_run"]
    return out


#: iterations left out of the per-iteration median (see node_activation)
SETTLED = 5


def gossip(n: int, d: int, ticks: int) -> dict:
    graph = nx.random_regular_graph(4, n, seed=2)
    sequence = mixing.StaticSequence(graph)
    # curvature 1e-300: x - 1.0 * 1e-300 * x is x to the last bit, so a tick averages
    problem = problems.Quadratic(np.zeros((n, d)), np.full((n, d), 1e-300))
    x0 = np.random.default_rng(0).standard_normal((n, d))
    method = algorithms.DGD(1.0, sequence, form="cta")
    process = participation.RandomEdge(graph)
    run = lambda: sm.run(  # noqa: E731
        method, problem, process, ticks, x0=x0, seed=3, progress=False,
        metrics=("consensus",),
    )  # fmt: skip
    engine_seconds, result = _timed(run)

    def by_hand():
        x = x0.copy()
        records = process.activations(3)
        for _ in range(ticks):
            i, j = next(records).nodes
            x[[i, j]] = 0.5 * (x[i] + x[j])
        return x

    hand_seconds, x = _timed(by_hand)
    assert np.allclose(result.server[-1], x.mean(axis=0), rtol=1e-10, atol=1e-12)
    return {
        "engine_us_per_tick": 1e6 * engine_seconds / ticks,
        "hand_loop_us_per_tick": 1e6 * hand_seconds / ticks,
        "ratio": engine_seconds / hand_seconds,
        "million_ticks_seconds": engine_seconds / ticks * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^4, fewer ticks")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    n = 10_000 if args.quick else 100_000
    rounds = 20 if args.quick else 40
    node = {kind: node_activation(n, 10, rounds, kind) for kind in ("quadratic", "least_squares")}
    # pushes under the same activation: W's columns at the active nodes, scattered by one
    # compiled pass on the NumPy backend (no target set)
    pushes = {
        name: node_activation(n, 10, rounds, "quadratic", name)
        for name in ("PushSum", "PushDIGing")
    }
    ticks = gossip(10_000, 10, 100_000 if args.quick else 1_000_000)
    print(f"node-activated gradient tracking, n = {n}, d = 10, {rounds} iterations (s/iteration)")
    for kind, found in node.items():
        full, some = found["full"], found["bernoulli_0.1"]
        print(f"  {kind}: Full(n) {full['iteration']:.4f}   Bernoulli(0.1) "
              f"{some['iteration']:.4f}   ratio {found['ratio']:.2f} (target <= 0.2); whole "
              f"runs {full['whole_run']:.4f} / {some['whole_run']:.4f}, "
              f"{found['whole_run_ratio']:.2f}")  # fmt: skip
    print(f"node-activated pushes, diagonal quadratic, n = {n} (s/iteration)")
    for name, found in pushes.items():
        full, some = found["full"], found["bernoulli_0.1"]
        print(f"  {name}: Full(n) {full['iteration']:.4f}   Bernoulli(0.1) "
              f"{some['iteration']:.4f}   ratio {found['ratio']:.2f}")  # fmt: skip
    print("randomized gossip, n = 10000, d = 10 (us/tick)")
    print(f"  stochmix.run {ticks['engine_us_per_tick']:.1f}   hand loop "
          f"{ticks['hand_loop_us_per_tick']:.1f}   ratio {ticks['ratio']:.2f}; "
          f"a million ticks: {ticks['million_ticks_seconds']:.1f} s (target < 5 s)")  # fmt: skip
    results = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average": os.getloadavg(),
        "n_node_activation": n,
        "iterations_node_activation": rounds,
        "node_activation": node,
        "push_activation": pushes,
        "gossip": ticks,
    }
    path = os.path.join(os.path.dirname(__file__), "results-activation.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
