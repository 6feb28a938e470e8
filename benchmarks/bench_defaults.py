"""What a user gets with default arguments (issue 11): ``sm.run(method, problem,
participation, rounds)`` and nothing else.

Two sections, each measured side by side in one process:

* ``flat``: the marginal time of a default round at 1000 participants (uniform sampling)
  as N grows from 10^3 to 10^7, FedAvg and FOCUS on a diagonal quadratic (d = 10, K = 5).
  A round's marginal time is (loop time after 220 rounds - after 20 rounds) / 200, read
  off ``Result.wall_time`` of one 220-round run (metrics included), so the O(N) set-up (the
  state, the first rounds' planning) is not counted as a round; the median of three runs.
  Target: at most 2x growth from 10^3 to 10^7.
* ``headline``: FOCUS over a million clients (diagonal quadratic, d = 10, Bernoulli p_i in
  [0.05, 0.2], K = 3, lr = 1/(N L), 520 rounds) with default arguments, against the
  README's snippet (``metrics=("distance",)``) and the hand-written vectorized NumPy FOCUS
  of ``baselines.KernelFOCUS`` on the same masks. Times are to relative error 1e-10
  (wall clock of the whole call up to the hit, set-up included; compiling excluded by a
  warm-up run, as on any machine after its first run). Targets: default within 1.2x of
  the snippet; at most 0.5x the hand-written time.

Run: ``python benchmarks/bench_defaults.py [--only flat|headline] [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baselines import DiagQuadData, KernelFOCUS  # noqa: E402

import stochmix as sm  # noqa: E402

TARGET = 1e-10


def log(*args):
    print(*args, flush=True)


def section_flat(quick: bool) -> dict:
    sizes = [10**3, 10**4, 10**5, 10**6] + ([] if quick else [10**7])
    short, long, reps, m, d, k = 20, 220, 3, 1000, 10, 5
    rows, out = [], {"sizes": sizes, "participants": m, "dim": d, "local_steps": k}
    for n in sizes:
        t0 = time.perf_counter()
        problem = sm.problems.Quadratic.random(n, d, seed=0)
        process = sm.participation.UniformSample(n, m)
        made = time.perf_counter() - t0
        for name, method in (
            ("FedAvg", sm.algorithms.FedAvg(0.5 / problem.smoothness, k)),
            ("FOCUS", sm.algorithms.FOCUS(0.5 / (n * problem.smoothness), k)),
        ):

            def marginal_of_a_run(method=method, problem=problem, process=process):
                res = sm.run(method, problem, process, long, seed=11, progress=False)
                return (res.wall_time[long] - res.wall_time[short]) / (long - short)

            marginal_of_a_run()  # warm-up: imports, programs
            marginal = float(np.median([marginal_of_a_run() for _ in range(reps)]))
            rows.append({"n": n, "method": name, "ms_per_round": 1e3 * marginal})
            log(f"  N = {n:>10,}  {name:6}  {1e3 * marginal:7.3f} ms/round  (problem {made:.1f} s)")
        del problem, process
        gc.collect()
    out["rows"] = rows
    for name in ("FedAvg", "FOCUS"):
        mine = [r["ms_per_round"] for r in rows if r["method"] == name]
        growth = mine[-1] / mine[0]
        verdict = "PASS" if growth <= 2.0 else "FAIL"
        out[f"{name}_growth"] = growth
        log(f"  {name}: {growth:.2f}x from N = {sizes[0]:,} to {sizes[-1]:,} (<= 2x): {verdict}")
    return out


def _time_to_target(run_call):
    """(rounds to TARGET, seconds to it: set-up plus the loop up to that round, total)."""
    t0 = time.perf_counter()
    res = run_call()
    total = time.perf_counter() - t0
    setup = total - res.wall_time[-1]
    hit = res.rounds_to(TARGET)
    return hit, (setup + res.wall_time[hit]) if hit is not None else None, total


def section_headline(quick: bool) -> dict:
    n, d, k, rounds = (10**5 if quick else 10**6), 10, 3, 520
    problem = sm.problems.Quadratic.random(n, d, seed=0)
    process = sm.participation.Bernoulli.heterogeneous(n, 0.05, 0.2, seed=1)
    lr = 1.0 / (n * problem.smoothness)

    def default():
        return sm.run(sm.algorithms.FOCUS(lr, k), problem, process, rounds, seed=11)

    def snippet():
        return sm.run(
            sm.algorithms.FOCUS(lr, k), problem, process, rounds, seed=11, metrics=("distance",)
        )

    default()  # warm-up: compiles the program once (the disk cache keeps it)
    results: dict = {"default": [], "snippet": []}
    for _ in range(3):
        for name, call in (("default", default), ("snippet", snippet)):
            gc.collect()
            results[name].append(_time_to_target(call))
    out = {"n": n, "rounds": rounds}
    for name, runs in results.items():
        out[name] = {
            "rounds_to_target": runs[0][0],
            "seconds": float(np.median([r[1] for r in runs if r[1] is not None])),
            "total_seconds": float(np.median([r[2] for r in runs])),
        }

    # the hand-written vectorized NumPy FOCUS on the same masks
    data = DiagQuadData(problem)
    t0 = time.perf_counter()
    kern = KernelFOCUS(data, lr, k)
    stream = process.participants(11)
    e0 = np.linalg.norm(kern.server - problem.x_star)
    hit = None
    for r in range(1, rounds + 1):
        kern.round(next(stream))
        if np.linalg.norm(kern.server - problem.x_star) <= TARGET * e0:
            hit = r
            break
    kernel_s = time.perf_counter() - t0
    out["hand_written"] = {"rounds_to_target": hit, "seconds": kernel_s}

    d_s, s_s = out["default"]["seconds"], out["snippet"]["seconds"]
    log(
        f"  FOCUS N = {n:,}: rounds to {TARGET:g}: default {out['default']['rounds_to_target']}, "
        f"snippet {out['snippet']['rounds_to_target']}, hand-written {hit}"
    )
    log(f"  default arguments  {d_s:7.2f} s")
    log(f"  README snippet     {s_s:7.2f} s")
    log(f"  hand-written NumPy {kernel_s:7.2f} s")
    ratio_snippet, ratio_kernel = d_s / s_s, d_s / kernel_s
    out["default_vs_snippet"], out["default_vs_hand_written"] = ratio_snippet, ratio_kernel
    log(
        f"  default / snippet = {ratio_snippet:.2f}x (<= 1.2x): "
        f"{'PASS' if ratio_snippet <= 1.2 else 'FAIL'}"
    )
    log(
        f"  default / hand-written = {ratio_kernel:.2f}x (<= 0.5x): "
        f"{'PASS' if ratio_kernel <= 0.5 else 'FAIL'}"
    )
    return out


SECTIONS = {"flat": section_flat, "headline": section_headline}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = parser.parse_args(argv)
    found = {}
    for name in args.only or list(SECTIONS):
        log(f"== {name}")
        found[name] = SECTIONS[name](args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
