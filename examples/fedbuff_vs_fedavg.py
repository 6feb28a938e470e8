"""FedBuff against synchronous FedAvg in virtual time, with heavy-tailed clients
==============================================================================

FedBuff against synchronous FedAvg in virtual time, with heavy-tailed clients.

Each client's local step takes a Pareto-distributed time (shape 1.5: infinite variance,
a few clients are very slow) plus an exponential upload latency
(:class:`~stochmix.timing.TimeModel`). Synchronous FedAvg samples C clients a round and
waits for the slowest of them; FedBuff keeps C clients training at once and applies
every M = C / 4 arrivals, each weighted by its staleness (1 + tau)^(-1/2). Both run
with a :class:`~stochmix.timing.Clock` over the same time model, on one quadratic problem
with mildly heterogeneous clients, and are compared against the simulated seconds they
take (``Result.plot(x="time")``): the virtual time to a target relative error, and the
speed-up factor FedBuff gets (Nguyen et al., AISTATS 2022, report it on learning tasks).

Run: python examples/fedbuff_vs_fedavg.py  (writes fedbuff_vs_fedavg.png)
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import stochmix as sm  # noqa: E402
from stochmix.algorithms import FedAvg, FedBuff  # noqa: E402
from stochmix.participation import Full, UniformSample  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402
from stochmix.timing import Clock, Exponential, Pareto, TimeModel  # noqa: E402

#: Full size, and the ``--quick`` size the tests and the docs build run.
FULL = {"n": 1000, "concurrency": 100, "seconds": 3000.0, "target": 1e-2}
QUICK = {"n": 200, "concurrency": 40, "seconds": 1500.0, "target": 1e-2}

X0 = np.ones(10)  # the start, far from the minimiser next to the clients' spread
TIME_MODEL = TimeModel(compute=Pareto(1.5, 1.0), upload=Exponential(1.0))


def runs(n, concurrency, seconds):
    """FedAvg and FedBuff, each run for about ``seconds`` of simulated time."""
    problem = Quadratic.random(n, 10, heterogeneity=0.05, seed=0)
    lr = 0.2 / problem.smoothness
    clock = Clock(TIME_MODEL)
    # rounds to cover the time: a synchronous round waits for its slowest client
    probe = sm.run(FedAvg(lr, 5), problem, UniformSample(n, concurrency), 20, clock=clock,
                   seed=1, progress=False, metrics=())  # fmt: skip
    sync_rounds = int(seconds / (probe.time[-1] / 20)) + 1
    fedavg = sm.run(FedAvg(lr, 5), problem, UniformSample(n, concurrency), sync_rounds,
                    clock=clock, seed=1, x0=X0, progress=False)  # fmt: skip
    buffer = concurrency // 4
    method = FedBuff(lr, 5, server_lr=1.0, buffer=buffer, concurrency=concurrency)
    probe = sm.run(method, problem, Full(n), 50, clock=clock, seed=1, progress=False, metrics=())
    fedbuff = sm.run(method, problem, Full(n), int(seconds / (probe.time[-1] / 50)) + 1,
                     clock=clock, seed=1, x0=X0, progress=False)  # fmt: skip
    return {"FedAvg": fedavg, "FedBuff": fedbuff}


def time_to(result, target):
    """The simulated seconds at which the relative error first reaches ``target``."""
    error = result.relative_error
    hit = np.flatnonzero(error <= target)
    return float(result.time[hit[0]]) if hit.size else np.inf


def main(n=FULL["n"], concurrency=FULL["concurrency"], seconds=FULL["seconds"],
         target=FULL["target"], out="fedbuff_vs_fedavg.png"):  # fmt: skip
    """Run, print the table and save the figure; returns ``{name: seconds to target}``."""
    results = runs(n, concurrency, seconds)
    table = {name: time_to(result, target) for name, result in results.items()}
    print(f"{'method':>8} {'rounds':>7} {'seconds to ' + format(target, 'g'):>16}")
    for name, result in results.items():
        print(f"{name:>8} {result.rounds:>7} {table[name]:>16.1f}")
    print(f"FedBuff reaches {target:g} {table['FedAvg'] / table['FedBuff']:.2f}x sooner")
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, result in results.items():
        ax.semilogy(result.time, result.relative_error, label=name)
    ax.axhline(target, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("relative error")
    ax.set_title(f"{n} clients, {concurrency} training at once, Pareto(1.5) step times")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return table


if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else FULL))
