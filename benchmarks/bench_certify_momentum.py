"""Certificates of momentum and acceleration with and without the constraints across rounds
(issue 44): heavy ball and Nesterov's method against the slowest quadratic (exact), PEPit's
worst cases (when installed) and Nesterov's textbook bound sqrt(1 - 1/sqrt(kappa)).
``pepit_lyapunov``: PEPit's one-round worst case of the certificate's own Lyapunov function,
sqrt(max V_1 / V_0) over the class: equal to the certified rate when the certificate is
sound (then it holds at every horizon).

L = 1. Prints the table and writes ``benchmarks/results-certify-momentum.json``. Run:
``.venv/bin/python benchmarks/bench_certify_momentum.py`` (about a minute with PEPit).

``--long [SOLVER [KAPPA [N,N,...]]]``: Nesterov's worst cases at longer horizons against
its certificate (docs/guide/certificates.md, "Momentum and acceleration against PEPit"),
written to ``results-certify-momentum-long-<solver>.json``; by default Clarabel, kappa 25
and 100, N = 16, 24, 32 (about a minute). ``--long SCS 25 40,48`` solves the horizons
Clarabel cannot (15-40 minutes a solve).
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
    pep_lyapunov,
    pep_worst,
    quadratic_worst,
)

from stochmix.algorithms import FedAvg  # noqa: E402
from stochmix.analysis.certificates import certify  # noqa: E402
from stochmix.analysis.certificates.system import round_system  # noqa: E402

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
    lifted = found  # the certificate with constraints across rounds
    out["slowest_quadratic"] = quadratic_worst(a, b, mu, 1.0, nesterov=kind == "nesterov")
    out["textbook"] = float(np.sqrt(1 - 1 / np.sqrt(kappa))) if kind == "nesterov" else None
    out["pepit_root_16"] = out["pepit_window_12_16"] = out["pepit_lyapunov"] = None
    try:
        import PEPit  # noqa: F401
    except ImportError:
        return out
    if lifted.certified:  # PEPit's one-round worst case of the certificate's V_1 / V_0, rooted
        system = round_system(make(), np.ones((1, 1), bool), 1).normalized(1.0).reduced()
        values = lifted.multipliers["function_values"]
        decrease, _ = pep_lyapunov(system, lifted.lyapunov[0], values[0], mu)
        out["pepit_lyapunov"] = float(np.sqrt(decrease))
    if kappa <= 100:
        r12, r16 = (pep_worst(kind, mu, n, a, b) for n in (12, 16))
        out["pepit_root_16"], out["pepit_window_12_16"] = r16 ** (1 / 32), (r16 / r12) ** (1 / 8)
    return out


def long_horizon(kappa: float, horizons: list[int], solver: str) -> dict:
    """PEPit's Nesterov worst case W_N at longer horizons, with the certificate's ratio
    W_N / rho^(2N) (bounded if the certificate holds) and the window estimates between
    consecutive horizons. ``solver``: "CLARABEL" (accurate up to N = 32 here; it stops on
    numerical errors beyond) or "SCS" (eps 1e-11: 15-40 minutes a solve at N = 40-48)."""
    mu, b = 1.0 / kappa, momentum(kappa)
    rate = certify(Nesterov(1.0, b), L=1.0, mu=mu).rate
    options = {"solver": solver}
    if solver == "SCS":
        options.update(eps=1e-11, max_iters=200000)
    worst, seconds = {}, {}
    for n in horizons:
        start = time.perf_counter()
        worst[n] = pep_worst("nesterov", mu, n, 1.0, b, **options)
        seconds[n] = time.perf_counter() - start
        print(f"kappa {kappa:g}, N = {n}: W_N = {worst[n]:.6e} ({seconds[n]:.0f} s)", flush=True)
    ns = sorted(worst)
    return {
        "kappa": kappa,
        "solver": solver,
        "certified": rate,
        "worst": {str(n): worst[n] for n in ns},
        "seconds": {str(n): seconds[n] for n in ns},
        "ratio": {str(n): worst[n] / rate ** (2 * n) for n in ns},
        "windows": {
            f"{a}-{c}": (worst[c] / worst[a]) ** (1 / (2 * (c - a)))
            for a, c in zip(ns, ns[1:], strict=False)
        },
    }


def main() -> None:
    if "--long" in sys.argv:  # --long [SOLVER [KAPPA [N,N,...]]]
        rest = sys.argv[sys.argv.index("--long") + 1 :]
        solver = rest[0] if rest else "CLARABEL"
        kappas = [float(rest[1])] if len(rest) > 1 else [25.0, 100.0]
        horizons = [int(n) for n in rest[2].split(",")] if len(rest) > 2 else [16, 24, 32]
        found = [long_horizon(k, horizons, solver) for k in kappas]
        name = f"results-certify-momentum-long-{solver.lower()}.json"
        path = os.path.join(os.path.dirname(__file__), name)
        with open(path, "w") as handle:
            json.dump(found, handle, indent=1)
        print(f"wrote {path}")
        return
    rows = [row(*case) for case in CASES]
    cols = ["one_round", "across_rounds", "slowest_quadratic", "pepit_root_16"]
    cols += [
        "pepit_window_12_16",
        "pepit_lyapunov",
        "textbook",
        "one_round_seconds",
        "across_rounds_seconds",
    ]
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
