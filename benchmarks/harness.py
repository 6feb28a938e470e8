"""What the benchmark sections share: the common setting (methods, K, seeds), the run's
results and problem cache, peak-memory measurement, formatting of numbers and tables,
the timing of one cell (engine or baseline), and writing the results as JSON.

Timing: a cell's time per round is the minimum over repeated runs of (total loop time /
rounds); the engine's loop time is ``Result.wall_time[-1]``. Memory: the peak resident set
size (VmHWM, reset through /proc/self/clear_refs) during the run minus the resident size
just before it (after gc and malloc_trim). See ``run_benchmarks.py``.
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
from baselines import engine_method, run_masks

import stochmix as sm

HERE = Path(__file__).resolve().parent

METHODS = ("FedAvg", "FOCUS")
K = 5
SEED = 0  # problem seed
MASK_SEED = 11  # participation stream seed

RESULTS: dict = {}
CACHE: dict = {}
# How stochmix.run runs node-local phases in the engine's timings (``compiled=``): True
# (Numba row-wise programs) when Numba is installed, else False (NumPy programs);
# ``--engine numpy`` forces False.
ENGINE = {"compiled": False}


def engine_label() -> str:
    return "numba" if ENGINE["compiled"] else "numpy"


def have_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


# =============================================================================== utilities


def log(*args):
    print(*args, flush=True)


def _status_kb(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


_LIBC = None


def trim_memory():
    global _LIBC
    gc.collect()
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except OSError:
        pass


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakRSS:
    """Peak resident memory during the block, above the resident memory at its start."""

    def __enter__(self):
        trim_memory()
        self.ok = _reset_peak()
        self.base = _status_kb("VmRSS")
        self.delta = None
        return self

    def __exit__(self, *exc):
        peak = _status_kb("VmHWM")
        if self.ok and peak is not None and self.base is not None:
            self.delta = max(0, peak - self.base) * 1024
        return False


def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def fmt_rate(sec):
    if sec is None:
        return "-"
    r = 1.0 / sec
    return f"{r:.3g}" if r < 1000 else f"{r:,.0f}"


def fmt_ms(sec):
    return "-" if sec is None else (f"{sec * 1e3:.3g}" if sec < 10 else f"{sec * 1e3:,.0f}")


def fmt_ratio(x):
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:.3g}x" if x < 1000 else f"{x:,.0f}x"


def fmt_mb(b):
    return "-" if b is None else f"{b / 2**20:.1f}"


def table(headers, rows, title=None):
    rows = [[str(c) for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    out = []
    if title:
        out.append(title)
    out.append("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    log("\n".join(out) + "\n")


def machine_info():
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "stochmix": sm.__version__,
        "cpus": os.cpu_count(),
        "mem_total_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "loadavg": [round(x, 2) for x in load] if load else None,
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        info["torch"] = None
    try:
        import numba

        info["numba"] = numba.__version__
    except ImportError:
        info["numba"] = None
    return info


def quad_problem(n, d, seed=SEED):
    key = ("quad", n, d, seed)
    if key not in CACHE:
        CACHE.clear()  # keep one large problem at a time
        trim_memory()
        CACHE[key] = sm.problems.Quadratic.random(n, d, seed=seed)
    return CACHE[key]


def lr_for(name, problem):
    L = problem.smoothness
    return 0.5 / L if name == "FedAvg" else 1.0 / (problem.n_clients * L)


def state_bytes(name, n, d):
    return (1 if name == "FedAvg" else 3) * (n + 1) * d * 8


# -------------------------------------------------------------------- timing one cell


def run_engine(method, problem, process, rounds, *, metrics=(), **options):
    """``stochmix.run`` as the sections run it: participation stream ``MASK_SEED``, no
    progress bar, no metrics unless asked."""
    return sm.run(
        method,
        problem,
        process,
        rounds,
        seed=MASK_SEED,
        metrics=metrics,
        progress=False,
        **options,
    )


def time_engine(
    name,
    problem,
    process,
    *,
    backend="numpy",
    budget=1.0,
    reps=3,
    max_rounds=10_000,
    lr=None,
    local_steps=K,
    compiled=None,
):
    """(seconds per round, rounds, repeats, peak bytes) of ``stochmix.run``.

    Every run does one untimed warm-up round first (fresh state pages being touched, and
    the first use of a structure compiled); the time is the rest of ``Result.wall_time``.
    ``compiled`` defaults to ``ENGINE["compiled"]`` (NumPy backend only)."""
    lr = lr_for(name, problem) if lr is None else lr
    options = {}
    if backend == "numpy":
        options["compiled"] = ENGINE["compiled"] if compiled is None else compiled

    def go(rounds):
        res = run_engine(
            engine_method(name, lr, local_steps),
            problem,
            process,
            rounds + 1,
            backend=backend,
            on_divergence="raise",
            **options,
        )
        return res.wall_time[-1] - res.wall_time[1]

    with PeakRSS() as mem:
        probe = go(1)
    return repeat_rounds(go, probe, budget, reps, max_rounds) + (mem.delta,)


def time_baseline(make, process, *, budget=1.0, reps=3, max_rounds=10_000):
    """(seconds per round, rounds, repeats, peak bytes) of a baseline built by ``make()``
    (its construction, e.g. FOCUS's (N, d) memories, counts towards its memory); one
    untimed warm-up round per run, as for the engine."""

    def go(rounds):
        return run_masks(make(), process, MASK_SEED, rounds, warmup=1)[0]

    with PeakRSS() as mem:
        probe = go(1)
    return repeat_rounds(go, probe, budget, reps, max_rounds) + (mem.delta,)


def repeat_rounds(go, probe, budget, reps, max_rounds):
    """Min over ``reps`` runs of time / rounds, with rounds sized to fit ``budget``; a cell
    whose single round takes a good part of the budget is measured by the probe (plus one
    more run of two rounds when that still fits)."""
    if probe >= 0.4 * budget:
        if probe < budget:
            return min(probe, go(2) / 2), 2, 1
        return probe, 1, 1
    rounds = int(max(1, min(max_rounds, budget / reps / max(probe, 1e-6))))
    best = min(go(rounds) / rounds for _ in range(reps))
    return best, rounds, reps


def draw_seconds(process, rounds: int, seed=MASK_SEED) -> float:
    """Seconds per round to draw the participants alone, as a run draws them
    (``process.participants``), the median over ``rounds`` after one untimed draw."""
    stream = process.participants(seed)
    next(stream)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        next(stream)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def budgeted_draw_time(process, budget):
    """What :func:`draw_seconds` measures, within ``budget`` seconds and as the engine's
    cells are timed: the rounds sized from one probe draw, the least over 3 runs of the
    mean time per round."""
    draws = process.participants(MASK_SEED)
    next(draws)
    t0 = time.perf_counter()
    next(draws)
    one = time.perf_counter() - t0
    rounds = int(max(1, min(2000, budget / 3 / max(one, 1e-6))))
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(rounds):
            next(draws)
        best = min(best, (time.perf_counter() - t0) / rounds)
    return best


def _jsonable(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, float) and math.isnan(o):
        return None
    return str(o)


def write_json(path):
    """Write ``RESULTS`` (NumPy numbers and arrays as JSON numbers and lists, NaN as null)."""
    Path(path).write_text(json.dumps(RESULTS, indent=1, default=_jsonable))
