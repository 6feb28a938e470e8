"""Import time and memory of ``import stochmix`` and of its typical use, against its own
dependencies.

    .venv/bin/python benchmarks/bench_import.py            # 7 runs of each, ~15 s
    .venv/bin/python benchmarks/bench_import.py --runs 15
    .venv/bin/python benchmarks/bench_import.py --top 25   # and what stochmix adds
    .venv/bin/python benchmarks/bench_import.py --cpu      # CPU time, on a busy machine

Each statement runs in a fresh interpreter (``python -X importtime -c STATEMENT``), so
nothing is cached in memory between runs (the OS file cache is warm after the first). The
import time of a run is the time the child takes to run the statement, timed around it
(the interpreter's own start-up, ``site`` and what it imports, is left out): the sum of
the cumulative times ``-X importtime`` reports for the modules imported at top level would
miss those imported by ``importlib.import_module``, which ``-X importtime`` does not time
(in their place it lists what they import, at top level). The reported value is the median
over the runs; ``-X importtime`` gives the modules that ``--top`` lists. On a loaded
machine the wall-clock time counts the child's waits for a core as well: ``--cpu`` times
the CPU time of the child's main thread (``time.thread_time``, without the waits nor the
threads NumPy starts) instead. Memory is the peak resident set
size of the child (``ru_maxrss``) minus that of a bare interpreter (``python -c pass``),
also a median.

The baseline is ``import numpy, scipy.sparse, networkx``: the libraries stochmix cannot do
without. The targets are that ``import stochmix`` costs at most 1.5 times that (Torch,
Matplotlib, scikit-learn, pandas and Numba are imported only when used), and so does its
typical use: ``import stochmix as sm`` and the first use of ``sm.run``, a method, a problem
and a participation process, which import what the README's first example needs (the
subpackages are imported when first used, so ``import stochmix`` alone costs little).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

TYPICAL = (
    "import stochmix as sm; sm.run; sm.algorithms.FOCUS; sm.problems.LeastSquares;"
    " sm.participation.Bernoulli"
)
STATEMENTS = {
    "stochmix": "import stochmix",
    "baseline": "import numpy, scipy.sparse, networkx",
    "typical": TYPICAL,
}
TARGET = 1.5  # at most this many times the baseline's import time
#: each statement measured against the baseline -> its target ratio
TARGETS = {"stochmix": TARGET, "typical": TARGET}
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def parse_importtime(stderr: str) -> list[tuple[str, int, int, int]]:
    """``(module, self_us, cumulative_us, depth)`` for each line of ``-X importtime``
    output that comes after the interpreter's start-up (the top-level ``site`` line)."""
    rows = []
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if m:
            depth = len(m.group(3)) // 2
            rows.append((m.group(4), int(m.group(1)), int(m.group(2)), depth))
    started = max((i for i, r in enumerate(rows) if r[0] == "site" and r[3] == 0), default=-1)
    return rows[started + 1 :]


def run_once(
    statement: str, python: str = sys.executable, cpu: bool = False
) -> tuple[float, int, list]:
    """One fresh interpreter running ``statement``: (import seconds, peak RSS in KiB, rows);
    the seconds are wall-clock, or the child's CPU time with ``cpu``."""
    clock = "thread_time" if cpu else "perf_counter"
    timed = f"import time as _t\n_s = _t.{clock}()\n{statement}\nprint(_t.{clock}() - _s)"
    args = [python, "-X", "importtime", "-c", timed]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read()  # the statement prints one line only: its pipe cannot fill
    stdout = proc.stdout.read()
    proc.stderr.close()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{statement!r} failed:\n{stderr[-2000:]}")
    rows = parse_importtime(stderr)
    seconds = float(stdout.split()[-1])
    kib = usage.ru_maxrss if sys.platform != "darwin" else usage.ru_maxrss // 1024
    return seconds, kib, rows


def measure(statements: dict[str, str], runs: int, cpu: bool = False) -> dict[str, dict]:
    """Per statement: the median import time (s) and peak RSS (KiB) over ``runs`` runs, and
    the rows of its median-time run. The statements take turns, so that a change in the
    machine's load affects them all alike."""
    samples: dict[str, list] = {name: [] for name in statements}
    for _ in range(runs):
        for name, statement in statements.items():
            samples[name].append(run_once(statement, cpu=cpu))
    results = {}
    for name, runs_of in samples.items():
        ordered = sorted(runs_of, key=lambda s: s[0])
        results[name] = {
            "seconds": statistics.median(s[0] for s in runs_of),
            "rss_kib": statistics.median(s[1] for s in runs_of),
            "rows": ordered[len(ordered) // 2][2],
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per statement")
    parser.add_argument("--top", type=int, default=0, help="list the N slowest added modules")
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall-clock")
    args = parser.parse_args(argv)

    results = measure({**STATEMENTS, "bare": "pass"}, args.runs, args.cpu)
    bare = results["bare"]["rss_kib"]
    print(f"{args.runs} fresh interpreters each; Python {sys.version.split()[0]}; {sys.executable}")
    timed = "CPU (ms)" if args.cpu else "import (ms)"
    print(f"{'statement':<40} {timed:>11} {'RSS added (MiB)':>15}")
    for name, stmt in STATEMENTS.items():
        r = results[name]
        added = (r["rss_kib"] - bare) / 1024
        shown = stmt if len(stmt) <= 40 else "typical use (below)"
        print(f"{shown:<40} {1000 * r['seconds']:>11.1f} {added:>15.1f}")
    print(f"typical use: {TYPICAL}")
    for name, target in TARGETS.items():
        ratio = results[name]["seconds"] / results["baseline"]["seconds"]
        verdict = "MET" if ratio <= target else "NOT MET"
        print(f"ratio {name} / baseline: {ratio:.2f}x (target <= {target}x: {verdict})")
    heavy = {"torch", "matplotlib", "sklearn", "pandas", "numba"}
    for name, what in [("stochmix", "`import stochmix`"), ("typical", "typical use")]:
        loaded = sorted({m.split(".")[0] for m, *_ in results[name]["rows"]} & heavy)
        print(f"optional libraries imported by {what}: {', '.join(loaded) or 'none'}")
    if args.top:
        base = {m for m, *_ in results["baseline"]["rows"]}
        for name, what in [("stochmix", "`import stochmix`"), ("typical", "typical use")]:
            extra = [r for r in results[name]["rows"] if r[0] not in base]
            total = sum(own for _, own, _, _ in extra) / 1000
            print(f"\nmodules {what} adds to the baseline's: {len(extra)}, {total:.1f} ms")
            print(f"the {args.top} slowest by self time (total: with what they import):")
            for module, own, cumulative, _ in sorted(extra, key=lambda r: -r[1])[: args.top]:
                print(f"  {own / 1000:7.1f} ms self {cumulative / 1000:8.1f} ms total  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
