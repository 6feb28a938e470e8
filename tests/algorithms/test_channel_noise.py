"""Additive channel noise on the messages of a decentralized method, against a per-node
reference that draws the same noise (the run's seed, the round and the transmission's
label), and its effect: an exact method stalls at a noise floor that scales with sigma."""

from __future__ import annotations

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, ChannelNoise, GradientTracking
from stochmix.algorithms.channel import channel_label
from stochmix.engine.model.rowmap import map_generator
from stochmix.mixing import RandomSequence
from stochmix.participation import Full
from tests.reference.decentralized import _grad, _mean, _mix, start


def _received(w, draws, sigma):
    """Node i's noise: sum over its stored entries (i, j), j != i, of W_ij sigma n_e."""
    out = np.zeros((w.shape[0], draws.shape[1]))
    for i in range(w.shape[0]):
        for e in range(w.indptr[i], w.indptr[i + 1]):
            if w.indices[e] != i:
                out[i] += w.data[e] * sigma * draws[e]
    return out


def noisy_tracking(problem, graphs, iterations, x0, lr, sigma, seed):
    """Gradient tracking, x+ = W (x + noise) - lr y, y+ = W (y + noise) + g(x+) - g(x),
    per node; the noise of each transmission drawn as the engine labels it."""
    n = problem.n_clients
    x = start(x0, n)
    grads = [_grad(problem, i, x[i]) for i in range(n)]
    y = [g.copy() for g in grads]
    history = [_mean(x)]
    for k in range(iterations):
        w = graphs.matrix(k, "metropolis")
        noise = map_generator(seed, k, channel_label("mix and descend", "x"))
        nx_ = _received(w, noise.standard_normal((w.nnz, x[0].size)), sigma)
        mixed = _mix(w.toarray(), x)
        x = [mixed[i] + nx_[i] - lr * y[i] for i in range(n)]
        new_grads = [_grad(problem, i, x[i]) for i in range(n)]
        noise = map_generator(seed, k, channel_label("track", "y"))
        ny = _received(w, noise.standard_normal((w.nnz, x[0].size)), sigma)
        mixed = _mix(w.toarray(), y)
        y = [mixed[i] + ny[i] + new_grads[i] - grads[i] for i in range(n)]
        grads = new_grads
        history.append(_mean(x))
    return np.array(history)


