"""Decentralized methods: the engine against a hand-written SciPy loop (issue 13).

For gradient tracking (DIGing) and DGD, on

* the one-peer exponential graph (time-varying, periodic with period ceil(log2 n)), mixing
  ``rule="natural"`` (1/2 on the self-loop and 1/2 on the one edge: doubly stochastic), and
* a random geometric graph in the unit square (static; radius for an average degree of
  about 10, components chained so that it is connected), ``rule="metropolis"``,

at n = 10^4 and 10^5 nodes and d = 10 and 100, it times one iteration of

* the engine: ``stochmix.run(method, problem, Full(n), rounds, metrics=(),
  progress=False)`` with every other argument at its default (the NumPy backend,
  ``compiled="auto"``); it records the network average every round (``Result.server``)
  and checks it for NaN/Inf, as every run does; and
* a hand-written loop of the same recursion: SciPy CSR products with the same matrices
  (built once per period before timing) and the same gradient function
  (``problem.gradients(arange(n), x)``), recording nothing.

Per-iteration times are medians over every timed iteration of ``--repeats`` alternating
runs of each (engine rounds after the first period, where a periodic sequence has built
its matrices and the engine its plans; the hand loop's matrices are built before it
starts). Both end at the same network average (checked to 1e-8 relative). The script
prints a table and writes ``benchmarks/results-decentralized.json``.

Run: ``.venv/bin/python benchmarks/bench_decentralized.py`` (about 2-3 minutes; ``--quick``
for n = 10^4 only). Only the public API is used, plus a small ``GraphSequence`` subclass for
the geometric graph (its ``_structure`` hook gives the edges as a sparse pattern, so 10^5
nodes never go through networkx).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from functools import partial
from pathlib import Path

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

import stochmix as sm
from stochmix.algorithms import DGD, GradientTracking
from stochmix.mixing import GraphSequence, OnePeerExponential

LR = 0.05
OUT = Path(__file__).with_name("results-decentralized.json")


class GeometricGraph(GraphSequence):
    """A static random geometric graph on n points in the unit square: an edge between
    points closer than ``radius`` (by default the radius for an average degree of about
    ``degree``), plus one edge between consecutive components (in a random order) when the
    draw is disconnected."""

    period = 1

    def __init__(
        self, n_nodes: int, degree: float = 10.0, seed: int = 0, radius: float | None = None
    ):
        rng = np.random.default_rng(seed)
        self._n = n_nodes
        self.radius = math.sqrt(degree / (math.pi * n_nodes)) if radius is None else radius
        points = rng.random((n_nodes, 2))
        pairs = cKDTree(points).query_pairs(self.radius, output_type="ndarray")
        src, dst = pairs[:, 0], pairs[:, 1]
        pattern = sp.csr_array((np.ones(src.size), (src, dst)), shape=(n_nodes, n_nodes))
        count, labels = connected_components(pattern, directed=False)
        if count > 1:
            _, first = np.unique(labels, return_index=True)
            chain = first[rng.permutation(count)]
            src = np.concatenate([src, chain[:-1]])
            dst = np.concatenate([dst, chain[1:]])
        both = np.concatenate([src, dst]), np.concatenate([dst, src])
        self._pattern = sp.csr_array((np.ones(2 * src.size), both[::-1]), shape=(n_nodes,) * 2)
        self._pattern.sum_duplicates()
        self._pattern.data[:] = 1.0
        self.components = count

    @property
    def n_nodes(self) -> int:
        return self._n

    def graph(self, k: int) -> nx.DiGraph:
        return nx.freeze(nx.from_scipy_sparse_array(self._pattern.T, create_using=nx.DiGraph))

    def _structure(self, k: int) -> sp.csr_array:
        return self._pattern.copy()


def hand_gradient_tracking(problem, mats, rounds, lr, clock):
    """DIGing with SciPy: x+ = W x - lr y; y+ = W y + G(x+) - G(x); y0 = G(x0)."""
    n = problem.n_clients
    idx = np.arange(n)
    x = np.zeros((n, problem.dim))
    g = problem.gradients(idx, x)
    y = g.copy()
    clock()
    for k in range(rounds):
        w = mats[k % len(mats)]
        x_new = w @ x - lr * y
        g_new = problem.gradients(idx, x_new)
        y = w @ y + g_new - g
        x, g = x_new, g_new
        clock()
    return x.mean(axis=0)


def hand_dgd(problem, mats, rounds, lr, clock):
    """DGD with SciPy: x+ = W (x - lr G(x))."""
    n = problem.n_clients
    idx = np.arange(n)
    x = np.zeros((n, problem.dim))
    clock()
    for k in range(rounds):
        w = mats[k % len(mats)]
        x = w @ (x - lr * problem.gradients(idx, x))
        clock()
    return x.mean(axis=0)


class Clock:
    """Called once before the first iteration and once after each: keeps the wall and CPU
    seconds of every iteration."""

    def __init__(self):
        self.marks = []

    def __call__(self, *_):
        self.marks.append((time.perf_counter(), time.process_time()))

    def times(self, skip: int) -> tuple[list, list]:
        """(wall, cpu) seconds of each iteration after the first ``skip``."""
        marks = np.array(self.marks)
        steps = np.diff(marks, axis=0)[skip:]
        return steps[:, 0].tolist(), steps[:, 1].tolist()


METHODS = {
    "gradient tracking": (GradientTracking, hand_gradient_tracking),
    "DGD": (DGD, hand_dgd),
}


def case(problem, graphs, rule, label, method_name, repeats):
    """Time one (graph, n, d, method) case; returns a dict of results."""
    n = problem.n_clients
    period = graphs.period
    rounds = (period if period > 1 else 0) + (10 if n * problem.dim <= 10**6 else 6)
    warm = period if period > 1 else 1  # engine rounds not timed: the first period
    mats = [sp.csr_array(graphs.matrix(k, rule)) for k in range(period)]
    cls, hand = METHODS[method_name]
    times = {"engine": ([], []), "hand": ([], [])}
    for _ in range(repeats):
        method = cls(LR, graphs, rule=rule)
        clock = Clock()
        clock()  # the engine's first round starts here (set-up included in round 0)
        result = sm.run(
            method,
            problem,
            sm.participation.Full(n),
            rounds,
            metrics=(),
            progress=False,
            callback=clock,
        )
        for kept, new in zip(times["engine"], clock.times(warm), strict=True):
            kept += new
        clock = Clock()
        ours = hand(problem, mats, rounds, LR, clock)
        for kept, new in zip(times["hand"], clock.times(1), strict=True):
            kept += new
    scale = max(1.0, float(np.abs(ours).max()))
    agree = float(np.abs(result.server[-1] - ours).max()) / scale
    if agree > 1e-8:
        raise AssertionError(f"{label} {method_name}: engine and hand loop differ by {agree:g}")
    (e_wall, e_cpu), (h_wall, h_cpu) = (
        [float(np.median(t)) for t in times[who]] for who in ("engine", "hand")
    )
    return {
        "graph": label,
        "rule": rule,
        "method": method_name,
        "n": n,
        "d": problem.dim,
        "rounds": rounds,
        "timed_engine_rounds": len(times["engine"][0]),
        "engine_cpu_ms": 1e3 * e_cpu,
        "hand_cpu_ms": 1e3 * h_cpu,
        "ratio_cpu": e_cpu / h_cpu,
        "engine_wall_ms": 1e3 * e_wall,
        "hand_wall_ms": 1e3 * h_wall,
        "ratio_wall": e_wall / h_wall,
        "max_relative_difference": agree,
    }


# ============================================================ --whole-run (issue 24)

WHOLE_OUT = Path(__file__).with_name("results-decentralized-whole-run.json")
ROWS_PER_NODE = 5  # least squares with 5 rows a node
HESSIAN_BUDGET = 4e9  # bytes of precomputed Hessians the hand loop may hold
RADIUS = 0.03  # the geometric graph's radius at n = 10^4 (see whole_run_graphs)


def whole_run_graphs(n: int, scale_radius: bool = True) -> dict:
    """Factories of the two graph sequences at n nodes, with their rule: the one-peer
    exponential graph (``rule="natural"``, doubly stochastic; it is directed, so the
    methods' default ``"metropolis"`` does not apply) and a random geometric graph
    (``rule="metropolis"``, the methods' default). A fresh sequence per timed run, so that
    every run builds its own mixing matrices (a sequence caches them). The geometric
    graph's radius is :data:`RADIUS` at n = 10^4; with ``scale_radius`` (the default),
    ``RADIUS * sqrt(10^4 / n)`` at other n, the same expected degree (about 28)."""
    radius = RADIUS * math.sqrt(1e4 / n) if scale_radius else RADIUS
    return {
        "one-peer exponential": (lambda: OnePeerExponential(n), "natural"),
        "random geometric": (lambda: GeometricGraph(n, radius=radius), "metropolis"),
    }


def hessian_gradient(problem):
    """``x -> einsum('nij,nj->ni', H, x) - c`` with every node's Hessian H_i = A_i^T A_i
    and c_i = A_i^T b_i precomputed (``LeastSquares.hessians_and_linear_terms``), or None
    when the Hessians would exceed :data:`HESSIAN_BUDGET` bytes."""
    n, d = problem.n_clients, problem.dim
    if n * d * d * 8 > HESSIAN_BUDGET:
        return None
    hess, lin = problem.hessians_and_linear_terms()
    return lambda x: np.einsum("nij,nj->ni", hess, x) - lin


def problem_gradient(problem):
    """``x -> problem.gradients(arange(n), x)``: the problem's own gradient (for least
    squares with 5 rows a node and d >= 5, the padded rows A_i^T (A_i x - b_i), as the
    engine computes it)."""
    every = np.arange(problem.n_clients)
    return lambda x: problem.gradients(every, x)


def hand_loop(method_name, graphs, rule, gradient, n, d, iters, lr):
    """The loop a researcher writes, W_k from ``graphs.matrix(k, rule, copy=False)`` (built
    once per distinct matrix, inside the timing) and ``gradient`` as given: gradient
    tracking (DIGing) ``x = W @ x - lr * y; g_new = G(x); y = W @ y + g_new - g`` with
    ``y0 = g0 = G(x0)``, or DGD (adapt then combine) ``x = W @ (x - lr * G(x))``; x0 = 0.
    Returns (network average, seconds building the matrices)."""
    began = time.perf_counter()
    period = graphs.period or iters
    mats = [graphs.matrix(k, rule, copy=False) for k in range(min(period, iters))]
    built = time.perf_counter() - began
    x = np.zeros((n, d))
    if method_name == "gradient tracking":
        g = gradient(x)
        y = g.copy()
        for k in range(iters):
            w = mats[k % period]
            x = w @ x - lr * y
            g_new = gradient(x)
            y = w @ y + g_new - g
            g = g_new
    else:
        for k in range(iters):
            x = mats[k % period] @ (x - lr * gradient(x))
    return x.mean(axis=0), built


def whole_run_case(problem, graphs_of, method_name, iters, repeats, baselines):
    """Whole-run wall and CPU seconds of the engine and of each hand loop (``baselines``:
    name -> gradient function), alternating (engine first on even repeats, last on odd);
    medians. Every run starts from a fresh graph sequence (made outside the timing)."""
    n, d = problem.n_clients, problem.dim
    make, rule = graphs_of
    lr = 0.2 / problem.smoothness
    cls = METHODS[method_name][0]
    times = {"engine": []} | {name: [] for name in baselines}
    built = {name: [] for name in baselines}
    finals = {}

    def engine():
        graphs = make()
        wall, cpu = time.perf_counter(), time.process_time()
        result = sm.run(
            cls(lr, graphs, rule=rule),
            problem,
            sm.participation.Full(n),
            iters,
            metrics=(),
            progress=False,
        )
        times["engine"].append((time.perf_counter() - wall, time.process_time() - cpu))
        if result.server.shape[0] != iters + 1:
            raise AssertionError(f"{method_name} stopped after {result.server.shape[0] - 1}")
        finals["engine"] = result.server[-1]

    def hand(name):
        graphs = make()
        wall, cpu = time.perf_counter(), time.process_time()
        final, seconds = hand_loop(method_name, graphs, rule, baselines[name], n, d, iters, lr)
        times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
        built[name].append(seconds)
        finals[name] = final

    for rep in range(repeats):
        order = [engine] + [partial(hand, name) for name in baselines]
        for step in order if rep % 2 == 0 else order[::-1]:
            step()
    scale = max(1.0, float(np.abs(finals["engine"]).max()))
    agree = max(float(np.abs(finals["engine"] - finals[k]).max()) for k in baselines) / scale
    if not agree <= 1e-8:
        raise AssertionError(f"{method_name}: engine and hand loop differ by {agree:g}")
    median = {k: np.median(np.array(v), axis=0) for k, v in times.items()}
    row = {
        "method": method_name,
        "rule": rule,
        "n": n,
        "d": d,
        "iterations": iters,
        "repeats": repeats,
        "lr": lr,
        "engine_s": float(median["engine"][0]),
        "engine_cpu_s": float(median["engine"][1]),
        "max_relative_difference": agree,
        "baselines": {},
    }
    for name in baselines:
        row["baselines"][name] = {
            "hand_s": float(median[name][0]),
            "hand_cpu_s": float(median[name][1]),
            "hand_matrices_s": float(np.median(built[name])),
            "ratio": float(median["engine"][0] / median[name][0]),
            "ratio_cpu": float(median["engine"][1] / median[name][1]),
            "ratio_matrices_prebuilt": float(
                median["engine"][0] / (median[name][0] - np.median(built[name]))
            ),
            "all_engine_s": [t[0] for t in times["engine"]],
            "all_hand_s": [t[0] for t in times[name]],
        }
    return row


def whole_run(args) -> None:
    """The --whole-run section (see :func:`whole_run_main`)."""
    rows, skipped = [], []
    began = time.perf_counter()
    print(
        f"{'graph':<22}{'method':<19}{'n':>7}{'d':>5}{'iters':>6}  {'hand gradient':<24}"
        f"{'engine s':>10}{'hand s':>10}{'ratio':>7}{'cpu ratio':>10}{'W-prebuilt':>11}",
        flush=True,
    )
    for n in args.sizes:
        graphs = whole_run_graphs(n, not args.fixed_radius)
        for d in args.dims:
            problem = sm.problems.LeastSquares.random(n, d, ROWS_PER_NODE, seed=0)
            baselines = {}
            hessian = hessian_gradient(problem)
            if hessian is not None:
                baselines["hessians"] = hessian
            else:
                skipped.append(
                    f"n={n}, d={d}: Hessians of {n * d * d * 8 / 1e9:.0f} GB exceed "
                    f"{HESSIAN_BUDGET / 1e9:.0f} GB; the hand loop uses problem.gradients"
                )
            if hessian is None or (args.both and d > 2 * ROWS_PER_NODE):
                baselines["problem.gradients"] = problem_gradient(problem)
            for label, graphs_of in graphs.items():
                if label not in args.graphs:
                    continue
                for iters in args.iters:
                    for method_name in args.methods:
                        work = n * d * iters
                        repeats = args.repeats if work <= args.repeat_work else 1
                        row = whole_run_case(
                            problem, graphs_of, method_name, iters, repeats, baselines
                        )
                        row["graph"] = label
                        if label == "random geometric":
                            probe = graphs_of[0]()
                            row["radius"] = probe.radius
                            row["edges"] = int(probe._pattern.nnz // 2)
                        rows.append(row)
                        for name, b in row["baselines"].items():
                            print(
                                f"{label:<22}{method_name:<19}{n:>7}{d:>5}{iters:>6}  "
                                f"{name:<24}{row['engine_s']:>10.3f}{b['hand_s']:>10.3f}"
                                f"{b['ratio']:>7.2f}{b['ratio_cpu']:>10.2f}"
                                f"{b['ratio_matrices_prebuilt']:>11.2f}",
                                flush=True,
                            )
            del baselines, hessian
    for line in skipped:
        print("note:", line)
    load = os.getloadavg()
    print(
        f"{time.perf_counter() - began:.0f} s in all; load average {load[0]:.1f} / "
        f"{load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} cores"
    )
    args.json.write_text(
        json.dumps(
            {
                "what": "whole-run wall seconds (planning, matrices and checks included) of "
                "stochmix.run(method, problem, Full(n), iterations, metrics=(), "
                "progress=False) with default arguments (rule='natural' on the directed "
                "one-peer exponential graph), against a hand-written loop of the same "
                "recursion; ratio = engine / hand (hand: W_k built inside the timing with "
                "graphs.matrix, Hessians precomputed outside it); ratio_matrices_prebuilt "
                "takes the hand loop's matrix building out as well",
                "hand_gradients": {
                    "hessians": "np.einsum('nij,nj->ni', H, x) - c with H_i = A_i^T A_i and "
                    "c_i = A_i^T b_i precomputed (LeastSquares.hessians_and_linear_terms)",
                    "problem.gradients": "problem.gradients(arange(n), x), the problem's "
                    "own gradient (A_i^T (A_i x - b_i) from the padded rows), where the "
                    "Hessians exceed 4 GB (or with --both, where they cost more flops)",
                },
                "problem": f"LeastSquares.random(n, d, {ROWS_PER_NODE}, seed=0), "
                "lr = 0.2 / smoothness",
                "skipped": skipped,
                "machine": platform.platform(),
                "python": platform.python_version(),
                "numpy": np.__version__,
                "stochmix": sm.__version__,
                "commit": args.commit,
                "cases": rows,
                "load_average": list(load),
                "cores": os.cpu_count(),
                "seconds": time.perf_counter() - began,
            },
            indent=2,
        )
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^4 only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    whole = parser.add_argument_group("--whole-run (issue 24)")
    whole.add_argument(
        "--whole-run",
        action="store_true",
        help="whole-run time of stochmix.run against the hand loop with precomputed "
        "Hessians, least squares with 5 rows a node",
    )
    whole.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5])
    whole.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    whole.add_argument("--iters", type=int, nargs="+", default=[60, 1000])
    whole.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    whole.add_argument(
        "--graphs",
        nargs="+",
        default=["one-peer exponential", "random geometric"],
        choices=["one-peer exponential", "random geometric"],
    )
    whole.add_argument(
        "--repeat-work",
        type=float,
        default=2e8,
        help="repeat only cases with n * d * iterations at most this (others run once)",
    )
    whole.add_argument(
        "--both",
        action="store_true",
        help="also time the hand loop with problem.gradients where d > 2 x rows a node "
        "(there the Hessians cost more flops than the problem's own gradient)",
    )
    whole.add_argument(
        "--fixed-radius",
        action="store_true",
        help=f"the geometric graph's radius {RADIUS} at every n (default: scaled to keep "
        "the expected degree of n = 10^4)",
    )
    whole.add_argument("--commit", default="", help="recorded in the JSON")
    args = parser.parse_args()
    if args.whole_run:
        args.json = args.json or WHOLE_OUT
        whole_run(args)
        return
    args.json = args.json or OUT
    sizes = [10**4] if args.quick else [10**4, 10**5]
    rows = []
    began = time.perf_counter()
    print(
        f"{'graph':<22}{'method':<19}{'n':>7}{'d':>5}"
        f"{'engine cpu':>12}{'hand cpu':>10}{'ratio':>7}"
        f"{'engine wall':>13}{'hand wall':>11}{'ratio':>7}   (ms per iteration)"
    )
    for n in sizes:
        graphs = {
            "one-peer exponential": (OnePeerExponential(n), "natural"),
            "random geometric": (GeometricGraph(n), "metropolis"),
        }
        for d in (10, 100):
            problem = sm.problems.Quadratic.random(n, d, seed=0)
            for label, (sequence, rule) in graphs.items():
                for method_name in METHODS:
                    row = case(problem, sequence, rule, label, method_name, args.repeats)
                    rows.append(row)
                    print(
                        f"{label:<22}{method_name:<19}{n:>7}{d:>5}"
                        f"{row['engine_cpu_ms']:>12.3f}{row['hand_cpu_ms']:>10.3f}"
                        f"{row['ratio_cpu']:>7.2f}{row['engine_wall_ms']:>13.3f}"
                        f"{row['hand_wall_ms']:>11.3f}{row['ratio_wall']:>7.2f}",
                        flush=True,
                    )
    worst_cpu = max(r["ratio_cpu"] for r in rows)
    worst_wall = max(r["ratio_wall"] for r in rows)
    print(
        f"worst ratio: {worst_cpu:.2f} CPU time, {worst_wall:.2f} wall time (target 1.3); "
        f"{time.perf_counter() - began:.0f} s in all; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    args.json.write_text(
        json.dumps(
            {
                "what": "per-iteration medians (CPU and wall seconds), stochmix.run "
                "(metrics=(), progress=False) vs a hand-written SciPy loop",
                "machine": platform.platform(),
                "python": platform.python_version(),
                "numpy": np.__version__,
                "stochmix": sm.__version__,
                "cases": rows,
                "worst_ratio_cpu": worst_cpu,
                "worst_ratio_wall": worst_wall,
                "load_average": os.getloadavg()[0],
                "cores": os.cpu_count(),
                "seconds": time.perf_counter() - began,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
