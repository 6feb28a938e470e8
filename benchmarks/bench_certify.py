"""Rate certificates (issue 30): what a certificate costs, and how tight it is.

* **speed**: seconds of one whole certificate (every SDP of the rho-bisection, tolerance
  1e-7) for EXTRA, NIDS, gradient tracking and exact diffusion over the sigma-class
  (sigma = 0.5; the SDP does not grow with n; target < 2 s), over one matrix at n = 20
  (the ring with Metropolis weights, split by W's eigenvalues; target < 30 s) and over
  rings of 6 and 10 nodes as one whole-network SDP (a multiplier per node: what a directed
  W, a period of several matrices or a participation pattern needs), and over a ring then
  a star and a directed non-circulant W at n = 10, 14, 20 without a shift symmetry (the
  structured interior-point SDP and its root search on the rate; issue 44: target < 30 s
  at n = 20);
* **soundness and tightness**: for each method and setting, the certified rate, the rate of
  the slowest quadratic a search finds (its exact rate by the library's operators; over the
  sigma-class symmetric, non-symmetric and periodic matrices, and the symmetric-only search
  for comparison), and the gap between them;
* **independent soundness**: the suite's search with per-node recursions of the papers on
  objectives and matrices written with NumPy alone (rotated and kinked quadratics,
  log-sum-exp, Huber; static rotations, time-varying and alternating matrices of the
  sigma-class) at 6 nodes: the slowest measured rate against the certificate.

Every figure from one process on this machine, L = 1, mu = 0.1. Prints the tables (the
README's "Certified rates" section quotes them) and writes
``benchmarks/results-certify.json``. Run: ``.venv/bin/python benchmarks/bench_certify.py
[--quick]`` (about four minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import networkx as nx
import numpy as np

from stochmix.algorithms import EXTRA, NIDS, SCAFFOLD, ExactDiffusion, FedAvg, GradientTracking
from stochmix.analysis.certificates import certify, worst_quadratic
from stochmix.mixing import PeriodicSequence, StaticSequence

L, MU = 1.0, 0.1


def _decentralized(graphs):
    return [
        ("EXTRA", EXTRA(0.5, graphs)),
        ("NIDS", NIDS(0.8, graphs)),
        ("gradient tracking (DIGing)", GradientTracking(0.1, graphs)),
        ("exact diffusion", ExactDiffusion(0.5, graphs)),
    ]


def speed(quick: bool) -> list[dict]:
    rows = []
    ring6 = StaticSequence(nx.cycle_graph(6))
    ring20 = StaticSequence(nx.cycle_graph(20))
    for name, method in _decentralized(ring6):
        found = certify(method, L=L, mu=MU, mixing=0.5)
        rows.append(_speed_row(name, "sigma-class, sigma 0.5", found))
    for name, method in _decentralized(ring20):
        found = certify(method, L=L, mu=MU)
        rows.append(_speed_row(name, "ring n = 20, by eigenvalues", found))
    for n in (6, 10):  # the whole-network SDP: n^2 unknowns; n = 14 took 70 s a solve
        everyone = np.ones((1, n), dtype=bool)
        name, method = _decentralized(StaticSequence(nx.cycle_graph(n)))[0]
        found = certify(method, L=L, mu=MU, participation=everyone)
        rows.append(_speed_row(name, f"ring n = {n}, whole network", found))
    for n in (10,) if quick else (10, 14, 20):  # no shift symmetry: the structured SDP
        pattern = PeriodicSequence([nx.cycle_graph(n), nx.star_graph(n - 1)])
        cases = [
            ("EXTRA (lr 0.4)", EXTRA(0.4, pattern), {}),  # the floor is not tight
            ("gradient tracking (lr 0.05)", GradientTracking(0.05, pattern), {}),
            (
                "gradient tracking (lr 0.05), directed W",
                GradientTracking(0.05, StaticSequence(nx.cycle_graph(n))),
                {"mixing": _directed(n)},
            ),
        ]
        for name, method, options in cases:
            found = certify(method, L=L, mu=MU, **options)
            setting = "W = (I + C + S) / 3" if options else "ring then star"
            rows.append(_speed_row(name, f"{setting}, n = {n}, whole network", found))
    return rows


def _directed(n, seed=3):
    """A doubly stochastic, strongly connected, non-circulant W = (I + C + S) / 3: C a
    random n-cycle, S a random permutation (tests/analysis/test_certificates_structured.py)."""
    rng = np.random.default_rng(seed)
    cycle = rng.permutation(n)
    c = np.zeros((n, n))
    c[cycle, np.roll(cycle, 1)] = 1.0
    return (np.eye(n) + c + np.eye(n)[rng.permutation(n)]) / 3


def _speed_row(name, setting, found) -> dict:
    return {
        "method": name,
        "setting": setting,
        "rate": found.rate,
        "status": found.status,
        "solves": found.solves,
        "seconds": found.seconds,
        "state": found.state_size,
    }


def tightness(quick: bool) -> list[dict]:
    ring = StaticSequence(nx.cycle_graph(6))
    cases = [
        ("gradient descent, step 1/L", FedAvg(1.0, 1), {"n_clients": 1}),
        (
            "FedAvg K = 1, 3 clients, server step 1.5",
            FedAvg(0.5, 1, server_lr=1.5),
            {"n_clients": 3},
        ),
        ("SCAFFOLD K = 3, 3 clients", SCAFFOLD(0.3, 3), {"n_clients": 3}),
    ]
    for name, method in _decentralized(ring):
        cases.append((name + ", ring of 6", method, {}))
        cases.append((name + ", sigma 0.5", method, {"mixing": 0.5}))
    rows = []
    for name, method, options in cases:
        found = certify(method, L=L, mu=MU, **options)
        trials = 40 if quick else 150
        worst = worst_quadratic(method, L=L, mu=MU, trials=trials, seed=0, **options)
        row = {
            "method": name,
            "certified": found.rate,
            "status": found.status,
            "worst_found": worst.rate,
            "gap": found.rate - worst.rate,
            "worst_kind": "one matrix" if worst.mixing is None else _kind(worst.mixing),
            "worst_symmetric": float("nan"),
        }
        if "mixing" in options:  # the earlier search: symmetric static matrices only
            old = worst_quadratic(
                method, L=L, mu=MU, trials=trials, seed=0, matrices="symmetric", refine=0,
                **options,
            )  # fmt: skip
            row["worst_symmetric"] = old.rate
        rows.append(row)
    return rows


def _kind(mixing) -> str:
    if mixing.ndim == 3:
        return f"periodic, {mixing.shape[0]} matrices"
    return "static, symmetric" if np.allclose(mixing, mixing.T) else "static, non-symmetric"


def soundness(quick: bool) -> list[dict]:
    """The suite's independent soundness search (tests/analysis/test_certificate_soundness.py:
    per-node recursions of the papers on objectives and sigma-class matrices written with
    NumPy alone, the rate measured there too) at a larger size: 6 nodes, 3 draws of every
    objective family and matrix kind per method (1 in ``--quick``)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.analysis import test_certificate_soundness as suite

    stacked = lambda values: np.concatenate(values)  # noqa: E731  (every node's model)
    suite.decentralized._mean = stacked
    suite.decentralized_zoo._mean = stacked
    rows = []
    for name, (method, reference) in suite.DECENTRALIZED.items():
        found = certify(method, L=suite.L, mu=suite.MU, mixing=suite.SIGMA)
        rng = np.random.default_rng(11)
        n, worst, where, runs = 6, 0.0, "", 0
        for family, build in suite.FAMILIES.items():
            for kind in ("static rotation", "time-varying", "alternating"):
                for _ in range(1 if quick else 3):
                    problem = build(n, rng)
                    nodes = reference(
                        problem, suite._matrices(n, rng, kind), suite._rounds(found.rate),
                        rng.standard_normal(2),
                    )  # fmt: skip
                    errors = np.linalg.norm(nodes - np.tile(problem.x_star, n), axis=1)
                    rate = suite.measured_rate(errors)
                    runs += 1
                    if rate > worst:
                        worst, where = rate, f"{family}, {kind}"
        rows.append(
            {
                "method": name,
                "certified": found.rate,
                "worst_measured": worst,
                "margin": found.rate - worst,
                "slowest": where,
                "runs": runs,
                "sound": bool(worst <= found.rate + 1e-6),
            }
        )
    return rows


