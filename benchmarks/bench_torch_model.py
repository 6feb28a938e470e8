"""A TorchModel on the default NumPy backend against the Torch backend (issue #24), side by side.

The configuration of the issue: a 64-32-10 MLP (tanh, float64) on scikit-learn's digits
(standardized, every sample), split iid over 20 clients, trained by FedAvg (K = 5, full
client gradients) for 30 rounds of Bernoulli(0.5) participation with the default metrics
(objective and gradient norm: a pass over every client each round). Each repetition runs
the default backend and then ``backend="torch"`` in one process (after an untimed
two-round run of each, which pays Torch's first calls), each run started from
Torch's own thread count for this process (set back before every run, so that neither
run inherits a count another one left). The figure per backend is the median over the
repetitions of the whole ``run`` call (wall clock); the two final models are checked to
agree (relative 1e-9).

Run: ``python benchmarks/bench_torch_model.py [--reps R] [--rounds T] [--clients N]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

import stochmix as sm
from stochmix.algorithms import FedAvg
from stochmix.participation import Bernoulli
from stochmix.problems import TorchModel, iid_partition, load_dataset


def build(n_clients: int, hidden: int = 32, seed: int = 0) -> TorchModel:
    data = load_dataset("digits")
    torch.manual_seed(seed)
    module = torch.nn.Sequential(
        torch.nn.Linear(data.dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, data.n_classes)
    ).double()
    parts = iid_partition(data.n_samples, n_clients, seed=seed)
    return TorchModel.from_partition(module, data.features, data.labels, parts, reg=1e-4)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    problem = build(args.clients)
    method = FedAvg(lr=0.5, local_steps=5)
    participation = Bernoulli(0.5, args.clients)
    x0 = problem.initial_point()
    own = torch.get_num_threads()  # Torch's count for this process
    print(
        f"TorchModel {problem.dim} parameters, {args.clients} clients, {args.rounds} rounds, "
        f"FedAvg K=5, Bernoulli(0.5); torch {torch.__version__}, its threads here {own}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    for backend in ("numpy", "torch"):  # untimed: Torch's and the engine's first calls
        torch.set_num_threads(own)
        sm.run(method, problem, participation, 2, x0=x0, backend=backend, progress=False)
    times: dict[str, list[float]] = {"numpy": [], "torch": []}
    inside: dict[str, int] = {}
    for rep in range(args.reps):
        finals = {}
        for backend in times:
            torch.set_num_threads(own)
            seen = []
            start = time.perf_counter()
            result = sm.run(
                method, problem, participation, args.rounds, x0=x0, seed=rep, backend=backend,
                progress=False,
                callback=lambda r, z, ctx, seen=seen: seen.append(torch.get_num_threads()),
            )  # fmt: skip
            times[backend].append(time.perf_counter() - start)
            inside[backend] = seen[-1]
            finals[backend] = result.server[-1]
            print(f"  rep {rep} {backend:>5}: {times[backend][-1]:7.2f} s", flush=True)
        gap = np.abs(finals["numpy"] - finals["torch"]).max() / np.abs(finals["numpy"]).max()
        assert gap < 1e-9, gap
    medians = {k: float(np.median(v)) for k, v in times.items()}
    after = torch.get_num_threads()
    print(
        f"medians: numpy {medians['numpy']:.2f} s, torch {medians['torch']:.2f} s, "
        f"ratio {medians['numpy'] / medians['torch']:.2f}x; Torch threads inside the runs "
        f"{inside}, after them {after} (set to {own} before each)"
    )
    out = {
        "config": vars(args) | {"dim": problem.dim, "torch_threads_default": own},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": times,
        "medians": medians,
        "ratio": medians["numpy"] / medians["torch"],
        "threads_inside_run": inside,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
