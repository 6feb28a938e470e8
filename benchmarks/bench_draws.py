"""Per-round cost of drawing the participants: ``draws="legacy"`` against ``draws="fast"``.

For N in {1e4, 1e6, 1e7} and |S| in {1e3, 1e5} (|S| <= N): ``UniformSample(N, |S|)`` and
heterogeneous ``Bernoulli`` whose p_i are uniform in [0.05, 0.2] or [0.005, 0.2], scaled so
that the expected |S| is the one asked (the ranges keep their shape: p_max / p_mean is 1.6
and 1.95). Times ``next(process.participants(seed))``, the engine's call: median over a
few rounds after one warm-up round. Prints a table and writes ``results-draws.json`` next
to this file. About half a minute.

    python benchmarks/bench_draws.py
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import draw_seconds  # noqa: E402

from stochmix.participation import Bernoulli, UniformSample  # noqa: E402

OUT = Path(__file__).with_name("results-draws.json")
SIZES = [(10**4, 10**3), (10**6, 10**3), (10**6, 10**5), (10**7, 10**3), (10**7, 10**5)]
RANGES = [(0.05, 0.2), (0.005, 0.2)]


def _round_ms(process, rounds: int) -> float:
    return 1e3 * draw_seconds(process, rounds, seed=0)


def _processes(n: int, size: int, draws: str):
    yield "UniformSample", UniformSample(n, size, draws=draws)
    for low, high in RANGES:
        scale = size / (n * (low + high) / 2)
        p = np.random.default_rng(1).uniform(low, high, n) * scale
        yield f"Bernoulli p~U[{low:g}, {high:g}]", Bernoulli(p, draws=draws)


def main() -> None:
    rows = []
    for n, size in SIZES:
        rounds = 7 if n >= 10**7 else 15
        legacy = dict(_processes(n, size, "legacy"))
        fast = dict(_processes(n, size, "fast"))
        for name in legacy:
            old = _round_ms(legacy[name], rounds)
            new = _round_ms(fast[name], rounds)
            rows.append(
                {
                    "process": name,
                    "n_clients": n,
                    "expected_size": size,
                    "legacy_ms": round(old, 4),
                    "fast_ms": round(new, 4),
                    "speedup": round(old / new, 2),
                }
            )
            print(
                f"{name:28s} N={n:>9,d} |S|={size:>7,d}  legacy {old:8.3f} ms  "
                f"fast {new:8.3f} ms  x{old / new:6.1f}",
                flush=True,
            )
    OUT.write_text(
        json.dumps(
            {
                "what": "median per-round time of next(process.participants(seed)), ms",
                "numpy": np.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
