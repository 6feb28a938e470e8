"""The compiled row-wise path at scale: a round's rate, draw included.

FedAvg (lr 0.01) and FOCUS (lr 1/(N L), as the README's FOCUS runs; K = 3) on a diagonal
quadratic with N = 10^6 clients, d = 10, and |S| = 10^5 participants drawn uniformly
without replacement, on the compiled path (``compiled=True``, ``metrics=()``). Side by
side in one process, rounds interleaved:

* ``legacy draws``: today's participation stream (``draws="legacy"``: an O(N) shuffle);
* ``default``: the O(|S| log |S|) draws;
* ``blocked B``: the default draws with the row-wise loop in blocks of B nodes (gather or
  prefetch a block's rows, then compute), instead of node after node with prefetching
  ahead (see ``stochmix.engine.codegen.rowwise.BLOCK``).

With ``--baseline PATH`` (a checkout of an earlier stochmix, e.g. ``git worktree add
/tmp/before <commit>``), the same FedAvg and FOCUS runs (default draws) of that code and of
this checkout are timed by one script in fresh subprocesses between this process's
repeats, so "today's rate" is measured beside the current one rather than quoted (the
checkout's own package is loaded, not the installed one). A round's time is the median of
a run's round times but the first (``Result.wall_time``): set-up and planning probes are
not a round's.

The same run measures the **floor** of a round on this machine: drawing the participants
alone (``UniformSample.participants``, the draws a run makes) plus reading every row the
round must read and nothing else (``baselines.read_floor``: a Numba loop on two threads,
prefetching as the compiled loop does; FedAvg reads h_i and z_i, FOCUS also its kept
block g_i). No round can be faster, so ``baseline / floor`` is the largest rate gain this
machine allows.

Then a table by local steps K (``--steps``, default 1 3 5 8): the compiled loop as it runs,
the same loop written one loop per step (``rowwise.LOWERED = False``, as before the
schedule was lowered), the same loop with the gradient kernel's calls left to LLVM (as before 24
November), and the NumPy programs.

Usage: ``python benchmarks/bench_rowwise.py [--rounds 20] [--repeats 3] [--baseline PATH]
[--steps K ...]``;
writes ``benchmarks/results-rowwise.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
from baselines import read_floor
from harness import draw_seconds

import stochmix as sm
from stochmix.engine.codegen import cache as programs
from stochmix.engine.codegen import rowwise

HERE = Path(__file__).resolve().parent


def floor_time(name: str, problem, participation, rounds: int, seed: int) -> float:
    """Seconds per round of the draw alone plus the read floor of the rows the round
    reads (see the module's docstring)."""
    n, d = problem.n_clients, problem.dim
    arrays = [problem.hessians, problem.centers]
    if name == "FOCUS":  # its kept block g: one (N, d) array of the state
        arrays.append(np.ones((n, d)))
    stream = participation.participants(seed)
    runs = [[next(stream) for _ in range(rounds)] for _ in range(3)]
    return draw_seconds(participation, rounds, seed + 1) + read_floor(arrays, runs)


def per_round(method, problem, participation, rounds: int, block: int, compiled=True) -> float:
    """Seconds a round takes, draw included: the median of a run's round times but the
    first (``Result.wall_time``; set-up left out), after a whole run of the same rounds
    (which compiles and warms)."""
    rowwise.BLOCK = block
    programs._ROWWISE.clear()
    options = {"compiled": compiled, "metrics": (), "progress": False}
    # a whole run first, as the fresh-process script does: compiles, warms the caches, and
    # touches the pages this run's arrays will use
    sm.run(method, problem, participation, rounds, **options)
    result = sm.run(method, problem, participation, rounds, **options)
    return float(np.median(np.diff(result.wall_time)[1:]))


def by_local_steps(problem, participation, steps, rounds: int, repeats: int) -> dict:
    """ms a round of FedAvg and FOCUS with K local steps for each K in ``steps``: the
    compiled loop as it runs (the gradient kernel inlined by Numba at each call, the
    schedule lowered), the same loop one loop per step, the same loop leaving the calls to
    LLVM (compiled in memory with ``stochmix._compiled.inlined``
    made the identity, as before 24 November), and the NumPy programs; medians over
    ``repeats``, all interleaved."""
    import stochmix._compiled as compiled_helpers

    n = problem.n_clients
    keep_inlined, keep_cache = compiled_helpers.inlined, os.environ.get("STOCHMIX_CACHE")
    table = {}
    for k in steps:
        for name, method in (
            ("FedAvg", sm.algorithms.FedAvg(0.01, local_steps=k)),
            ("FOCUS", sm.algorithms.FOCUS(1 / (n * problem.smoothness), local_steps=k)),
        ):
            times = {
                "inlined": [],
                "one loop per step": [],
                "left to LLVM": [],
                "NumPy programs": [],
            }
            for _ in range(repeats):
                times["inlined"].append(per_round(method, problem, participation, rounds, 0))
                rowwise.LOWERED = False
                try:
                    seconds = per_round(method, problem, participation, rounds, 0)
                finally:
                    rowwise.LOWERED = True
                times["one loop per step"].append(seconds)
                os.environ["STOCHMIX_CACHE"] = "off"  # the disk cache holds inlined code
                compiled_helpers.inlined = lambda function: function
                try:
                    seconds = per_round(method, problem, participation, rounds, 0)
                finally:
                    compiled_helpers.inlined = keep_inlined
                    if keep_cache is None:
                        os.environ.pop("STOCHMIX_CACHE")
                    else:
                        os.environ["STOCHMIX_CACHE"] = keep_cache
                times["left to LLVM"].append(seconds)
                seconds = per_round(method, problem, participation, rounds, 0, compiled=False)
                times["NumPy programs"].append(seconds)
            row = {label: 1e3 * float(np.median(t)) for label, t in times.items()}
            table[f"{name} K={k}"] = row
            print(f"  {name} K = {k}: " + ", ".join(f"{a} {b:.2f} ms" for a, b in row.items()))
    return table


BASELINE = """
import importlib.util, sys
from pathlib import Path
# the checkout's package, not the installed one: an editable install's import hook comes
# before PYTHONPATH, so the package is loaded from its folder by hand
root = Path(sys.argv[5]) / "stochmix"
spec = importlib.util.spec_from_file_location(
    "stochmix", root / "__init__.py", submodule_search_locations=[str(root)]
)
sm = sys.modules["stochmix"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sm)
assert Path(sm.algorithms.__file__).is_relative_to(root), sm.algorithms.__file__
n, s, d, rounds = map(int, sys.argv[1:5])
problem = sm.problems.Quadratic.random(n, d, seed=0)
participation = sm.participation.UniformSample(n, s)
options = {"compiled": True, "metrics": (), "progress": False}
focus_lr = 1 / (n * problem.smoothness)
fedavg = sm.algorithms.FedAvg(0.01, local_steps=3)
for method in (fedavg, sm.algorithms.FOCUS(focus_lr, local_steps=3)):
    # a whole run first: compiles, and pays a fresh process's first touches of its pages
    # (the first run of a process took 1.4x longer a round, in either checkout)
    sm.run(method, problem, participation, rounds, **options)
    result = sm.run(method, problem, participation, rounds, **options)
    steps = sorted(b - a for a, b in zip(result.wall_time[1:], result.wall_time[2:]))
    print(steps[len(steps) // 2])
"""


def baseline_per_round(path: str, n: int, s: int, d: int, rounds: int) -> list[float]:
    """(FedAvg, FOCUS) seconds per round of the stochmix checked out at ``path``."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            BASELINE,
            str(n),
            str(s),
            str(d),
            str(rounds),
            str(Path(path).resolve()),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(line) for line in out.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10**6)
    parser.add_argument("--participants", type=int, default=10**5)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", type=int, nargs="*", default=[64, 256])
    parser.add_argument("--baseline", help="a checkout of an earlier stochmix to time beside")
    parser.add_argument(
        "--steps",
        type=int,
        nargs="*",
        default=[1, 3, 5, 8],
        help="local steps K of the by-K table (none: skip it)",
    )
    args = parser.parse_args()
    n, s, d = args.clients, args.participants, args.dim
    problem = sm.problems.Quadratic.random(n, d, seed=0)
    variants = {
        "legacy draws": (sm.participation.UniformSample(n, s, draws="legacy"), 0),
        "default": (sm.participation.UniformSample(n, s), rowwise.BLOCK),
        **{f"blocked {b}": (sm.participation.UniformSample(n, s), b) for b in args.blocks},
    }
    methods = {
        "FedAvg": sm.algorithms.FedAvg(0.01, local_steps=3),
        "FOCUS": sm.algorithms.FOCUS(1 / (n * problem.smoothness), local_steps=3),
    }
    default_block = rowwise.BLOCK
    times = {name: {v: [] for v in variants} for name in methods}
    if args.baseline:  # both checkouts timed the same way: the same script, a fresh process
        for name in methods:
            times[name] = {"baseline": [], "current, same script": [], **times[name]}
    for repeat in range(args.repeats):
        if args.baseline:
            for label, path in (("baseline", args.baseline), ("current, same script", HERE.parent)):
                found = baseline_per_round(path, n, s, d, args.rounds)
                for name, seconds in zip(methods, found, strict=True):
                    times[name][label].append(seconds)
        for name, method in methods.items():
            for variant, (participation, block) in variants.items():
                seconds = per_round(method, problem, participation, args.rounds, block)
                times[name][variant].append(seconds)
            rowwise.BLOCK = default_block
            floor = floor_time(name, problem, variants["default"][0], args.rounds, seed=repeat)
            times[name].setdefault("floor (draw + read)", []).append(floor)
    reference = "baseline" if args.baseline else "legacy draws"
    results = {}
    for name in methods:
        median = {v: float(np.median(t)) for v, t in times[name].items()}
        results[name] = {
            v: {
                "ms_per_round": 1e3 * m,
                "rate_vs_reference": median[reference] / m,
                "ms_per_round_by_repeat": [1e3 * t for t in times[name][v]],
            }
            for v, m in median.items()
        }
    print(f"N = {n}, |S| = {s}, d = {d}, K = 3; ms a round (rate vs {reference})")
    for name, rows in results.items():
        cells = ", ".join(
            f"{v}: {r['ms_per_round']:.1f} ({r['rate_vs_reference']:.2f}x)" for v, r in rows.items()
        )
        print(f"  {name}: {cells}")
    steps = {}
    if args.steps:
        print("by local steps (default draws; ms a round):")
        steps = by_local_steps(
            problem, sm.participation.UniformSample(n, s), args.steps, args.rounds, args.repeats
        )
    out = {
        "machine": platform.processor() or platform.machine(),
        "clients": n,
        "participants": s,
        "dim": d,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "baseline": args.baseline,
        "results": results,
        "by_local_steps": steps,
    }
    (HERE / "results-rowwise.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
