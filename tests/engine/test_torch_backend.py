"""The Torch backend gives the NumPy backend's trajectory (1e-10, float64) for every method,
dense and sparse, on the CPU here and on CUDA where one exists."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from stochmix import run  # noqa: E402
from stochmix.algorithms import (  # noqa: E402
    DGD,
    FOCUS,
    MIFA,
    SCAFFOLD,
    AmplifiedFedAvg,
    FedAvg,
    FedStale,
    GradientTracking,
    PushPull,
    PushSum,
)
from stochmix.engine.backends import TorchBackend  # noqa: E402
from stochmix.mixing import OnePeerExponential, RandomSequence  # noqa: E402
from stochmix.participation import Bernoulli, Full  # noqa: E402
from stochmix.problems import LeastSquares, Quadratic  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
N = 12


def federated_methods(lr):
    return [
        FedAvg(lr, 3),
        FedAvg(lr, 2, server_lr=1.5, weights="unbiased"),
        FedAvg(lr, 2, weights="fedau", cutoff=5),
        AmplifiedFedAvg(lr, 2, amplification=3.0, period=4),
        FedStale(lr, 3, beta=0.6),
        FedStale(lr, 2, beta=0.3, probabilities="fedau"),
        MIFA(lr, 2),
        SCAFFOLD(lr, 3),
        FOCUS(lr / N, 3),
    ]


def decentralized_methods(lr):
    directed = RandomSequence(N, "random_directed", seed=3)
    return [
        DGD(lr, RandomSequence(N, "erdos_renyi", seed=2)),
        GradientTracking(lr, OnePeerExponential(N), rule="natural"),
        PushPull(lr, directed),
        PushSum(lr, directed, decay=0.5),
    ]


@pytest.fixture(scope="module")
def problem():
    return LeastSquares.random(N, 4, rows_per_client=(3, 9), reg=0.1, seed=7)


def assert_same(a, b):
    scale = 1 + np.abs(a.server).max()
    np.testing.assert_allclose(b.server, a.server, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(b.distance, a.distance, rtol=0, atol=1e-10 * scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mixing", ["sparse", "dense"])
def test_federated_methods_match_numpy(problem, device, mixing):
    part = Bernoulli.heterogeneous(N, 0.1, 0.9, seed=1)
    for method in federated_methods(0.3 / problem.smoothness):
        a = run(method, problem, part, 40, seed=4)
        b = run(method, problem, part, 40, seed=4, backend="torch", device=device, mixing=mixing)
        assert_same(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mixing", ["sparse", "dense"])
def test_decentralized_methods_match_numpy(problem, device, mixing):
    for method in decentralized_methods(0.2 / problem.smoothness):
        a = run(method, problem, Full(N), 30)
        b = run(method, problem, Full(N), 30, backend="torch", device=device, mixing=mixing)
        assert_same(a, b)
        np.testing.assert_allclose(b.consensus, a.consensus, rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("device", DEVICES)
def test_stochastic_gradients_match_across_backends(problem, device):
    part = Bernoulli.heterogeneous(N, 0.2, 0.9, seed=1)
    sg = problem.minibatch(2, seed=5)
    lr = 0.1 / (N * problem.smoothness)
    a = run(FOCUS(lr, 3), sg, part, 30, seed=2)
    b = run(FOCUS(lr, 3), sg, part, 30, seed=2, backend="torch", device=device)
    assert_same(a, b)
    noisy = Quadratic.random(N, 3, seed=0).noisy(0.1, seed=3)
    a = run(FedAvg(0.1, 2), noisy, part, 20, seed=2)
    b = run(FedAvg(0.1, 2), noisy, part, 20, seed=2, backend="torch", device=device)
    assert_same(a, b)


def test_float32_on_torch_runs_and_stays_close(problem):
    part = Bernoulli.heterogeneous(N, 0.1, 0.9, seed=1)
    method = FedAvg(0.3 / problem.smoothness, 2)
    a = run(method, problem, part, 20)
    b = run(method, problem, part, 20, backend="torch", dtype=np.float32)
    np.testing.assert_allclose(b.server, a.server, rtol=1e-4, atol=1e-5)


def test_torch_options_are_checked(problem):
    with pytest.raises(ValueError, match="mixing"):
        run(FedAvg(0.1), problem, Full(N), 2, backend="torch", mixing="diagonal")
    with pytest.raises(ValueError, match="torch backend only"):
        run(FedAvg(0.1), problem, Full(N), 2, device="cpu")


def test_a_device_that_does_not_exist_gets_one_error_naming_it():
    problem = Quadratic.random(4, 2, seed=0)
    bad = ["banana"] + ([] if torch.cuda.is_available() else ["cuda", "cuda:1"])
    for device in bad:
        with pytest.raises(ValueError, match=f"device '{device}'"):
            run(FedAvg(0.1, 1), problem, Full(4), 2, backend="torch", device=device)
    with pytest.raises(TypeError, match="device must be a string"):
        run(FedAvg(0.1, 1), problem, Full(4), 2, backend="torch", device=5)


class _AsOnCuda(TorchBackend):
    """A CPU backend whose ``mixing="auto"`` decides as on CUDA (dense up to the limit),
    counting the dense whole-block operators it builds."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.dense_builds = 0

    def _dense(self, size: int) -> bool:
        return self.mixing == "dense" or (self.mixing == "auto" and size <= self.dense_limit)

    def _operator(self, csr, dense: bool):
        self.dense_builds += dense
        return super()._operator(csr, dense)


def test_auto_mixing_stops_rebuilding_dense_operators_the_cache_cannot_hold():
    """A periodic sequence whose dense operators exceed the cache: ``mixing="auto"`` drops
    to sparse products once an operator it dropped is needed again (instead of rebuilding
    every operator every round), with the same numbers; when the period fits, every
    operator is built once and kept."""
    n, d, rounds = 16, 3, 24
    problem = Quadratic.random(n, d, seed=4)
    seq = OnePeerExponential(n)  # period 4: four 16 x 16 operators of 2 KiB each
    make = lambda: GradientTracking(0.05, OnePeerExponential(n), rule="natural")  # noqa: E731
    reference = run(make(), problem, Full(n), rounds, progress=False, metrics=())
    small = _AsOnCuda(cache_bytes=3 * n * n * 8)  # holds three of the four
    got = run(make(), problem, Full(n), rounds, backend=small, progress=False, metrics=())
    assert seq.period == 4
    assert small._thrashed
    assert small.dense_builds <= seq.period + 1  # one period (and the one found missing)
    np.testing.assert_allclose(got.server, reference.server, rtol=1e-12, atol=1e-14)
    roomy = _AsOnCuda(cache_bytes=64 * n * n * 8)
    got = run(make(), problem, Full(n), rounds, backend=roomy, progress=False, metrics=())
    assert not roomy._thrashed and roomy.dense_builds == seq.period
    np.testing.assert_allclose(got.server, reference.server, rtol=1e-12, atol=1e-14)
    forced = _AsOnCuda(mixing="dense", cache_bytes=3 * n * n * 8)  # asked for: kept dense
    run(make(), problem, Full(n), rounds, backend=forced, progress=False, metrics=())
    assert not forced._thrashed and forced.dense_builds >= rounds  # one a round
