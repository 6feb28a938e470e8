"""State that follows liveness (issue 14): memory of FedAvg and FOCUS runs with the state
kept in full and with the rows nothing reads left out (``run(storage=...)``).

Diagonal quadratic (d = 10), Bernoulli participation with p_i in [0.05, 0.2], K = 3, the
run's default arguments but ``storage``. Each configuration runs in a fresh process, which
reports its peak resident memory above what it held before the problem was made, next to
the problem's own data (its per-client centers and Hessian diagonals); the state's size
is the kept rows times d times 8 bytes. Target: FedAvg at N = 10^7 below the data plus
20%, FedAvg's state O(|S| d) (one row), FOCUS's one block of N rows instead of three.
The same run then runs ``bench_scale.py`` (FOCUS over the same clients to relative error
1e-10, target under 60 s) and prints every target met or missed.

Usage: ``python benchmarks/bench_liveness.py [--clients 10000000] [--rounds 20]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, resource, sys, time
import numpy as np
import stochmix as sm
from stochmix.engine.plan.round_plan import plan_round
from stochmix.engine.model.layout import Layout
from stochmix.engine.plan.liveness import find_scratch

def rss():  # resident memory now, in bytes
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

n, rounds, name, storage = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
base = rss()
problem = sm.problems.Quadratic.random(n, 10, seed=0)
clients = sm.participation.Bernoulli.heterogeneous(n, 0.05, 0.2, seed=1)
data = sum(a.nbytes for a in problem.data.values())
lr = 1.0 / (n * problem.smoothness)
method = sm.algorithms.FedAvg(lr * n / 10, 3) if name == "FedAvg" else sm.algorithms.FOCUS(lr, 3)
scratch = {}
if storage != "full":
    scratch = find_scratch(method, n, 10, clients.probabilities,
                           lambda ph, m, c: plan_round(ph, sm.engine.NumpyBackend(), m, c))
layout = Layout(method.blocks(n), scratch, (method.client_node, n))
start = time.perf_counter()
result = sm.run(method, problem, clients, rounds, seed=11, storage=storage, progress=False)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({"method": name, "storage": storage, "clients": n, "rounds": rounds,
                  "data_bytes": data, "state_rows": layout.kept, "full_rows": layout.size,
                  "state_bytes": layout.kept * 10 * 8, "peak_above_start_bytes": peak,
                  "peak_over_data": peak / data, "seconds": seconds,
                  "final_server_norm": float(np.linalg.norm(result.server[-1]))}))
"""


def measure(n: int, rounds: int, method: str, storage: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), str(rounds), method, storage],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10**7)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rows = []
    for method in ("FedAvg", "FOCUS"):
        for storage in ("full", "auto"):
            row = measure(args.clients, args.rounds, method, storage)
            rows.append(row)
            print(
                f"{method:6s} storage={storage:4s} N={row['clients']}: state {row['state_rows']} "
                f"of {row['full_rows']} rows ({row['state_bytes'] / 1e9:.3f} GB); data "
                f"{row['data_bytes'] / 1e9:.2f} GB; peak above start "
                f"{row['peak_above_start_bytes'] / 1e9:.2f} GB = "
                f"{row['peak_over_data']:.2f} x data; {row['seconds']:.1f} s"
            )
    same = {
        m: len({r["final_server_norm"] for r in rows if r["method"] == m}) == 1
        for m in ("FedAvg", "FOCUS")
    }
    print(f"same final models with either storage: {same}")
    # the ten-million-client headline in the same run (its own process, default arguments)
    subprocess.run(
        [sys.executable, str(HERE / "bench_scale.py"), "--clients", str(args.clients)], check=True
    )
    headline = json.loads((HERE / "results-scale.json").read_text())
    fedavg, focus = (next(r for r in rows if r["method"] == m and r["storage"] == "auto")
                     for m in ("FedAvg", "FOCUS"))  # fmt: skip
    targets = {
        "FedAvg peak below data + 20%": fedavg["peak_over_data"] <= 1.2,
        "FedAvg state one row (O(|S| d) per round)": fedavg["state_rows"] == 1,
        "FOCUS one block of N rows": focus["state_rows"] == args.clients + 3,
        "FOCUS 10^7 clients to 1e-10 under 60 s": (headline["seconds"] or 1e9) < 60,
    }
    for name, met in targets.items():
        print(f"{'met' if met else 'MISSED'}: {name}")
    (HERE / "results-liveness.json").write_text(
        json.dumps({"rows": rows, "same": same, "headline": headline, "targets": targets}, indent=2)
        + "\n"  # fmt: skip
    )


if __name__ == "__main__":
    main()