@pytest.mark.parametrize("seed", [0, 5])
def test_engine_equals_the_noisy_reference(seed):
    n, d = 6, 3
    problem = sm.problems.Quadratic.random(n, d, seed=seed)
    graphs = RandomSequence(n, "erdos_renyi", p=0.7, seed=seed)
    lr, sigma = 0.1 / problem.smoothness, 0.01
    method = ChannelNoise(GradientTracking(lr, graphs, check_mixing=False), sigma)
    result = sm.run(method, problem, Full(n), 10, seed=seed, metrics=(), progress=False)
    expected = noisy_tracking(problem, graphs, 10, np.zeros(d), lr, sigma, seed)
    np.testing.assert_allclose(result.server, expected, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_noise_sets_a_floor_that_scales_with_sigma():
    n, d = 8, 3
    problem = sm.problems.Quadratic.random(n, d, seed=1)
    graphs = RandomSequence(n, "erdos_renyi", p=0.6, seed=1)
    lr = 0.2 / problem.smoothness
    clean = sm.run(GradientTracking(lr, graphs), problem, Full(n), 600, progress=False)
    floors = []
    for sigma in (1e-6, 1e-3):
        noisy = ChannelNoise(GradientTracking(lr, graphs), sigma)
        run = sm.run(noisy, problem, Full(n), 600, seed=2, progress=False)
        floors.append(np.median(run.relative_error[-100:]))
    assert clean.relative_error[-1] < 1e-12  # exact without noise
    assert 1e-12 < floors[0] < floors[1]  # a floor, higher with more noise
    assert 100 < floors[1] / floors[0] < 1e5  # about proportional to sigma (1000x)


def test_zero_noise_is_the_method_itself_and_bad_input_is_named():
    n = 5
    problem = sm.problems.Quadratic.random(n, 2, seed=3)
    graphs = RandomSequence(n, "erdos_renyi", p=0.8, seed=3)
    plain = sm.run(DGD(0.05, graphs), problem, Full(n), 20, progress=False)
    wrapped = sm.run(ChannelNoise(DGD(0.05, graphs), 0.0), problem, Full(n), 20, progress=False)
    np.testing.assert_array_equal(plain.server, wrapped.server)
    with pytest.raises(ValueError, match="sigma"):
        ChannelNoise(DGD(0.05, graphs), -1.0)
    with pytest.raises(TypeError, match="decentralized"):
        ChannelNoise(sm.algorithms.FedAvg(0.1), 0.1)


CONFIG = """
name = "noisy"
rounds = 60

[problem]
kind = "quadratic"
n_clients = 8
dim = 3
seed = 1

[graphs]
kind = "erdos_renyi"
seed = 2
channel_noise = {sigma}

[[methods]]
kind = "gradient_tracking"
lr = 0.05

[[methods]]
kind = "extra"
lr = 0.05
"""


def test_channel_noise_from_configs_and_the_command(tmp_path):
    import tomllib

    from stochmix import config
    from stochmix.cli import main

    exp = config.parse(tomllib.loads(CONFIG.format(sigma=0.001)))
    methods = [spec.build(spec.lrs[0]) for spec in exp.methods]
    assert all(isinstance(m, ChannelNoise) and m.sigma == 0.001 for m in methods)
    resolved = exp.resolved()
    assert resolved["graphs"]["channel_noise"] == 0.001
    assert config.parse(tomllib.loads(config.dumps(resolved))).resolved() == resolved
    path = tmp_path / "noisy.toml"
    path.write_text(CONFIG.format(sigma=0.001))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    assert (tmp_path / "out" / "metrics.csv").exists()
    plain = config.parse(tomllib.loads(CONFIG.format(sigma=0)))
    assert not any(isinstance(s.build(s.lrs[0]), ChannelNoise) for s in plain.methods)
    with pytest.raises(config.ConfigError, match="graphs.channel_noise"):
        config.parse(tomllib.loads(CONFIG.format(sigma=-1)))


def noisy_activated_dgd(problem, graphs, masks, x0, lr, sigma, seed):
    """DGD (combine then adapt) under node activation with channel noise, per node: an
    active i takes ``x_i <- sum_j W_ij (x_j + n_ij) - lr grad F_i(x_i)`` (no noise on its
    self-loop), the others keep x_i; n drawn per stored entry of the active rows of W,
    row after row (the engine's labels)."""
    n = problem.n_clients
    x = start(x0, n)
    history = [_mean(x)]
    for k, mask in enumerate(masks):
        active = np.flatnonzero(mask)
        w = graphs.matrix(k, "metropolis")
        new = [row.copy() for row in x]
        if active.size:
            rows = w[active]
            rng = map_generator(seed, k, channel_label("combine and descend", "x"))
            draws = rng.standard_normal((rows.nnz, x[0].size))
            for t, i in enumerate(active):
                value = -lr * _grad(problem, i, x[i])
                for e in range(rows.indptr[t], rows.indptr[t + 1]):
                    j = rows.indices[e]
                    noise = sigma * draws[e] if j != i else 0.0
                    value = value + rows.data[e] * (x[j] + noise)
                new[i] = value
        x = new
        history.append(_mean(x))
    return np.array(history)


def test_activated_pulls_are_noisy_per_node():
    """Under node activation each active node's pull is noisy (its row of W), as a
    per-node reference draws it; the other nodes keep their rows."""
    import networkx as nx

    from stochmix.participation import Bernoulli

    n, d, rounds = 12, 3, 8
    problem = sm.problems.Quadratic.random(n, d, seed=3)
    graphs = sm.mixing.StaticSequence(nx.cycle_graph(n))
    lr, sigma, seed = 0.1 / problem.smoothness, 0.05, 4
    process = Bernoulli(0.4, n_clients=n)
    method = ChannelNoise(DGD(lr, graphs, form="cta"), sigma)
    result = sm.run(method, problem, process, rounds, seed=seed, metrics=(), progress=False)
    masks = process.sample(rounds, seed=seed)
    expected = noisy_activated_dgd(problem, graphs, masks, np.zeros(d), lr, sigma, seed)
    np.testing.assert_allclose(result.server, expected, rtol=0, atol=1e-12)
    quiet = sm.run(DGD(lr, graphs, form="cta"), problem, process, rounds, seed=seed,
                   metrics=(), progress=False)  # fmt: skip
    assert np.abs(result.server - quiet.server).max() > 1e-4  # (the noise is there)
