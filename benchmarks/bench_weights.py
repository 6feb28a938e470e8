"""Methods weighted by 1/p_i (issue 42, per-client arrays bound by rule): what a round of
FedStale, FedVARP, MIFA, FedAvg with unbiased weights and FedAU cost against FedAvg's (uniform
weights), under a uniform sample (every p_i equal) and under Bernoulli participation with
p_i spread from half to one and a half times their mean (the setting of arbitrary
participation).

Diagonal quadratic, d = 10, K = 3 local steps, every argument of :func:`stochmix.run` at
its default but ``progress=False`` and ``metrics=("distance",)``; the median seconds of a
round past the first two of a run of ``--rounds`` rounds, after a warm-up run. Two sizes:
N = 10^5 with about 10^3 participants a round (planning weighs), N = 10^6 with about 10^5
(the work weighs; ``--quick`` skips it).

Prints a table and writes ``benchmarks/results-weights.json``. Run:
``.venv/bin/python benchmarks/bench_weights.py [--quick]`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np

import stochmix as sm
from stochmix.algorithms import MIFA, FedAvg, FedStale, FedVARP

METHODS = {
    "FedAvg": lambda lr: FedAvg(lr, 3),
    "FedAvg unbiased": lambda lr: FedAvg(lr, 3, weights="unbiased"),
    "FedAU": lambda lr: FedAvg(lr, 3, weights="fedau"),
    "FedStale": lambda lr: FedStale(lr, 3, beta=0.5),
    "FedVARP": lambda lr: FedVARP(lr, 3),
    "MIFA": lambda lr: MIFA(lr, 3),
}


def processes(n: int, cohort: int) -> dict:
    mean = cohort / n
    return {
        "uniform sample": sm.participation.UniformSample(n, cohort),
        "Bernoulli, p_i spread": sm.participation.Bernoulli(
            np.linspace(0.5 * mean, 1.5 * mean, n), n
        ),
    }


def round_seconds(method, problem, process, rounds: int) -> float:
    options = {"seed": 1, "progress": False}
    sm.run(method(), problem, process, 3, **options)  # warm-up (programs, caches)
    result = sm.run(method(), problem, process, rounds, metrics=("distance",), **options)
    return float(np.median(np.diff(result.wall_time)[2:]))


def measure(n: int, cohort: int, rounds: int) -> dict:
    problem = sm.problems.Quadratic.random(n, 10, seed=0)
    lr = 0.1 / problem.smoothness
    out: dict = {}
    for kind, process in processes(n, cohort).items():
        found = {
            name: round_seconds(lambda make=make: make(lr), problem, process, rounds)
            for name, make in METHODS.items()
        }
        others = [name for name in METHODS if name != "FedAvg"]
        found.update({f"{name} / FedAvg": found[name] / found["FedAvg"] for name in others})
        out[kind] = found
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^5 only")
    parser.add_argument("--rounds", type=int, default=40)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--json", default=os.path.join(here, "results-weights.json"))
    args = parser.parse_args()
    sizes = [(10**5, 10**3)] if args.quick else [(10**5, 10**3), (10**6, 10**5)]
    results: dict = {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "stochmix": sm.__version__,
        "load average before": os.getloadavg()[0],
    }
    for n, cohort in sizes:
        found = measure(n, cohort, args.rounds)
        results[f"N={n}, |S|~{cohort}"] = found
        for kind, times in found.items():
            print(f"N = {n:>8}, |S| ~ {cohort:>6}, {kind}:")
            for name in METHODS:
                ratio = "" if name == "FedAvg" else f"  ({times[f'{name} / FedAvg']:.2f}x FedAvg)"
                print(f"    {name:<16} {1e3 * times[name]:8.3f} ms a round{ratio}")
    results["load average after"] = os.getloadavg()[0]
    before, after = results["load average before"], results["load average after"]
    print(f"load average {before:.2f} -> {after:.2f}")
    with open(args.json, "w") as handle:
        json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
