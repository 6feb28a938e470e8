"""``Result.node_models``: the final model of every node, checked against independent
computations (a NumPy ISTA on ``problem.stacked()`` for a LASSO's support, a per-client
gradient loop for FedAvg's last local steps), and its save/load round trip."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from stochmix import Result, run
from stochmix.algorithms import PGEXTRA, FedAvg, GradientTracking, PushSum
from stochmix.mixing import OnePeerExponential, StaticSequence
from stochmix.participation import Bernoulli, Full
from stochmix.problems import L1, Composite, LeastSquares


def _ista(data, lam: float, iterations: int = 5000) -> np.ndarray:
    """The LASSO minimiser of (1/N) sum_i 1/2 ||A_i x - b_i||^2 + lam ||x||_1 by plain
    proximal gradient on the stacked data (no code of the library)."""
    a, b, n = data["features"], data["targets"], len(data["counts"])
    h, c = a.T @ a / n, a.T @ b / n
    step = 1.0 / np.linalg.eigvalsh(h)[-1]
    x = np.zeros(a.shape[1])
    for _ in range(iterations):
        v = x - step * (h @ x - c)
        x = np.sign(v) * np.maximum(np.abs(v) - step * lam, 0.0)
    return x


def test_lasso_support_from_node_models_matches_the_minimiser(unchecked):
    n = 8
    smooth = LeastSquares.random(n, 12, 20, seed=3, support=3)
    problem = Composite(smooth, L1(2.0))
    data = problem.stacked()
    x_star = _ista(data, data["regularizer"].weight)
    np.testing.assert_allclose(x_star, problem.x_star, atol=1e-9)  # the two minimisers
    support = np.abs(x_star) > 1e-8
    assert 0 < support.sum() < support.size  # a sparse minimiser: the check can fail
    lr = 0.5 / smooth.smoothness
    res = run(PGEXTRA(lr, StaticSequence(nx.cycle_graph(n))), problem, Full(n), 300)
    models = res.node_models
    assert models.shape == (n, 12)
    np.testing.assert_allclose(models.mean(axis=0), res.final, atol=1e-14)
    assert (np.abs(models) > 1e-8).tolist() == [support.tolist()] * n
    np.testing.assert_allclose(models, np.broadcast_to(x_star, models.shape), atol=1e-8)


def test_fedavg_node_models_are_the_clients_last_local_models():
    """Full participation: each client's row is K gradient steps from the server model
    of the round before, recomputed client by client from ``stacked()``."""
    n, k, lr = 5, 3, 0.02
    problem = LeastSquares.random(n, 4, (3, 7), reg=0.1, seed=0)
    res = run(FedAvg(lr, k), problem, Full(n), 6, storage="full")
    data = problem.stacked()
    offsets = np.concatenate([[0], np.cumsum(data["counts"])])
    want = []
    for i in range(n):
        a, b = (
            data["features"][offsets[i] : offsets[i + 1]],
            data["targets"][offsets[i] : offsets[i + 1]],
        )
        x = res.server[-2].copy()
        for _ in range(k):
            x = x - lr * (a.T @ (a @ x - b) + data["reg"] * x)
        want.append(x)
    np.testing.assert_allclose(res.node_models, want, rtol=1e-12, atol=1e-12)
    # the server row is not among them: their mean is the FedAvg server step
    np.testing.assert_allclose(res.node_models.mean(axis=0), res.final, atol=1e-12)


def test_clients_that_sat_out_keep_their_rows_and_compact_storage_keeps_none():
    n = 6
    problem = LeastSquares.random(n, 3, 5, seed=1)
    x0 = np.arange(3.0)
    res = run(FedAvg(0.01, 2), problem, Bernoulli(np.full(n, 0.5), n), 1, x0=x0, seed=4)
    moved = ~np.all(res.node_models == x0, axis=1)  # the others never took part
    assert 0 < moved.sum() < n and moved.sum() == res.participants[1]
    compact = run(FedAvg(0.01, 2), problem, Full(n), 3, storage="compact")
    assert compact.node_models is None


def test_push_sum_reports_de_biased_rows():
    """Push-sum's rows are x_i / w_i, read here off the state the last round left."""
    n = 6
    problem = LeastSquares.random(n, 3, 8, seed=2)
    last = {}

    def keep(r, z, ctx):
        lay = ctx.layout
        last["x"], last["w"] = z[lay.rows("x")].copy(), z[lay.rows("w")].copy()

    graph = nx.DiGraph([(i, (i + 1) % n) for i in range(n)] + [(0, 2), (0, 3), (1, 4)])
    res = run(PushSum(0.02, StaticSequence(graph)), problem, Full(n), 30, callback=keep)
    np.testing.assert_allclose(res.node_models, last["x"] / last["w"], rtol=1e-15)
    assert np.abs(last["w"] - 1.0).max() > 1e-3  # the weights differ from 1: it can fail
    np.testing.assert_allclose(res.node_models.mean(axis=0), res.final, atol=1e-12)


def test_node_models_survive_save_and_load(tmp_path):
    n = 8
    problem = LeastSquares.random(n, 3, 6, seed=0)
    res = run(GradientTracking(0.01, OnePeerExponential(n), rule="natural"), problem, Full(n), 20)
    back = Result.load(res.save(tmp_path / "r.npz"))
    assert np.array_equal(back.node_models, res.node_models)
    bad = dict(np.load(tmp_path / "r.npz"))
    bad["node_models"] = bad["node_models"][:, :2]
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(ValueError, match="node_models must be an"):
        Result.load(tmp_path / "bad.npz")
