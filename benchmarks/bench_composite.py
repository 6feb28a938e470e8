"""Composite problems (issue 29): what the proximal and primal-dual methods cost.

Two measurements, each side by side in one process, every argument of
:func:`stochmix.run` at its default but ``progress=False`` and ``metrics=("distance",)``:

* **decentralized, against the loop a researcher writes**: PG-EXTRA and decentralized
  ADMM (exact solves) on a LASSO / least-squares problem over n = 10^4 nodes (``--quick``:
  2,000), d = 10, on a random 4-regular graph: seconds per iteration of ``stochmix.run``
  against a hand-written ``scipy.sparse`` loop of the same recursion (the same gradients,
  through the problem's vectorized ``gradients``, the same prox and solves); the issue's
  target is a ratio <= 1.5;
* **federated**: FedMid and FedDualAvg on a LASSO and on a diagonal quadratic with the
  same L1 term over N = 10^6 clients (``--quick``: 10^5), d = 10, |S| = 10^5 (10^4)
  sampled uniformly, K = 3 local steps, against FedAvg's round on the same smooth
  problem; the target is a ratio <= 1.5 (aim 1.2).

Prints a table and writes ``benchmarks/results-composite.json``. Run:
``.venv/bin/python benchmarks/bench_composite.py [--quick]`` (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import networkx as nx
import numpy as np
import scipy.sparse as sp

import stochmix as sm
from stochmix.algorithms import PGEXTRA, DecentralizedADMM, FedAvg, FedDualAvg, FedMid
from stochmix.problems import L1, Composite, LeastSquares, Quadratic


def _per_round(result) -> float:
    return float(np.diff(result.wall_time)[2:].mean())


def pg_extra_loop(problem, w, x0, lr, rounds):
    """PG-EXTRA as a researcher writes it with scipy.sparse: seconds per iteration."""
    n = w.shape[0]
    everyone = np.arange(n)
    tilde = 0.5 * (w + sp.eye_array(n, format="csr"))
    reg = problem.regularizer
    x = x0.copy()
    g = problem.smooth.gradients(everyone, x)
    half = w @ x - lr * g
    x_prev, x = x, reg.prox(half, lr)
    start = time.perf_counter()
    for _ in range(rounds):
        g_new = problem.smooth.gradients(everyone, x)
        half = w @ x + half - tilde @ x_prev - lr * (g_new - g)
        x_prev, g = x, g_new
        x = reg.prox(half, lr)
        np.linalg.norm(x.mean(axis=0) - problem.x_star)  # the metric stochmix records
    return (time.perf_counter() - start) / rounds


def admm_loop(problem, adjacency, x0, lr, rounds):
    """Decentralized ADMM with exact solves, written with scipy.sparse, the local systems
    inverted once (as a careful researcher does) and one batched product an iteration:
    seconds per iteration."""
    c = 1.0 / lr
    degrees = np.asarray(adjacency.sum(axis=1)).ravel()
    gather = c * (sp.diags_array(degrees.astype(float)) + adjacency)
    laplacian = c * (sp.diags_array(degrees.astype(float)) - adjacency)
    hess, lin = problem.hessians_and_linear_terms()
    inverse = np.linalg.inv(hess + (2 * c * degrees)[:, None, None] * np.eye(hess.shape[-1]))
    x, alpha = x0.copy(), np.zeros_like(x0)
    start = time.perf_counter()
    for _ in range(rounds):
        u = gather @ x - alpha
        x = np.einsum("kij,kj->ki", inverse, lin + u)
        alpha = alpha + laplacian @ x
        np.linalg.norm(x.mean(axis=0) - problem.x_star)
    return (time.perf_counter() - start) / rounds


def decentralized(n: int, rounds: int) -> dict:
    smooth = LeastSquares.random(n, 10, rows_per_client=10, support=4, seed=0)
    problem = Composite(smooth, L1(1.0))
    graph = nx.random_regular_graph(4, n, seed=0)
    graphs = sm.mixing.StaticSequence(graph)
    w = graphs.matrix(0, "metropolis")
    adjacency = sp.csr_array(nx.to_scipy_sparse_array(graph, nodelist=range(n), dtype=float))
    x0 = np.zeros((n, 10))
    lr = 0.5 / smooth.smoothness
    full = sm.participation.Full(n)
    options = {"progress": False, "metrics": ("distance",)}
    out = {}
    sm.run(PGEXTRA(lr, graphs), problem, full, 3, **options)  # warm-up
    result = sm.run(PGEXTRA(lr, graphs), problem, full, rounds, **options)
    out["PG-EXTRA stochmix"] = _per_round(result)
    out["PG-EXTRA loop"] = pg_extra_loop(problem, w, x0, lr, rounds)
    out["PG-EXTRA ratio"] = out["PG-EXTRA stochmix"] / out["PG-EXTRA loop"]
    smooth.hessians_and_linear_terms()  # computed once per problem in both
    sm.run(DecentralizedADMM(1.0, graphs), smooth, full, 3, **options)
    result = sm.run(DecentralizedADMM(1.0, graphs), smooth, full, rounds, **options)
    out["ADMM stochmix"] = _per_round(result)
    out["ADMM loop"] = admm_loop(smooth, adjacency, x0, 1.0, rounds)
    out["ADMM ratio"] = out["ADMM stochmix"] / out["ADMM loop"]
    return out


def federated(n: int, cohort: int, rounds: int) -> dict:
    """FedMid and FedDualAvg against FedAvg's round, on a LASSO (least squares, 4 rows a
    client) and on a diagonal quadratic with the same L1 term (cheap gradients: what a
    round costs besides them shows)."""
    out = {}
    for label, smooth in (
        ("lasso", LeastSquares.random(n, 10, rows_per_client=4, support=4, seed=0)),
        ("quadratic", Quadratic.random(n, 10, seed=0)),
    ):
        problem = Composite(smooth, L1(1.0))
        process = sm.participation.UniformSample(n, cohort)
        lr = 0.1 / smooth.smoothness
        options = {"seed": 1, "progress": False}
        for name, method, data in (
            ("FedAvg", FedAvg(lr, 3), smooth),
            ("FedMid", FedMid(lr, 3), problem),
            ("FedDualAvg", FedDualAvg(lr, 3), problem),
        ):
            sm.run(method, data, process, 3, **options)  # warm-up
            result = sm.run(method, data, process, rounds, **options, metrics=("distance",))
            out[f"{name} {label}"] = _per_round(result)
        for name in ("FedMid", "FedDualAvg"):
            out[f"{name} {label} ratio"] = out[f"{name} {label}"] / out[f"FedAvg {label}"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_dec = 2_000 if args.quick else 10_000
    n_fed = 10**5 if args.quick else 10**6
    results = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "quick": args.quick,
        "decentralized": decentralized(n_dec, 30 if args.quick else 60),
        "federated": federated(n_fed, n_fed // 10, 10 if args.quick else 20),
    }
    d, f = results["decentralized"], results["federated"]
    print(f"decentralized, n = {n_dec}, d = 10 (ms per iteration)")
    for method in ("PG-EXTRA", "ADMM"):
        ours, loop = 1e3 * d[method + " stochmix"], 1e3 * d[method + " loop"]
        ratio = d[method + " ratio"]
        print(f"  {method:>8}: stochmix {ours:.2f}, scipy loop {loop:.2f}, ratio {ratio:.2f}")
    print(f"federated, N = {n_fed}, |S| = {n_fed // 10}, K = 3 (ms per round)")
    for label in ("lasso", "quadratic"):
        for method in ("FedMid", "FedDualAvg"):
            key, base = f"{method} {label}", f["FedAvg " + label]
            print(f"  {key:>20}: {1e3 * f[key]:.1f} against FedAvg {1e3 * base:.1f}, "
                  f"ratio {f[key + ' ratio']:.2f} (target <= 1.5)")  # fmt: skip
    results["load average"] = os.getloadavg()
    path = os.path.join(os.path.dirname(__file__), "results-composite.json")
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
