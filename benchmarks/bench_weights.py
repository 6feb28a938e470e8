"""Methods weighted by 1/p_i (issue 42, per-client arrays bound by rule): what a round of
FedStale, FedVARP, MIFA, FedAvg with unbiased weights and FedAU cost against FedAvg's (uniform
weights), under a uniform sample (every p_i equal) and under Bernoulli participation with
p_i spread from half to one and a half times their mean (the setting of arbitrary
participation).

Diagonal quadratic, d = 10, K = 3 local steps, every argument of :func:`stochmix.run` at
its default but ``progress=False`` and ``metrics=("distance",)``; the median seconds of a
round past the first two of a run of ``--rounds`` rounds, after a warm-up run. Two sizes:
N = 10^5 with about 10^3 participants a round (planning weighs), N = 10^6 with about 10^5
(the work weighs; ``--quick`` skips it). ``--uneven``: K_i uniform on 1..5 in every
round instead of K = 3 (``results-weights-uneven.json``).

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
from stochmix.algorithms import MIFA, FedAvg, FedStale, FedVARP, RandomSteps


def methods(steps) -> dict:
    """The methods with local ``steps`` (made anew for each run: a rule of uneven steps
    is given as a function)."""
    k = steps if isinstance(steps, int) else None

    def local():
        return k if k is not None else steps()

    return {
        "FedAvg": lambda lr: FedAvg(lr, local()),
        "FedAvg unbiased": lambda lr: FedAvg(lr, local(), weights="unbiased"),
        "FedAU": lambda lr: FedAvg(lr, local(), weights="fedau"),
        "FedStale": lambda lr: FedStale(lr, local(), beta=0.5),
        "FedVARP": lambda lr: FedVARP(lr, local()),
        "MIFA": lambda lr: MIFA(lr, local()),
    }


METHODS = methods(3)


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


def measure(n: int, cohort: int, rounds: int, made: dict = METHODS) -> dict:
    problem = sm.problems.Quadratic.random(n, 10, seed=0)
    lr = 0.1 / problem.smoothness
    out: dict = {}
    for kind, process in processes(n, cohort).items():
        found = {
            name: round_seconds(lambda make=make: make(lr), problem, process, rounds)
            for name, make in made.items()
        }
        others = [name for name in made if name != "FedAvg"]
        found.update({f"{name} / FedAvg": found[name] / found["FedAvg"] for name in others})
        out[kind] = found
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^5 only")
    parser.add_argument("--rounds", type=int, default=40)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--uneven", action="store_true", help="K_i uniform on 1..5 a round")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    name = "results-weights-uneven.json" if args.uneven else "results-weights.json"
    args.json = args.json or os.path.join(here, name)
    made = methods(lambda: RandomSteps.uniform(1, 5)) if args.uneven else METHODS
    sizes = [(10**5, 10**3)] if args.quick else [(10**5, 10**3), (10**6, 10**5)]
    results: dict = {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "stochmix": sm.__version__,
        "load average before": os.getloadavg()[0],
    }
    for n, cohort in sizes:
        found = measure(n, cohort, args.rounds, made)
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
