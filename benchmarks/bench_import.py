"""Import time and memory of ``import stochmix``, against its own dependencies.

    .venv/bin/python benchmarks/bench_import.py            # 7 runs of each, ~10 s
    .venv/bin/python benchmarks/bench_import.py --runs 15
    .venv/bin/python benchmarks/bench_import.py --top 25   # and what stochmix adds

Each statement runs in a fresh interpreter (``python -X importtime -c STATEMENT``), so
nothing is cached in memory between runs (the OS file cache is warm after the first). The
import time of a run is the sum of the cumulative times ``-X importtime`` reports for the
modules the statement imports at top level (the interpreter's own start-up, ``site`` and
what it imports, is left out); the reported value is the median over the runs. Memory is
the peak resident set size of the child (``ru_maxrss``) minus that of a bare interpreter
(``python -c pass``), also a median.

The baseline is ``import numpy, scipy.sparse, networkx``: the libraries stochmix cannot do
without. The target is that ``import stochmix`` costs at most 1.5 times that (Torch,
Matplotlib, scikit-learn, pandas and Numba are imported only when used).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

STATEMENTS = {
    "stochmix": "import stochmix",
    "baseline": "import numpy, scipy.sparse, networkx",
}
TARGET = 1.5  # at most this many times the baseline's import time
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


def run_once(statement: str, python: str = sys.executable) -> tuple[float, int, list]:
    """One fresh interpreter running ``statement``: (import seconds, peak RSS in KiB, rows)."""
    args = [python, "-X", "importtime", "-c", statement]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read()
    proc.stderr.close()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{statement!r} failed:\n{stderr[-2000:]}")
    rows = parse_importtime(stderr)
    seconds = sum(cumulative for _, _, cumulative, depth in rows if depth == 0) / 1e6
    kib = usage.ru_maxrss if sys.platform != "darwin" else usage.ru_maxrss // 1024
    return seconds, kib, rows


def measure(statements: dict[str, str], runs: int) -> dict[str, dict]:
    """Per statement: the median import time (s) and peak RSS (KiB) over ``runs`` runs, and
    the rows of its median-time run. The statements take turns, so that a change in the
    machine's load affects them all alike."""
    samples: dict[str, list] = {name: [] for name in statements}
    for _ in range(runs):
        for name, statement in statements.items():
            samples[name].append(run_once(statement))
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
    args = parser.parse_args(argv)

    results = measure({**STATEMENTS, "bare": "pass"}, args.runs)
    bare = results["bare"]["rss_kib"]
    print(f"{args.runs} fresh interpreters each; Python {sys.version.split()[0]}; {sys.executable}")
    print(f"{'statement':<40} {'import (ms)':>11} {'RSS added (MiB)':>15}")
    for name, stmt in STATEMENTS.items():
        r = results[name]
        added = (r["rss_kib"] - bare) / 1024
        print(f"{stmt:<40} {1000 * r['seconds']:>11.1f} {added:>15.1f}")
    ratio = results["stochmix"]["seconds"] / results["baseline"]["seconds"]
    verdict = "MET" if ratio <= TARGET else "NOT MET"
    print(f"ratio stochmix / baseline: {ratio:.2f}x (target <= {TARGET}x: {verdict})")
    heavy = {"torch", "matplotlib", "sklearn", "pandas", "numba"}
    loaded = sorted({m.split(".")[0] for m, *_ in results["stochmix"]["rows"]} & heavy)
    print(f"optional libraries imported by `import stochmix`: {', '.join(loaded) or 'none'}")
    if args.top:
        base = {m for m, *_ in results["baseline"]["rows"]}
        extra = [r for r in results["stochmix"]["rows"] if r[0] not in base]
        total = sum(own for _, own, _, _ in extra) / 1000
        print(f"\nmodules `import stochmix` adds to the baseline's: {len(extra)}, {total:.1f} ms")
        print(f"the {args.top} slowest by self time (total: with what they import):")
        for module, own, cumulative, _ in sorted(extra, key=lambda r: -r[1])[: args.top]:
            print(f"  {own / 1000:7.1f} ms self {cumulative / 1000:8.1f} ms total  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
