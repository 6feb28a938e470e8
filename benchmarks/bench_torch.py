"""The Torch backend on the CPU against the NumPy backend (issue #13), side by side.

Two sections, every configuration timed on each backend in turn within one process, the
whole set repeated (``--reps``, default 3) so that load on a shared machine hits both:

* ``federated``: FedAvg (K = 3) and FOCUS (K = 3) on a diagonal quadratic, uniform
  sampling of 10% of the clients, N = 10^4, 10^5, 10^6 and d = 10, 100, 1000 (skipping
  combinations whose memory would pass about 4 GB);
* ``decentralized``: DGD (Erdos-Renyi graphs, a new one every round) and
  GradientTracking (one-peer exponential graphs, period log2 n) on every node, n = 100,
  1000, 10^4 and d = 10, 100; Torch with sparse mixing and, up to n = 1000, dense. Up to
  n = 1000, also GradientTracking on the complete graph (Metropolis weights 1/n): a
  dense W, what dense mixing is for (on the sparse graphs a dense product does O(n^2 d)
  work where the sparse one does O(nnz d): 500x more at n = 1000 on the one-peer graph).
  Beside each dense row, the dense products alone (``torch.mm`` timed by itself, one per
  mixed block): the least dense mixing can cost, against NumPy's whole iteration.

Backends: NumPy with default arguments (``compiled="auto"``), NumPy with
``compiled=False`` (the NumPy programs), and ``backend="torch"`` on the CPU with its
default threads (one intra-op thread, see ``TorchBackend``); every run with
``metrics=("distance",)``. A run's round time is the median over its rounds but the
first (which plans and compiles) of ``Result.wall_time``'s increments; the figure
reported is the median over the repetitions. Each Torch run is checked against the NumPy
run's final server model (relative 1e-9).

``--device cuda`` runs the Torch side on a GPU (``benchmarks/device_check.sh`` does, with
``--quick``): the federated sizes keep d = 10 and 100, and dense mixing is timed up to
n = 10^4, where an (n, n) float64 matrix is 0.8 GB of device memory.

Run: ``python benchmarks/bench_torch.py [--quick] [--reps R] [--device DEV] [--json PATH]``
(default ``benchmarks/results-torch.json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import stochmix as sm

MEMORY_LIMIT = 4e9  # bytes a configuration may take (state, data, copies)


def log(*args):
    print(*args, flush=True)


def round_time(result) -> float:
    steps = np.diff(result.wall_time)[1:]
    return float(np.median(steps))


def backends(torch_options: dict):
    from stochmix.engine.backends import TorchBackend

    return {
        "numpy": lambda: {},
        "numpy-uncompiled": lambda: {"compiled": False},
        **{
            f"torch-{name}": (lambda o=o: {"backend": TorchBackend(**o)})
            for name, o in torch_options.items()
        },
    }


def measure(configs, reps: int, rounds: int) -> list[dict]:
    """``configs``: (row fields, run(kwargs) -> Result, {label: kwargs factory})."""
    rows = []
    for fields, call, kinds in configs:
        times = {label: [] for label in kinds}
        for _ in range(reps):
            reference = None
            for label, options in kinds.items():
                gc.collect()
                result = call(rounds, **options())
                times[label].append(round_time(result))
                final = result.server[-1]
                if reference is None:
                    reference = final
                else:
                    scale = 1e-9 * (1 + np.abs(reference).max())
                    assert np.abs(final - reference).max() <= scale, (fields, label)
        row = dict(fields)
        row["seconds_per_round"] = {k: float(np.median(v)) for k, v in times.items()}
        row["all_seconds_per_round"] = times
        base = row["seconds_per_round"]
        row["ratio_to_numpy"] = {
            k: v / base["numpy"] for k, v in base.items() if k.startswith("torch")
        }
        row["ratio_to_numpy_uncompiled"] = {
            k: v / base["numpy-uncompiled"] for k, v in base.items() if k.startswith("torch")
        }
        rows.append(row)
        shown = "  ".join(f"{k}={v * 1e3:8.2f}ms" for k, v in base.items())
        ratios = "  ".join(
            f"{k}: {row['ratio_to_numpy'][k]:.2f}x / {row['ratio_to_numpy_uncompiled'][k]:.2f}x"
            for k in row["ratio_to_numpy"]
        )
        log(f"{fields}  {shown}  | {ratios}")
    return rows


def federated(quick: bool, reps: int, rounds: int, device: str = "cpu") -> list[dict]:
    sizes = [10**4, 10**5] if quick and device == "cpu" else [10**4, 10**5, 10**6]
    dims = [10, 100] if quick or device != "cpu" else [10, 100, 1000]
    configs = []
    for n in sizes:
        for d in dims:
            # FOCUS's three blocks on two backends, the problem's data and its Torch copy
            need = 8 * 8 * n * d
            if need > MEMORY_LIMIT:
                log(f"skip N={n} d={d}: about {need / 1e9:.1f} GB")
                continue
            problem = sm.problems.Quadratic.random(n, d, seed=0)
            process = sm.participation.UniformSample(n, n // 10)
            for name, method in (
                ("FedAvg", sm.algorithms.FedAvg(0.5 / problem.smoothness, 3)),
                ("FOCUS", sm.algorithms.FOCUS(0.5 / (n * problem.smoothness), 3)),
            ):

                def call(rounds, method=method, problem=problem, process=process, **kw):
                    return sm.run(
                        method, problem, process, rounds, seed=1, metrics=("distance",), **kw
                    )

                fields = {"method": name, "N": n, "d": d, "participants": n // 10}
                configs.append((fields, call, backends({device: {"device": device}})))
    return measure(configs, reps, rounds)


def decentralized(quick: bool, reps: int, rounds: int, device: str = "cpu") -> list[dict]:
    import networkx as nx

    from stochmix.mixing import OnePeerExponential, RandomSequence, StaticSequence

    sizes = [100, 1000] if quick and device == "cpu" else [100, 1000, 10**4]
    dense_up_to = 1000 if device == "cpu" else 10**4
    configs = []
    for n in sizes:
        for d in (10, 100):
            problem = sm.problems.Quadratic.random(n, d, seed=0)
            lr = 0.2 / problem.smoothness
            methods = [
                ("DGD", sm.algorithms.DGD(lr, RandomSequence(n, "erdos_renyi", seed=2))),
                (
                    "GradientTracking",
                    sm.algorithms.GradientTracking(lr, OnePeerExponential(n), rule="natural"),
                ),
            ]
            if n <= 1000:
                complete = StaticSequence(nx.complete_graph(n))
                methods.append(
                    (
                        "GradientTracking, complete graph",
                        sm.algorithms.GradientTracking(lr, complete),
                    )
                )
            for name, method in methods:

                def call(rounds, method=method, problem=problem, n=n, **kw):
                    everyone = sm.participation.Full(n)
                    return sm.run(method, problem, everyone, rounds, metrics=("distance",), **kw)

                options = {"sparse": {"mixing": "sparse", "device": device}}
                if n <= dense_up_to:  # dense (n x n) products: O(n^2 d) a block
                    options["dense"] = {"mixing": "dense", "device": device}
                fields = {"method": name, "n": n, "d": d}
                configs.append((fields, call, backends(options)))
    rows = measure(configs, reps, rounds)
    for row in rows:
        if "torch-dense" in row["seconds_per_round"]:
            # DGD mixes x, gradient tracking x and y: one or two (n, n) @ (n, d) products
            products = 1 if row["method"] == "DGD" else 2
            alone = products * dense_product_time(row["n"], row["d"], device=device)
            row["dense_products_alone"] = alone
            row["dense_products_alone_to_numpy"] = alone / row["seconds_per_round"]["numpy"]
            log(
                f"  {row['method']} n={row['n']} d={row['d']}: its {products} dense products "
                f"alone {alone * 1e3:.2f} ms, {row['dense_products_alone_to_numpy']:.2f}x NumPy's "
                "whole iteration"
            )
    return rows


def dense_product_time(n: int, d: int, repeats: int = 50, device: str = "cpu") -> float:
    """Seconds for one dense (n, n) @ (n, d) float64 product in Torch on ``device`` (on
    the CPU with the threads the Torch backend set), the median of ``repeats``: the least
    a dense mixing step can cost, whatever the engine around it."""
    import torch

    w = torch.rand(n, n, dtype=torch.float64, device=device)
    x = torch.rand(n, d, dtype=torch.float64, device=device)
    out = torch.empty(n, d, dtype=torch.float64, device=device)
    synchronize = torch.cuda.synchronize if w.is_cuda else (lambda: None)
    torch.mm(w, x, out=out)
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(w, x, out=out)
        synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--only", choices=("federated", "decentralized"))
    parser.add_argument("--device", default="cpu", help="the Torch side's device (cuda, ...)")
    parser.add_argument("--json", default=str(Path(__file__).with_name("results-torch.json")))
    args = parser.parse_args(argv)
    import torch

    start = time.perf_counter()
    out = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cores_allowed": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
            "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "stochmix": sm.__version__,
            "device": args.device,
            "device_name": (
                torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None
            ),
        },
        "rounds_per_run": args.rounds,
        "repetitions": args.reps,
    }
    if args.only in (None, "federated"):
        log("== federated (ratios: torch / numpy default, torch / numpy compiled=False)")
        out["federated"] = federated(args.quick, args.reps, args.rounds, args.device)
    if args.only in (None, "decentralized"):
        log("== decentralized")
        out["decentralized"] = decentralized(args.quick, args.reps, args.rounds, args.device)
    out["torch_threads"] = torch.get_num_threads()
    out["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    out["seconds"] = time.perf_counter() - start
    log(f"done in {out['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
