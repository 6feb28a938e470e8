"""The ``targets`` section: every target of the issue as a ratio measured in this run,
PASS/FAIL each (it runs the bandwidth, flower and headline sections when they have not
run)."""

from __future__ import annotations

import time
from functools import partial

import numpy as np
from baselines import (
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
    tune_chunk,
)
from harness import (
    CACHE,
    ENGINE,
    MASK_SEED,
    METHODS,
    RESULTS,
    SEED,
    K,
    PeakRSS,
    budgeted_draw_time,
    engine_label,
    fmt_mb,
    fmt_ms,
    fmt_ratio,
    log,
    lr_for,
    quad_problem,
    repeat_rounds,
    run_engine,
    state_bytes,
    table,
    time_baseline,
    time_engine,
    trim_memory,
)

from sections.bandwidth import section_bandwidth
from sections.flower import section_flower
from sections.headline import section_headline
from stochmix.participation import UniformSample


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
    tg = repeat_rounds(grads_alone, probe, budget, 3, 1000)[0]
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
    trim_memory()

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
            kper[("mask", nn)] = budgeted_draw_time(process, budget / 4)
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
            "draw alone 1e3",
            f"draw alone {cfg['flat_n']:.0e}",
        ],
        rows,
        title="Per-round time with UniformSample(N, 1000), d = 10 (draw alone = drawing the "
        "participants as a run draws them, process.participants)",
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
                run_engine(
                    engine_method(name, lr, K),
                    problem,
                    process,
                    rounds,
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
