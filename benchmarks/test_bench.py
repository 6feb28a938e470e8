"""pytest-benchmark regression suite for the engine (not collected by default: pytest's
testpaths is tests/).

    .venv/bin/pip install pytest-benchmark
    .venv/bin/python -m pytest benchmarks/test_bench.py
    .venv/bin/python -m pytest benchmarks/test_bench.py --benchmark-autosave      # store a run
    .venv/bin/python -m pytest benchmarks/test_bench.py --benchmark-compare       # vs the last
    .venv/bin/python -m pytest benchmarks/test_bench.py --benchmark-disable       # smoke only

Each benchmark times ``ROUNDS`` rounds of ``stochmix.run`` (FedAvg and FOCUS, diagonal
quadratic, UniformSample(N, N/10), K = 5; NumPy programs, and Numba row-wise programs where
Numba is installed) at a few sizes, next to the batched NumPy kernel
of the same rounds (group ``...-kernel``) so that a comparison shows the engine's price of
generality too. There are no timing assertions; the only assertions check that the engine
and the kernel compute the same server model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytest_benchmark")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from baselines import (  # noqa: E402
    DiagQuadData,
    KernelFedAvg,
    KernelFOCUS,
    LeastSquaresData,
    engine_method,
    run_masks,
)

import stochmix as sm  # noqa: E402
from stochmix.participation import UniformSample  # noqa: E402

K = 5
ROUNDS = 10
SIZES = [(10**3, 10), (10**4, 10), (10**4, 100)]
_PROBLEMS: dict = {}


def problem(n, d):
    if (n, d) not in _PROBLEMS:
        _PROBLEMS[(n, d)] = sm.problems.Quadratic.random(n, d, seed=0)
    return _PROBLEMS[(n, d)]


def lr_for(name, p):
    return 0.5 / p.smoothness if name == "FedAvg" else 1.0 / (p.n_clients * p.smoothness)


def engine_rounds(name, p, backend="numpy", compiled=False):
    process = UniformSample(p.n_clients, p.n_clients // 10)
    options = {"compiled": compiled} if backend == "numpy" else {}
    return sm.run(
        engine_method(name, lr_for(name, p), K),
        p,
        process,
        ROUNDS,
        seed=3,
        metrics=(),
        progress=False,
        backend=backend,
        **options,
    )


@pytest.mark.parametrize("name", ["FedAvg", "FOCUS"])
@pytest.mark.parametrize("n,d", SIZES, ids=[f"N{n}-d{d}" for n, d in SIZES])
def test_engine_numpy(benchmark, name, n, d):
    p = problem(n, d)
    benchmark.group = f"{name}-N{n}-d{d}"
    benchmark.extra_info["rounds"] = ROUNDS
    res = benchmark(engine_rounds, name, p)
    assert res.rounds == ROUNDS


@pytest.mark.parametrize("name", ["FedAvg", "FOCUS"])
@pytest.mark.parametrize("n,d", SIZES, ids=[f"N{n}-d{d}" for n, d in SIZES])
def test_engine_numba(benchmark, name, n, d):
    pytest.importorskip("numba")
    p = problem(n, d)
    engine_rounds(name, p, compiled=True)  # compile outside the timing
    benchmark.group = f"{name}-N{n}-d{d}"
    benchmark.extra_info["rounds"] = ROUNDS
    res = benchmark(engine_rounds, name, p, compiled=True)
    ref = engine_rounds(name, p).server
    np.testing.assert_allclose(res.server, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("name", ["FedAvg", "FOCUS"])
@pytest.mark.parametrize("n,d", SIZES, ids=[f"N{n}-d{d}" for n, d in SIZES])
def test_kernel(benchmark, name, n, d):
    p = problem(n, d)
    data = DiagQuadData(p)
    process = UniformSample(n, n // 10)
    cls = KernelFedAvg if name == "FedAvg" else KernelFOCUS
    cb = 1 << 20 if d <= 10 else 1 << 18
    benchmark.group = f"{name}-N{n}-d{d}"

    def go():
        kern = cls(data, lr_for(name, p), K, chunk_bytes=cb)
        return run_masks(kern, process, 3, ROUNDS, record=True)[1]

    servers = benchmark(go)
    ref = engine_rounds(name, p).server
    scale = float(np.abs(ref - ref[0]).max()) or 1.0
    assert np.abs(servers - ref).max() / scale < 1e-9


@pytest.mark.parametrize("name", ["FedAvg", "FOCUS"])
def test_engine_torch_cpu(benchmark, name):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        p = problem(10**3, 10)
        benchmark.group = f"{name}-N1000-d10"
        res = benchmark(engine_rounds, name, p, "torch")
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(res.server, engine_rounds(name, p).server, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["FedAvg", "FOCUS"])
def test_engine_least_squares(benchmark, name):
    data = LeastSquaresData(10**3, 100, 10, seed=0)
    p = data.problem()
    lr = 0.5 / p.smoothness if name == "FedAvg" else 0.5 / (p.n_clients * p.smoothness)
    process = UniformSample(p.n_clients, p.n_clients // 10)
    benchmark.group = f"{name}-least-squares-N1000-d100"

    def go():
        return sm.run(
            engine_method(name, lr, K), p, process, ROUNDS, seed=3, metrics=(), progress=False
        )

    res = benchmark(go)
    assert res.rounds == ROUNDS
