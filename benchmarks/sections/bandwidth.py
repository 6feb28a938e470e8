"""The ``bandwidth`` section: the bytes a round must move per second of its time, against
the copy bandwidth of the machine and the floor of reading those rows alone."""

from __future__ import annotations

import time
from functools import partial

import numpy as np
from baselines import DiagQuadData, KernelFedAvg, KernelFOCUS, read_floor
from harness import (
    MASK_SEED,
    METHODS,
    RESULTS,
    K,
    budgeted_draw_time,
    fmt_ms,
    log,
    lr_for,
    quad_problem,
    table,
    time_baseline,
    time_engine,
)

from stochmix.participation import UniformSample


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
        tm = budgeted_draw_time(process, cfg["bw_budget"] / 2)
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
            "draw alone ms",
            "read only ms",
            "of copy",
        ],
        rows,
        title=f"Effective bandwidth of one round (K = {K}, drawing the participants "
        "included); read only = reading the rows the round reads, writing nothing (Numba, 2 "
        "threads, prefetching as the compiled loop does): no round can beat it",
    )
    RESULTS["bandwidth"] = out
    return out
