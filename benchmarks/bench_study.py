"""Studies (issue 26): the README's p_min study, serially, on two local processes and on a
Dask cluster of two local workers.

The study: least squares over N = 100 clients, Bernoulli participation with p_i between
``participation.low`` and 0.9, FedAvg against FOCUS, 3,000 rounds, swept over
``participation.low`` = 0.02, 0.05, 0.1, 0.2, 0.3, 0.5 times 5 seeds: 30 cells. Each
executor runs it into a folder of its own (``Study.run``, timed in this process; the Dask
cluster is started before the clock starts), and the three ``study.csv`` must be the same
bytes. The script prints the times and writes ``benchmarks/results-study.json``.

Run: ``.venv/bin/python benchmarks/bench_study.py`` (about 3 minutes on 2 idle cores;
``--quick``: 300 rounds). On a shared machine, run it when the cores are idle: two
processes cannot be 2x faster than one where another job holds a core.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import stochmix as sm

CONFIG = {
    "name": "pmin",
    "rounds": 3000,
    "seeds": [0, 1, 2, 3, 4],
    "problem": {
        "kind": "least_squares",
        "n_clients": 100,
        "dim": 10,
        "rows_per_client": 20,
        "heterogeneity": 2.0,
    },
    "participation": {"kind": "bernoulli", "low": 0.1, "high": 0.9},
    "methods": [
        {"kind": "fedavg", "label": "FedAvg", "lr": 0.0067, "local_steps": 5},
        {"kind": "focus", "label": "FOCUS", "lr": 0.000067, "local_steps": 5},
    ],
    "sweep": {"participation.low": [0.02, 0.05, 0.1, 0.2, 0.3, 0.5]},
}


def timed(folder: Path, **options) -> float:
    start = time.perf_counter()
    study = sm.Study(CONFIG).run(folder, progress=False, **options)
    assert not study.failures, study.failures
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 rounds")
    args = parser.parse_args()
    if args.quick:
        CONFIG["rounds"] = 300
    root = Path(tempfile.mkdtemp(prefix="bench-study-"))
    seconds = {"serial": timed(root / "serial"), "jobs2": timed(root / "jobs2", jobs=2)}
    try:
        from distributed import LocalCluster
    except ImportError:
        print("no Dask distributed: the cluster run is skipped")
    else:
        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:
            address = cluster.scheduler_address
            seconds["dask2"] = timed(root / "dask2", executor="dask", address=address)
    reference = (root / "serial" / "study.csv").read_bytes()
    same = all((root / name / "study.csv").read_bytes() == reference for name in seconds)
    for name, value in seconds.items():
        print(f"{name:>7}: {value:6.1f} s  ({seconds['serial'] / value:.2f}x serial)")
    print(f"same study.csv bytes: {same}")
    out = Path(__file__).with_name("results-study.json")
    out.write_text(
        json.dumps({"rounds": CONFIG["rounds"], "seconds": seconds, "same": same}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
