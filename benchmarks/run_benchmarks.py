"""Benchmarks of the stochmix engine against the baselines, with ratios side by side.

    .venv/bin/python benchmarks/run_benchmarks.py                 # everything (~10 min)
    .venv/bin/python benchmarks/run_benchmarks.py --quick         # ~1 min, smaller grid
    .venv/bin/python benchmarks/run_benchmarks.py --only targets  # one section
    .venv/bin/python benchmarks/run_benchmarks.py --json out.json

Sections (default order): scaling, flower, bandwidth, headline, targets; ``profile`` runs
only when asked (``--only profile``). See benchmarks/README.md for what each measures.

Only the public API is used: ``stochmix.run``, ``stochmix.algorithms.FedAvg/FOCUS``,
``stochmix.problems.Quadratic/LeastSquares``, ``stochmix.participation``. Baselines are in
``baselines.py`` and are checked against ``stochmix.run`` before they are timed.

Timing: a cell's time per round is the minimum over repeated runs of (total loop time /
rounds); the engine's loop time is ``Result.wall_time[-1]`` (setup such as allocating the
state is excluded, and reported separately where it matters). Memory: the peak resident
set size (VmHWM, reset through /proc/self/clear_refs) during the run minus the resident
size just before it (after gc and malloc_trim), so it counts what the run allocates beyond
the problem's data (its state, buffers, caches, a Torch copy of the data) and is the same
measure for NumPy, Torch and the baselines. Other processes may load the machine: the
load average is printed with the results.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import json
import math
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from baselines import (  # noqa: E402
    DiagQuadData,
    KernelFedAvg,
    KernelFOCUS,
    KernelFOCUSNoY,
    LeastSquaresData,
    LoopFedAvg,
    LoopFOCUS,
    check_against_engine,
    engine_method,
    ls_gradients,
    read_floor,
    run_masks,
    tune_chunk,
)

import stochmix as sm  # noqa: E402
from stochmix.participation import Bernoulli, UniformSample  # noqa: E402

METHODS = ("FedAvg", "FOCUS")
K = 5
SEED = 0  # problem seed
MASK_SEED = 11  # participation stream seed
FLWR_VENV = Path("/tmp/flwr-venv")

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


def _trim():
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
        _trim()
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
        _trim()
        CACHE[key] = sm.problems.Quadratic.random(n, d, seed=seed)
    return CACHE[key]


def lr_for(name, problem):
    L = problem.smoothness
    return 0.5 / L if name == "FedAvg" else 1.0 / (problem.n_clients * L)


def state_bytes(name, n, d):
    return (1 if name == "FedAvg" else 3) * (n + 1) * d * 8


# -------------------------------------------------------------------- timing one cell


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
        res = sm.run(
            engine_method(name, lr, local_steps),
            problem,
            process,
            rounds + 1,
            seed=MASK_SEED,
            metrics=(),
            progress=False,
            backend=backend,
            on_divergence="raise",
            **options,
        )
        return res.wall_time[-1] - res.wall_time[1]

    with PeakRSS() as mem:
        probe = go(1)
    return _repeat(go, probe, budget, reps, max_rounds) + (mem.delta,)


def time_baseline(make, process, *, budget=1.0, reps=3, max_rounds=10_000):
    """(seconds per round, rounds, repeats, peak bytes) of a baseline built by ``make()``
    (its construction, e.g. FOCUS's (N, d) memories, counts towards its memory); one
    untimed warm-up round per run, as for the engine."""

    def go(rounds):
        return run_masks(make(), process, MASK_SEED, rounds, warmup=1)[0]

    with PeakRSS() as mem:
        probe = go(1)
    return _repeat(go, probe, budget, reps, max_rounds) + (mem.delta,)


def _repeat(go, probe, budget, reps, max_rounds):
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


# =============================================================================== scaling


def section_scaling(cfg):
    log("=" * 100)
    log(
        "SCALING: rounds/second and peak memory; FedAvg and FOCUS, 10% uniform participation "
        f"(UniformSample(N, N/10)), K = {K}"
    )
    log(
        "  columns: engine with NumPy programs (compiled=False) / with Numba row-wise programs "
        "(compiled=True) / engine torch (CPU) / per-client loop / batched kernel;"
    )
    log(
        "  ratios: loop time / engine time (speed-up of the engine over the loop; the engine "
        "= numba where installed), torch / numpy, engine / kernel (price of generality); "
        "peak MB = peak RSS above the start of the run"
    )
    log("=" * 100)
    rows_out = []
    budget, max_round = cfg["cell_budget"], cfg["max_round_s"]
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    numba_ok = have_numba()
    prev = {}  # (impl, method, d, kind) -> seconds per round at the previous N

    def cell(impl, name, d, kind, n, fn, data_bytes, extra_bytes):
        key = (impl, name, d, kind)
        if impl == "torch" and not have_torch:
            return {"skip": "no torch"}
        if impl == "numba" and not numba_ok:
            return {"skip": "no numba"}
        est = prev.get(key)
        if est is not None and est * 10 > max_round:
            prev[key] = est * 10
            return {"skip": f"est {est * 10:.0f}s/rnd"}
        if data_bytes + extra_bytes > 0.6 * mem_available():
            return {"skip": "memory"}
        try:
            t, rounds, reps, mem = fn()
        except Exception as e:  # noqa: BLE001 - report, do not stop the grid
            return {"skip": f"error: {type(e).__name__}: {e}"[:60]}
        prev[key] = t
        return {"sec": t, "mem": mem, "rounds": rounds, "reps": reps}

    grid = []
    for d in cfg["dims"]:
        for n in cfg["ns"]:
            grid.append(("quadratic", d, n))
    for n in cfg["ls_ns"]:
        grid.append(("least_squares", cfg["ls_dim"], n))

    for kind, d, n in grid:
        t_build = time.perf_counter()
        m = max(1, n // 10)
        if kind == "quadratic":
            data_bytes = 2 * n * d * 8
            if data_bytes > 0.35 * mem_available():
                for name in METHODS:
                    rows_out.append(
                        {
                            "kind": kind,
                            "n": n,
                            "d": d,
                            "method": name,
                            "skip_all": f"data {data_bytes / 2**30:.0f} GiB does not fit",
                        }
                    )
                continue
            CACHE.clear()
            _trim()
            problem = quad_problem(n, d)
            data = DiagQuadData(problem)
        else:
            data_bytes = 2 * n * cfg["ls_rows"] * d * 8
            CACHE.clear()
            _trim()
            data = LeastSquaresData(n, d, cfg["ls_rows"], seed=SEED)
            problem = data.problem()
            _ = problem.smoothness
        build_s = time.perf_counter() - t_build
        process = UniformSample(n, m)
        for name in METHODS:
            lr = lr_for(name, problem)
            sb = state_bytes(name, n, d)
            row = {
                "kind": kind,
                "n": n,
                "d": d,
                "method": name,
                "state_bytes": sb,
                "build_s": build_s,
            }
            for impl, compiled in (("numpy", False), ("numba", True)):
                time_it = partial(
                    time_engine, name, problem, process, budget=budget, lr=lr, compiled=compiled
                )
                row[impl] = cell(impl, name, d, kind, n, time_it, data_bytes, 2 * sb)
            row["torch"] = cell(
                "torch",
                name,
                d,
                kind,
                n,
                partial(time_engine, name, problem, process, backend="torch", budget=budget, lr=lr),
                data_bytes,
                2 * sb + data_bytes,
            )
            loop_cls = LoopFedAvg if name == "FedAvg" else LoopFOCUS
            row["loop"] = cell(
                "loop",
                name,
                d,
                kind,
                n,
                partial(time_baseline, partial(loop_cls, data, lr, K), process, budget=budget),
                data_bytes,
                sb if name == "FOCUS" else 0,
            )
            if kind == "quadratic":
                kern = KernelFedAvg if name == "FedAvg" else KernelFOCUS
                cb = 1 << 20 if d <= 10 else 1 << 18
                row["kernel"] = cell(
                    "kernel",
                    name,
                    d,
                    kind,
                    n,
                    partial(
                        time_baseline,
                        partial(kern, data, lr, K, chunk_bytes=cb),
                        process,
                        budget=budget,
                    ),
                    data_bytes,
                    2 * sb / 3 if name == "FOCUS" else 0,
                )
            else:
                row["kernel"] = {"skip": "n/a"}
            rows_out.append(row)
        problem = data = None
        CACHE.clear()

    def sec(c):
        return c.get("sec") if isinstance(c, dict) else None

    def show(c):
        if "sec" in c:
            return fmt_rate(c["sec"]) + ("*" if c["rounds"] == 1 and c["reps"] == 1 else "")
        return f"({c['skip']})"

    for kind in ("quadratic", "least_squares"):
        sel = [r for r in rows_out if r["kind"] == kind]
        if not sel:
            continue
        rows = []
        for r in sel:
            if "skip_all" in r:
                rows.append(
                    [f"{r['n']:.0e}", r["d"], r["method"], f"({r['skip_all']})"] + [""] * 12
                )
                continue
            e0, nb, t, lp, k = (sec(r[x]) for x in ("numpy", "numba", "torch", "loop", "kernel"))
            e = nb or e0
            rows.append(
                [
                    f"{r['n']:.0e}",
                    r["d"],
                    r["method"],
                    show(r["numpy"]),
                    show(r["numba"]),
                    show(r["torch"]),
                    show(r["loop"]),
                    show(r["kernel"]),
                    fmt_ratio(lp / e) if e and lp else "-",
                    fmt_ratio(t / e0) if e0 and t else "-",
                    fmt_ratio(e / k) if e and k else "-",
                    fmt_mb(r["numpy"].get("mem")),
                    fmt_mb(r["numba"].get("mem")),
                    fmt_mb(r["torch"].get("mem")),
                    fmt_mb(r["loop"].get("mem")),
                    fmt_mb(r["state_bytes"]),
                ]
            )
        title = (
            "Diagonal quadratic"
            if kind == "quadratic"
            else f"Least squares (d = {cfg['ls_dim']}, {cfg['ls_rows']} rows per client)"
        )
        table(
            [
                "N",
                "d",
                "method",
                "numpy r/s",
                "numba r/s",
                "torch r/s",
                "loop r/s",
                "kernel r/s",
                "loop/eng",
                "torch/numpy",
                "eng/kern",
                "MB numpy",
                "MB numba",
                "MB torch",
                "MB loop",
                "MB state",
            ],
            rows,
            title=title + " — rounds per second (higher is better)",
        )
    log(
        "  * = a single round measured (too slow to repeat); (est Xs/rnd) = skipped because "
        f"the previous N predicts more than {max_round:g} s per round; (memory) = would not "
        "fit in available memory\n"
    )
    RESULTS["scaling"] = rows_out


# =============================================================================== bandwidth


def copy_bandwidth(nbytes, reps=5):
    """Best GB/s of np.copyto over a ``nbytes`` array, counting read + write."""
    src = np.ones(nbytes // 8)
    dst = np.zeros_like(src)
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    del src, dst
    return 2 * nbytes / best / 1e9


def mask_time(process, budget):
    """Seconds per round of drawing a mask and np.flatnonzero alone (min of 3 runs)."""
    masks = process.masks(MASK_SEED)
    np.flatnonzero(next(masks))
    t0 = time.perf_counter()
    np.flatnonzero(next(masks))
    one = time.perf_counter() - t0
    rounds = int(max(1, min(2000, budget / 3 / max(one, 1e-6))))
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(rounds):
            np.flatnonzero(next(masks))
        best = min(best, (time.perf_counter() - t0) / rounds)
    return best


def round_bytes(name, m, d):
    """Bytes a round must move: FedAvg reads h_i, z_i; FOCUS reads h_i, z_i, y_i, g_i and
    writes y_i, g_i (for every participant; the K local steps stay in cache)."""
    return (2 if name == "FedAvg" else 6) * m * d * 8


def section_bandwidth(cfg):
    if "bandwidth" in RESULTS:
        return RESULTS["bandwidth"]
    log("=" * 100)
    log("BANDWIDTH: a large array copy against the bytes a round must move / round time")
    log("=" * 100)
    gbs = copy_bandwidth(cfg["copy_bytes"])
    log(
        f"np.copyto of {cfg['copy_bytes'] / 2**30:.2f} GiB: {gbs:.2f} GB/s (read + write "
        "counted, best of 5)\n"
    )
    n, d = cfg["bw_n"], 10
    m = n // 10
    problem = quad_problem(n, d)
    data = DiagQuadData(problem)
    process = UniformSample(n, m)
    rows, out = [], {"copy_gbs": gbs, "rows": []}
    for name in METHODS:
        lr = lr_for(name, problem)
        te = time_engine(name, problem, process, budget=cfg["bw_budget"], lr=lr)[0]
        kern = KernelFedAvg if name == "FedAvg" else KernelFOCUS
        tk = time_baseline(
            partial(kern, data, lr, K, chunk_bytes=1 << 20), process, budget=cfg["bw_budget"]
        )[0]
        b = round_bytes(name, m, d)
        tm = mask_time(process, cfg["bw_budget"] / 2)
        # the floor: read the rows the round reads and nothing else (FOCUS also reads y_i
        # and g_i: two (N, d) arrays stand in for them) and write nothing, so no round
        # can be faster; its "of copy" counts the round's bytes, writes included
        masks = process.masks(MASK_SEED + 1)
        runs = [[np.flatnonzero(next(masks)) for _ in range(20)] for _ in range(3)]
        extra = [np.ones((n, d)) for _ in range(0 if name == "FedAvg" else 2)]
        tf = read_floor([data.hessians, data.centers, *extra], runs)
        del extra
        row = {
            "method": name,
            "n": n,
            "d": d,
            "participants": m,
            "bytes": b,
            "engine_s": te,
            "kernel_s": tk,
            "engine_gbs": b / te / 1e9,
            "kernel_gbs": b / tk / 1e9,
            "mask_s": tm,
            "read_floor_s": tf,
        }
        out["rows"].append(row)
        rows.append(
            [
                name,
                f"{n:.0e}",
                d,
                m,
                f"{b / 1e6:.1f}",
                fmt_ms(te),
                f"{b / te / 1e9:.2f}",
                f"{b / te / 1e9 / gbs:.1%}",
                fmt_ms(tk),
                f"{b / tk / 1e9:.2f}",
                f"{b / tk / 1e9 / gbs:.1%}",
                fmt_ms(tm),
                fmt_ms(tf) if tf else "-",
                f"{b / tf / 1e9 / gbs:.1%}" if tf else "-",
            ]
        )
    table(
        [
            "method",
            "N",
            "d",
            "|S|",
            "MB/round",
            "engine ms",
            "eng GB/s",
            "of copy",
            "kernel ms",
            "kern GB/s",
            "of copy",
            "mask alone ms",
            "read only ms",
            "of copy",
        ],
        rows,
        title=f"Effective bandwidth of one round (K = {K}, mask drawing included); read only "
        "= reading the rows the round reads, writing nothing (Numba, 2 threads): no round "
        "can beat it",
    )
    RESULTS["bandwidth"] = out
    return out


# =============================================================================== headline


def section_headline(cfg):
    if "headline" in RESULTS:
        return RESULTS["headline"]
    log("=" * 100)
    n, d, k, target = cfg["head_n"], 10, 3, 1e-10
    log(
        f"HEADLINE: FOCUS, N = {n:,}, diagonal quadratic d = {d}, Bernoulli p_i ~ U[0.05, 0.2], "
        f"K = {k}, one step size lr = c / (N L) for server and clients, to relative error "
        f"{target:g}"
    )
    log("=" * 100)
    out = {"n": n}
    # -- step-size grid: the rounds needed do not depend on N for a fixed c (lr = c/(N L)
    # normalises the sum of N gradients), so the grid runs at N = grid_n with the kernel
    # (checked against the engine) and the best c is then run at full size.
    gn = cfg["grid_n"]
    gp = sm.problems.Quadratic.random(gn, d, seed=SEED)
    gproc = Bernoulli.heterogeneous(gn, 0.05, 0.2, seed=1)
    gdata = DiagQuadData(gp)
    check_against_engine(
        KernelFOCUS(gdata, 4.0 / (gn * gp.smoothness), k),
        sm.algorithms.FOCUS(4.0 / (gn * gp.smoothness), k),
        gp,
        gproc,
        MASK_SEED,
        rounds=6,
    )
    grid_rows, best = [], None
    for c in cfg["grid_c"]:
        kern = KernelFOCUS(gdata, c / (gn * gp.smoothness), k)
        masks = gproc.masks(MASK_SEED)
        e0 = np.linalg.norm(kern.server - gp.x_star)
        hit, status = None, "converges"
        for r in range(1, cfg["grid_rounds"] + 1):
            kern.round(np.flatnonzero(next(masks)))
            e = np.linalg.norm(kern.server - gp.x_star) / e0
            if not np.isfinite(e) or e > 1e6:
                status = f"diverges (round {r})"
                break
            if e <= target:
                hit = r
                break
        else:
            status = f"not below {target:g} in {cfg['grid_rounds']} rounds (at {e:.1e})"
        grid_rows.append({"c": c, "rounds": hit, "status": status})
        if hit is not None and (best is None or hit <= best[1]):
            best = (c, hit)
    largest = max((g["c"] for g in grid_rows if g["rounds"] is not None), default=None)
    table(
        ["c", f"rounds to {target:g}", "status"],
        [[g["c"], g["rounds"] or "-", g["status"]] for g in grid_rows],
        title=f"Step-size grid lr = c/(N L) at N = {gn:,} (batched kernel, same masks law)",
    )
    if best is None:
        log("no step size in the grid reached the target; headline NOT MEASURED\n")
        RESULTS["headline"] = out
        return out
    c = best[0]
    log(f"chosen c = {c:g} (fewest rounds; largest c that converged in the grid: {largest:g})\n")
    out.update({"grid": grid_rows, "c": c, "largest_converging_c": largest})

    problem = quad_problem(n, d)
    process = Bernoulli.heterogeneous(n, 0.05, 0.2, seed=1)
    lr = c / (n * problem.smoothness)
    data = DiagQuadData(problem)
    # kernel: full run to the target
    kern = KernelFOCUS(data, lr, k, chunk_bytes=1 << 20)
    t0 = time.perf_counter()
    masks = process.masks(MASK_SEED)
    e0 = np.linalg.norm(kern.server - problem.x_star)
    setup_k = time.perf_counter() - t0
    t0 = time.perf_counter()
    k_hit, k_time = None, None
    traj = [kern.server.copy()]
    for r in range(1, cfg["head_max_rounds"] + 1):
        kern.round(np.flatnonzero(next(masks)))
        traj.append(kern.server.copy())
        if np.linalg.norm(kern.server - problem.x_star) / e0 <= target:
            k_hit, k_time = r, time.perf_counter() - t0 + setup_k
            break
        if cfg["head_kernel_cap_s"] and time.perf_counter() - t0 > cfg["head_kernel_cap_s"]:
            break
    k_rounds = len(traj) - 1
    k_per_round = (time.perf_counter() - t0) / k_rounds
    out.update(
        {"kernel_rounds": k_hit, "kernel_seconds": k_time, "kernel_s_per_round": k_per_round}
    )
    del kern
    # engine: a short run for its per-round time and to check it against the kernel's
    # identical trajectory, then the full run when it is expected to fit the cap
    short = cfg["head_engine_probe"]
    t0 = time.perf_counter()
    res = sm.run(
        sm.algorithms.FOCUS(lr, k),
        problem,
        process,
        short,
        seed=MASK_SEED,
        metrics=("distance",),
        progress=False,
        compiled=ENGINE["compiled"],
    )
    call = time.perf_counter() - t0
    setup_e = call - res.wall_time[-1]
    e_per_round = (res.wall_time[-1] - res.wall_time[1]) / (short - 1)
    e_first = res.wall_time[1]
    m = min(short, k_rounds)
    diff = np.abs(res.server[: m + 1] - np.array(traj[: m + 1])).max()
    out.update(
        {
            "engine_s_per_round": e_per_round,
            "engine_setup_s": setup_e,
            "engine_vs_kernel_maxdiff": float(diff),
        }
    )
    rounds_needed = k_hit
    if rounds_needed is None:
        log(
            "the kernel did not reach the target within its cap; engine time extrapolated "
            "from the grid's rounds"
        )
        rounds_needed = best[1]
    est = setup_e + e_first + e_per_round * (rounds_needed - 1)
    if est <= cfg["head_engine_cap_s"]:
        rounds = int(rounds_needed * 1.05) + 5
        t0 = time.perf_counter()
        res = sm.run(
            sm.algorithms.FOCUS(lr, k),
            problem,
            process,
            rounds,
            seed=MASK_SEED,
            metrics=("distance",),
            progress=False,
            compiled=ENGINE["compiled"],
        )
        call = time.perf_counter() - t0
        hit = res.rounds_to(target)
        setup_e = call - res.wall_time[-1]
        e_time = setup_e + res.wall_time[hit] if hit is not None else None
        out.update(
            {
                "engine_rounds": hit,
                "engine_seconds": e_time,
                "engine_measured": True,
                "engine_s_per_round": res.wall_time[-1] / rounds,
                "engine_rate": res.rate(),
            }
        )
    else:
        out.update(
            {"engine_rounds": rounds_needed, "engine_seconds": est, "engine_measured": False}
        )
    rows = [
        [
            f"engine ({engine_label()})",
            out["engine_rounds"] or "-",
            fmt_ms(out["engine_s_per_round"]),
            ("" if out.get("engine_measured") else "~")
            + (f"{out['engine_seconds']:.1f}" if out["engine_seconds"] else "-"),
            "measured"
            if out.get("engine_measured")
            else f"extrapolated: {short} rounds timed x rounds of the identical kernel run",
        ],
        [
            "batched NumPy kernel",
            k_hit or "-",
            fmt_ms(k_per_round),
            f"{k_time:.1f}" if k_time else "-",
            "measured" if k_time else "did not reach",
        ],
    ]
    table(
        ["implementation", f"rounds to {target:g}", "ms/round", "seconds to target", "how"],
        rows,
        title=f"Time to relative error {target:g} (setup of the state included; "
        f"engine == kernel to {diff:.1e} over {m} rounds)",
    )
    RESULTS["headline"] = out
    return out


# =============================================================================== flower


def flower_python():
    py = FLWR_VENV / "bin" / "python"
    if py.exists():
        ok = subprocess.run([str(py), "-c", "import flwr, ray"], capture_output=True)
        if ok.returncode == 0:
            return py, None
    return None, "no working /tmp/flwr-venv"


def install_flower(timeout=900):
    py311 = shutil.which("python3.11")
    if py311 is None:
        return None, "python3.11 not found on PATH"
    log(f"installing flwr[simulation] into {FLWR_VENV} (separate venv, python3.11) ...")
    try:
        r = subprocess.run(
            [py311, "-m", "venv", str(FLWR_VENV)], capture_output=True, text=True, timeout=120
        )
        if r.returncode:
            return None, f"venv creation failed: {r.stderr.strip()[-300:]}"
        r = subprocess.run(
            [str(FLWR_VENV / "bin" / "pip"), "install", "-q", "flwr[simulation]"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if r.returncode:
            return None, f"pip install flwr[simulation] failed: {r.stderr.strip()[-500:]}"
    except subprocess.TimeoutExpired:
        return None, f"installing flwr[simulation] took longer than {timeout} s"
    return flower_python()


def section_flower(cfg):
    if "flower" in RESULTS:
        return RESULTS["flower"]
    log("=" * 100)
    log(
        "FLOWER: the same FedAvg (diagonal quadratic d = 10, UniformSample(N, N/10), K = 5, "
        "same problem and masks) in Flower's simulation engine (Ray virtual clients)"
    )
    log("=" * 100)
    out = {"measured": False}
    RESULTS["flower"] = out
    if cfg["skip_flower"]:
        out["why"] = "skipped in --quick (run --only flower)"
        log(f"NOT MEASURED: {out['why']}\n")
        return out
    py, why = flower_python()
    if py is None and not cfg["no_install"]:
        py, why = install_flower()
    if py is None:
        out["why"] = why
        log(f"NOT MEASURED: {why}\n")
        return out
    version = subprocess.run(
        [str(py), "-c", "import flwr, ray; print(flwr.__version__, ray.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    out["flwr_version"], out["ray_version"] = version[:2]
    rows, out["rows"] = [], []
    for n, rounds in cfg["flower_sizes"]:
        d = 10
        problem = quad_problem(n, d)
        process = UniformSample(n, n // 10)
        lr = lr_for("FedAvg", problem)
        masks = process.masks(MASK_SEED)
        parts = [np.flatnonzero(next(masks)) for _ in range(rounds)]
        with tempfile.TemporaryDirectory() as tmp:
            inp, outp = Path(tmp) / "in.npz", Path(tmp) / "out.json"
            np.savez(
                inp,
                centers=problem.centers,
                hessians=problem.hessians,
                lr=lr,
                local_steps=K,
                x0=np.zeros(d),
                participants=np.concatenate(parts),
                sizes=np.array([p.size for p in parts]),
            )
            t0 = time.perf_counter()
            try:
                r = subprocess.run(
                    [str(py), str(HERE / "flower_sim.py"), str(inp), str(outp)],
                    capture_output=True,
                    text=True,
                    timeout=cfg["flower_timeout"],
                )
            except subprocess.TimeoutExpired:
                why = f"N = {n}: Flower simulation did not finish in {cfg['flower_timeout']} s"
                log(f"NOT MEASURED: {why}")
                out.setdefault("failures", []).append(why)
                continue
            wall = time.perf_counter() - t0
            if r.returncode or not outp.exists():
                why = (
                    f"N = {n}: Flower simulation failed (exit {r.returncode}): "
                    + (r.stderr.strip() or r.stdout.strip())[-600:]
                )
                log(f"NOT MEASURED: {why}")
                out.setdefault("failures", []).append(why)
                continue
            fl = json.loads(outp.read_text())
        ref = sm.run(
            sm.algorithms.FedAvg(lr, K),
            problem,
            process,
            rounds,
            seed=MASK_SEED,
            metrics=(),
            progress=False,
        )
        servers = np.array(fl["servers"])
        diff = float(np.abs(servers - ref.server[1:]).max())
        if diff > 1e-8:
            why = f"N = {n}: Flower's trajectory differs from stochmix.run by {diff:.2e}"
            log(f"NOT MEASURED: {why}")
            out.setdefault("failures", []).append(why)
            continue
        per = np.array(fl["round_seconds"])
        steady = per[1:] if per.size > 1 else per  # round 1 starts the Ray actors
        t_fl = float(np.median(steady))
        t_eng = time_engine("FedAvg", problem, process, budget=cfg["cell_budget"], lr=lr)[0]
        row = {
            "n": n,
            "rounds": rounds,
            "flower_s_per_round": t_fl,
            "flower_first_round_s": float(per[0]),
            "flower_wall_s": wall,
            "engine_s_per_round": t_eng,
            "ratio": t_fl / t_eng,
            "maxdiff": diff,
        }
        out["rows"].append(row)
        rows.append(
            [
                f"{n:.0e}",
                rounds,
                f"{per[0]:.2f}",
                f"{t_fl:.3f}",
                fmt_ms(t_eng),
                fmt_ratio(t_fl / t_eng),
                f"{diff:.1e}",
                f"{wall:.0f}",
            ]
        )
    if rows:
        out["measured"] = True
        table(
            [
                "N",
                "rounds",
                "Flower 1st round s",
                "Flower s/round",
                "engine ms/round",
                "Flower/engine",
                "max |diff|",
                "Flower wall s",
            ],
            rows,
            title=f"Flower {out['flwr_version']} (Ray {out['ray_version']}) start_simulation, "
            f"median over rounds 2.. vs engine ({engine_label()})",
        )
    return out


# =============================================================================== targets


def section_targets(cfg):
    log("=" * 100)
    log(
        f"TARGETS (each a ratio measured in this run; FedAvg and FOCUS, diagonal quadratic, "
        f"N = 10^4, 10% participation, K = {K}, unless stated)"
    )
    log("=" * 100)
    checks = []

    def verdict(ok):
        return "PASS" if ok else "FAIL"

    def add(target, what, value, ok, detail=""):
        checks.append(
            {
                "target": target,
                "what": what,
                "value": value,
                "status": (ok if isinstance(ok, str) else verdict(ok))
                + (" (quick)" if cfg["quick"] and not isinstance(ok, str) else ""),
                "detail": detail,
            }
        )

    n = 10**4
    budget = cfg["target_budget"]
    # ---- T1 (loop) and T3 (kernel) at N = 10^4
    need = {10: 30.0, 100: 5.0, 1000: 2.0}
    rows = []
    for d in cfg["target_dims"]:
        problem = quad_problem(n, d)
        data = DiagQuadData(problem)
        process = UniformSample(n, n // 10)
        for name in METHODS:
            lr = lr_for(name, problem)
            kern = KernelFedAvg if name == "FedAvg" else KernelFOCUS
            loop = LoopFedAvg if name == "FedAvg" else LoopFOCUS
            method = engine_method(name, lr, K)
            check_against_engine(kern(data, lr, K), method, problem, process, MASK_SEED)
            check_against_engine(loop(data, lr, K), method, problem, process, MASK_SEED, rounds=2)
            cb, _ = tune_chunk(
                lambda c, k=kern, lr=lr, x=data: k(x, lr, K, chunk_bytes=c),
                process,
                MASK_SEED,
                rounds=3 if d < 1000 else 1,
            )
            te = time_engine(name, problem, process, budget=budget, lr=lr)[0]
            te_np = te
            if ENGINE["compiled"]:  # the NumPy programs too, for reference
                te_np = time_engine(name, problem, process, budget=budget, lr=lr, compiled=False)[0]
            tl = time_baseline(partial(loop, data, lr, K), process, budget=budget)[0]
            tk = time_baseline(partial(kern, data, lr, K, chunk_bytes=cb), process, budget=budget)[
                0
            ]
            extra = ""
            if name == "FOCUS":
                ty = time_baseline(
                    partial(KernelFOCUSNoY, data, lr, K, chunk_bytes=cb), process, budget=budget / 2
                )[0]
                extra = f"(a kernel without Y: {fmt_ms(ty)} ms)"
            rows.append(
                [
                    d,
                    name,
                    fmt_ms(te),
                    fmt_ms(te_np),
                    fmt_ms(tl),
                    fmt_ms(tk),
                    str(cb and f"{cb >> 10} KiB"),
                    fmt_ratio(tl / te),
                    fmt_ratio(tl / te_np),
                    fmt_ratio(te / tk),
                    extra,
                ]
            )
            add(
                "vs loop",
                f"{name} d={d}",
                tl / te,
                tl / te >= need[d],
                f">= {need[d]:g}x faster than the per-client loop",
            )
            add(
                "vs kernel",
                f"{name} d={d}",
                te / tk,
                te / tk <= 1.5,
                "engine time <= 1.5x the batched kernel's",
            )
    table(
        [
            "d",
            "method",
            "engine ms",
            "numpy progs ms",
            "loop ms",
            "kernel ms",
            "kernel chunk",
            "loop/engine",
            "loop/numpy progs",
            "engine/kernel",
            "",
        ],
        rows,
        title=f"Engine ({engine_label()}; NumPy programs for reference) vs per-client loop "
        "and vs batched kernel, per round",
    )

    # ---- T4 costly gradients: least squares, 50 rows per client
    d, rows_per = 100, 50
    ls = LeastSquaresData(n, d, rows_per, seed=SEED)
    problem = ls.problem()
    process = UniformSample(n, n // 10)
    rows = []
    masks = process.masks(MASK_SEED)
    parts = [np.flatnonzero(next(masks)) for _ in range(8)]
    x = np.zeros(d)
    pts = np.broadcast_to(x, (parts[0].size, d)).copy()
    np.testing.assert_allclose(
        ls_gradients(ls.a, ls.b, parts[0], pts),
        problem.gradients(parts[0], pts),
        rtol=1e-10,
        atol=1e-8,
    )

    def grads_alone(rounds):
        masks = process.masks(MASK_SEED)
        t0 = time.perf_counter()
        for _ in range(rounds):
            s = np.flatnonzero(next(masks))
            p = np.broadcast_to(x, (s.size, d)).copy()
            for _ in range(K):
                ls_gradients(ls.a, ls.b, s, p)
        return time.perf_counter() - t0

    probe = grads_alone(1)
    tg = _repeat(grads_alone, probe, budget, 3, 1000)[0]
    for name in METHODS:
        lr = 0.5 / problem.smoothness if name == "FedAvg" else 0.5 / (n * problem.smoothness)
        te = time_engine(name, problem, process, budget=budget, lr=lr)[0]
        rows.append([name, fmt_ms(te), fmt_ms(tg), fmt_ratio(te / tg)])
        add(
            "costly gradients",
            f"{name} LS d=100 50 rows",
            te / tg,
            te / tg <= 1.5,
            "engine round <= 1.5x its K gradient calls alone",
        )
    table(
        ["method", "engine ms/round", f"{K} x gradients alone ms", "engine/gradients"],
        rows,
        title=f"Least squares d = {d}, {rows_per} rows per client, N = {n:,}, "
        f"|S| = {n // 10}: engine vs the same gradients in one batched call per step",
    )
    ls = problem = None
    CACHE.clear()
    _trim()

    # ---- T5 cost follows participants, not N: UniformSample(N, 1000)
    rows = []
    for name in METHODS:
        per, kper = {}, {}
        for nn in (10**3, cfg["flat_n"]):
            problem = quad_problem(nn, 10)
            data = DiagQuadData(problem)
            process = UniformSample(nn, 1000)
            lr = lr_for(name, problem)
            per[nn] = time_engine(name, problem, process, budget=budget, lr=lr)[0]
            per[("numpy", nn)] = per[nn]
            if ENGINE["compiled"]:  # the NumPy programs too, for reference
                per[("numpy", nn)] = time_engine(
                    name, problem, process, budget=budget, lr=lr, compiled=False
                )[0]
            kern = KernelFedAvg if name == "FedAvg" else KernelFOCUS
            kper[nn] = time_baseline(
                partial(kern, data, lr, K, chunk_bytes=1 << 20), process, budget=budget / 2
            )[0]
            kper[("mask", nn)] = mask_time(process, budget / 4)
        big = cfg["flat_n"]
        ratio = per[big] / per[10**3]
        rows.append(
            [
                name,
                fmt_ms(per[10**3]),
                fmt_ms(per[big]),
                fmt_ratio(ratio),
                fmt_ms(per[("numpy", 10**3)]),
                fmt_ms(per[("numpy", big)]),
                fmt_ratio(per[("numpy", big)] / per[("numpy", 10**3)]),
                fmt_ms(kper[10**3]),
                fmt_ms(kper[big]),
                fmt_ratio(kper[big] / kper[10**3]),
                fmt_ms(kper[("mask", 10**3)]),
                fmt_ms(kper[("mask", big)]),
            ]
        )
        add(
            "flat in N",
            f"{name} d=10 |S|=1000 N=1e3->{big:.0e}",
            ratio,
            ratio <= 2.0,
            "time per round grows <= 2x",
        )
    table(
        [
            "method",
            "engine N=1e3 ms",
            f"engine N={cfg['flat_n']:.0e} ms",
            "growth",
            "numpy progs 1e3",
            f"numpy progs {cfg['flat_n']:.0e}",
            "growth",
            "kernel N=1e3 ms",
            f"kernel N={cfg['flat_n']:.0e}",
            "kernel growth",
            "mask alone 1e3",
            f"mask alone {cfg['flat_n']:.0e}",
        ],
        rows,
        title="Per-round time with UniformSample(N, 1000), d = 10 (mask alone = drawing the "
        "mask and np.flatnonzero, which every implementation pays)",
    )

    # ---- T6 bandwidth
    bw = section_bandwidth(cfg)
    for r in bw["rows"]:
        frac = r["engine_gbs"] / bw["copy_gbs"]
        add(
            "bandwidth",
            f"{r['method']} N={r['n']:.0e} |S|={r['participants']} d={r['d']}",
            frac,
            frac >= 0.3,
            f"round bytes / round time >= 30% of copy ({bw['copy_gbs']:.1f} GB/s)",
        )

    # ---- T7 peak memory beyond the data vs the state's size
    rows = []
    for nn, d in cfg["mem_cases"]:
        problem = quad_problem(nn, d)
        process = UniformSample(nn, nn // 10)
        for name in METHODS:
            lr = lr_for(name, problem)
            probe = time_engine(name, problem, process, budget=0.01, reps=1, max_rounds=1, lr=lr)[0]
            rounds = int(max(3, min(cfg["mem_rounds"], cfg["mem_budget"] / probe)))
            with PeakRSS() as mem:
                sm.run(
                    engine_method(name, lr, K),
                    problem,
                    process,
                    rounds,
                    seed=MASK_SEED,
                    metrics=(),
                    progress=False,
                )
            sb = state_bytes(name, nn, d)
            ratio = mem.delta / sb if mem.delta is not None else None
            rows.append(
                [f"{nn:.0e}", d, name, rounds, fmt_mb(mem.delta), fmt_mb(sb), fmt_ratio(ratio)]
            )
            add(
                "memory",
                f"{name} N={nn:.0e} d={d} ({rounds} rounds)",
                ratio,
                "NOT MEASURED" if ratio is None else ratio <= 2.0,
                "peak memory beyond the data <= 2x the state",
            )
    table(
        ["N", "d", "method", "rounds", "peak MB above data", "state MB", "ratio"],
        rows,
        title=f"Engine ({engine_label()}) peak resident memory during run() above the "
        "problem's data",
    )

    # ---- T2 Flower
    fl = section_flower(cfg)
    for nn in (10**3, 10**4):
        row = next((r for r in fl.get("rows", []) if r["n"] == nn), None)
        if row is None:
            add(
                "vs Flower",
                f"FedAvg N={nn:.0e} d=10",
                None,
                "NOT MEASURED",
                fl.get("why") or "; ".join(fl.get("failures", [])) or "not run",
            )
        else:
            add(
                "vs Flower",
                f"FedAvg N={nn:.0e} d=10",
                row["ratio"],
                row["ratio"] >= 1000,
                ">= 1000x faster per round than Flower's simulation engine",
            )

    # ---- T8 headline
    hd = section_headline(cfg)
    if hd.get("engine_seconds") is None:
        add("headline", "FOCUS N=1e6 to 1e-10", None, "NOT MEASURED", "see headline section")
    else:
        how = "measured" if hd.get("engine_measured") else "extrapolated (too slow to run)"
        add(
            "headline",
            f"FOCUS N={hd['n']:.0e} to 1e-10, c={hd['c']:g}",
            hd["engine_seconds"],
            hd["engine_seconds"] < 20.0 and hd["n"] >= 10**6,
            f"< 20 s wall time; {how}; kernel {hd.get('kernel_seconds') or float('nan'):.1f} s"
            + ("" if hd["n"] >= 10**6 else " (quick mode: smaller N, not the target)"),
        )

    rows = []
    for c in checks:
        v = c["value"]
        if v is None:
            shown = "-"
        elif c["target"] in ("bandwidth",):
            shown = f"{v:.1%}"
        elif c["target"] == "headline":
            shown = f"{v:.1f} s"
        else:
            shown = fmt_ratio(v)
        rows.append([c["target"], c["what"], shown, c["status"], c["detail"]])
    table(["target", "case", "measured", "status", "requirement"], rows, title="TARGETS SUMMARY")
    if cfg["quick"]:
        log("(quick) = measured at --quick's smaller sizes and budgets, not the target's own\n")
    RESULTS["targets"] = checks


# =============================================================================== profile


def section_profile(cfg):
    log("=" * 100)
    log("PROFILE: cProfile of stochmix.run (numpy), top functions by own time")
    log(
        "  (a function's own time includes the NumPy arithmetic it writes as operators, e.g. "
        "a * b, which cProfile does not list separately; the run's setup is included)"
    )
    log("=" * 100)
    out = []
    for nn, d, rounds in cfg["profile_cases"]:
        problem = quad_problem(nn, d)
        process = UniformSample(nn, nn // 10)
        for name in METHODS:
            lr = lr_for(name, problem)
            prof = cProfile.Profile()
            prof.enable()
            res = sm.run(
                engine_method(name, lr, K),
                problem,
                process,
                rounds,
                seed=MASK_SEED,
                metrics=(),
                progress=False,
            )
            prof.disable()
            stats = pstats.Stats(prof)
            total = res.wall_time[-1]
            top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[: cfg["profile_top"]]
            log(
                f"-- {name} N={nn:.0e} d={d}: {rounds} rounds, {total / rounds * 1e3:.2f} "
                "ms/round under the profiler"
            )
            rows = []
            for (file, line, func), (_, nc, tt, ct, _) in top:
                where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
                rows.append(
                    [
                        f"{tt / rounds * 1e3:.3f}",
                        f"{tt / total:.0%}",
                        f"{ct / rounds * 1e3:.3f}",
                        nc // rounds,
                        f"{func} ({where})",
                    ]
                )
                out.append(
                    {
                        "case": f"{name} N={nn} d={d}",
                        "func": func,
                        "where": where,
                        "tottime_ms_per_round": tt / rounds * 1e3,
                        "cumtime_ms_per_round": ct / rounds * 1e3,
                        "calls_per_round": nc / rounds,
                    }
                )
            table(["own ms/rnd", "share", "cum ms/rnd", "calls/rnd", "function"], rows)
    RESULTS["profile"] = out


# =============================================================================== main

SECTIONS = {
    "scaling": section_scaling,
    "flower": section_flower,
    "bandwidth": section_bandwidth,
    "headline": section_headline,
    "targets": section_targets,
    "profile": section_profile,
}
DEFAULT = ("scaling", "flower", "bandwidth", "headline", "targets")


def config(quick):
    if not quick:
        return {
            "dims": (10, 100, 1000),
            "ns": (10**2, 10**3, 10**4, 10**5, 10**6),
            "ls_dim": 100,
            "ls_rows": 10,
            "ls_ns": (10**2, 10**3, 10**4, 10**5),
            "cell_budget": 0.8,
            "max_round_s": 4.0,
            "target_budget": 2.0,
            "target_dims": (10, 100, 1000),
            "flat_n": 10**6,
            "mem_cases": ((10**4, 10), (10**4, 100), (10**4, 1000), (10**6, 10)),
            "mem_rounds": 1100,
            "mem_budget": 8.0,
            "copy_bytes": 1 << 30,
            "bw_n": 10**6,
            "bw_budget": 2.0,
            "head_n": 10**6,
            "grid_n": 10**4,
            "grid_c": (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256),
            "grid_rounds": 1500,
            "head_max_rounds": 2000,
            "head_kernel_cap_s": 120.0,
            "head_engine_probe": 15,
            "head_engine_cap_s": 80.0,
            "flower_sizes": ((10**3, 6), (10**4, 3)),
            "flower_timeout": 300,
            "skip_flower": False,
            "profile_cases": ((10**4, 10, 200), (10**4, 100, 50), (10**4, 1000, 8), (10**6, 10, 4)),
            "profile_top": 12,
        }
    return {
        "dims": (10, 100),
        "ns": (10**2, 10**3, 10**4),
        "ls_dim": 100,
        "ls_rows": 10,
        "ls_ns": (10**2, 10**3),
        "cell_budget": 0.12,
        "max_round_s": 1.0,
        "target_budget": 0.3,
        "target_dims": (10, 100),
        "flat_n": 10**5,
        "mem_cases": ((10**4, 10),),
        "mem_rounds": 300,
        "mem_budget": 1.0,
        "copy_bytes": 1 << 28,
        "bw_n": 10**5,
        "bw_budget": 0.4,
        "head_n": 10**5,
        "grid_n": 10**4,
        "grid_c": (0.5, 2, 8, 32),
        "grid_rounds": 800,
        "head_max_rounds": 800,
        "head_kernel_cap_s": 8.0,
        "head_engine_probe": 5,
        "head_engine_cap_s": 5.0,
        "flower_sizes": ((10**3, 3),),
        "flower_timeout": 120,
        "skip_flower": True,
        "profile_cases": ((10**4, 10, 50), (10**4, 100, 10)),
        "profile_top": 8,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a ~1 minute version")
    ap.add_argument(
        "--only",
        action="append",
        choices=sorted(SECTIONS),
        help="run only this section (repeatable)",
    )
    ap.add_argument("--json", metavar="OUT", help="write all results as JSON")
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads for the Torch backend (default 1: with 2 "
        "threads on a loaded 2-core machine its OpenMP pool can be ~100x slower)",
    )
    ap.add_argument(
        "--engine",
        choices=("numba", "numpy"),
        default="numba" if have_numba() else "numpy",
        help="how the engine runs node-local phases in the timings of every section but "
        "scaling (which shows both): numba = compiled=True (the default when Numba is "
        "installed), numpy = compiled=False",
    )
    ap.add_argument(
        "--no-install",
        action="store_true",
        help="never try to install flwr[simulation] into /tmp/flwr-venv",
    )
    args = ap.parse_args(argv)
    cfg = config(args.quick)
    cfg["no_install"] = args.no_install
    cfg["quick"] = args.quick
    ENGINE["compiled"] = args.engine == "numba"
    if args.only and "flower" in args.only:
        cfg["skip_flower"] = False
    try:
        import torch

        torch.set_num_threads(args.torch_threads)
    except ImportError:
        pass
    info = machine_info()
    RESULTS["machine"] = info
    info["engine"] = engine_label()
    log(
        f"stochmix {info['stochmix']}, numpy {info['numpy']}, numba {info.get('numba')}, "
        f"torch {info.get('torch')} ({info.get('torch_threads')} threads), Python "
        f"{info['python']}, {info['cpus']} CPUs, {info['mem_total_gb']} GiB; load average at "
        f"start {info['loadavg']}; engine timings with {engine_label()} node-local programs"
        + (" (quick mode)" if args.quick else "")
    )
    t0 = time.perf_counter()
    for name in args.only or DEFAULT:
        ts = time.perf_counter()
        SECTIONS[name](cfg)
        log(f"[{name}: {time.perf_counter() - ts:.0f} s]\n")
    load = os.getloadavg()
    RESULTS["machine"]["loadavg_end"] = [round(x, 2) for x in load]
    RESULTS["total_seconds"] = time.perf_counter() - t0
    log(
        f"total {RESULTS['total_seconds']:.0f} s; load average at end "
        f"{RESULTS['machine']['loadavg_end']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=1, default=_jsonable))
        log(f"results written to {args.json}")


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


if __name__ == "__main__":
    main()