def _table(rows, columns) -> str:
    head = "| " + " | ".join(c for c, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = [
        "| " + " | ".join(format(r[k], f) if f else str(r[k]) for _, (k, f) in columns) + " |"
        for r in rows
    ]
    return "\n".join([head, rule, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    fast = speed(args.quick)
    print(
        _table(
            fast,
            [
                ("method", ("method", "")),
                ("setting", ("setting", "")),
                ("rate", ("rate", ".6f")),
                ("SDP solves", ("solves", "d")),
                ("seconds", ("seconds", ".2f")),
            ],
        )
    )
    print()
    tight = tightness(args.quick)
    print(
        _table(
            tight,
            [
                ("method", ("method", "")),
                ("certified rate", ("certified", ".6f")),
                ("slowest found", ("worst_found", ".6f")),
                ("gap", ("gap", ".1e")),
                ("slowest instance", ("worst_kind", "")),
                ("symmetric W only", ("worst_symmetric", ".6f")),
            ],
        )
    )
    sound = soundness(args.quick)
    print()
    print(
        _table(
            sound,
            [
                ("method (sigma 0.5, L = 1, mu = 0.2)", ("method", "")),
                ("certified", ("certified", ".6f")),
                ("slowest measured", ("worst_measured", ".6f")),
                ("margin", ("margin", ".1e")),
                ("slowest instance", ("slowest", "")),
                ("runs", ("runs", "d")),
            ],
        )
    )
    record = {
        "machine": {
            "platform": platform.platform(),
            "cores_allowed": len(os.sched_getaffinity(0)),
            "load_average_at_start": os.getloadavg(),
        },
        "quick": args.quick,
        "L": L,
        "mu": MU,
        "speed": fast,
        "tightness": tight,
        "soundness": sound,
        "seconds": time.perf_counter() - start,
    }
    if not args.quick:
        path = os.path.join(os.path.dirname(__file__), "results-certify.json")
        with open(path, "w") as handle:
            json.dump(record, handle, indent=1)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
