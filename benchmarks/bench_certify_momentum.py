"""Certificates of momentum and acceleration with and without the constraints across rounds
(issue 44): heavy ball and Nesterov's method against the slowest quadratic (exact), PEPit's
worst cases (when installed) and Nesterov's textbook bound sqrt(1 - 1/sqrt(kappa)).

L = 1. Prints the table of docs/guide/certificates.md ("Momentum and acceleration") and
writes ``benchmarks/results-certify-momentum.json``. Run: ``.venv/bin/python
benchmarks/bench_certify_momentum.py`` (about a minute with PEPit).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "analysis"))
from test_certificates_across_rounds import (  # noqa: E402
    Nesterov,
    heavy_ball,
    momentum,
    pep_worst,
    quadratic_worst,
)

from stochmix.algorithms import FedAvg  # noqa: E402
from stochmix.analysis.certificates import certify  # noqa: E402

CASES = [
    ("gradient descent 1/L", 10, "gd", 1.0, 0.0),
    ("heavy ball 0.5/L, 0.5", 10, "hb", 0.5, 0.5),
    ("heavy ball 1/L, 0.3", 10, "hb", 1.0, 0.3),
    *[("Nesterov", k, "nesterov", 1.0, momentum(k)) for k in (10, 25, 100, 1000)],
]


def row(name, kappa, kind, a, b) -> dict:
    mu = 1.0 / kappa
    if kind == "nesterov":
        make, options = (lambda: Nesterov(a, b)), {}
    else:
        make = (lambda: FedAvg(a, 1)) if kind == "gd" else (lambda: heavy_ball(a, b))
        options = {"n_clients": 1}
    out = {"method": name, "kappa": kappa}
    for key, across in (("one_round", False), ("across_rounds", True)):
        start = time.perf_counter()
        found = certify(make(), L=1.0, mu=mu, across_rounds=across, **options)
        out[key] = found.rate if found.certified else None
        out[key + "_seconds"] = time.perf_counter() - start
        out[key + "_solves"] = found.solves
    out["slowest_quadratic"] = quadratic_worst(a, b, mu, 1.0, nesterov=kind == "nesterov")
    out["textbook"] = float(np.sqrt(1 - 1 / np.sqrt(kappa))) if kind == "nesterov" else None
    out["pepit_root_16"] = out["pepit_window_12_16"] = None
    try:
        import PEPit  # noqa: F401
    except ImportError:
        return out
    if kappa <= 100:
        r12, r16 = (pep_worst(kind, mu, n, a, b) for n in (12, 16))
        out["pepit_root_16"], out["pepit_window_12_16"] = r16 ** (1 / 32), (r16 / r12) ** (1 / 8)
    return out


def main() -> None:
    rows = [row(*case) for case in CASES]
    cols = ["one_round", "across_rounds", "slowest_quadratic", "pepit_root_16"]
    cols += ["pepit_window_12_16", "textbook", "one_round_seconds", "across_rounds_seconds"]
    print("| method | kappa | " + " | ".join(cols) + " |")
    for r in rows:
        cells = ["" if r[c] is None else f"{r[c]:.6f}" for c in cols]
        print(f"| {r['method']} | {r['kappa']} | " + " | ".join(cells) + " |")
    path = os.path.join(os.path.dirname(__file__), "results-certify-momentum.json")
    with open(path, "w") as handle:
        json.dump({"L": 1.0, "rows": rows}, handle, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
