"""Every option of a run on one process, under ``backend="distributed"`` at 2 gloo ranks.

The distributed backend is a backend of the one engine (one set-up with a shard hook, one
dispatcher with item hooks, one loop over the rounds), so an option that works on one
process works on the shards, or is refused at the start with one error naming it. Two
processes are spawned; each runs every case below and rank 0 writes what it returned.
Each case is compared here with the NumPy backend in this process (``compiled=False``,
the programs the shards run): the model of every round and every column of the Result
(participants, gradients, messages, floats, simulated time) to 1e-12.

The cases: every participation kind of a federated run (full, uniform and weighted
samples, Bernoulli, regularized, periodic, Markov, lost uploads), every activation kind
of a decentralized run (node activation, random edges mixing pairwise and with the
method's own weights, random matchings, one-peer permutations, Poisson clocks), both
storage modes a shard keeps (``"auto"``, ``"full"``; ``"compact"`` is refused), a virtual
clock with a deadline, composite problems (FedMid's prox on the clients' rows, PG-EXTRA's
on every node's) and a random row map (channel noise).
"""

from __future__ import annotations

import os
import socket
import warnings

import networkx as nx
import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import stochmix as sm  # noqa: E402

N, D, ROUNDS, SEED = 13, 3, 30, 5
COLUMNS = ("participants", "gradients", "messages", "floats")


def _least_squares():
    return sm.problems.LeastSquares.random(N, D, rows_per_client=(2, 5), reg=0.1, seed=1)


def _ring():
    return sm.mixing.StaticSequence(nx.cycle_graph(N))


def _graph():
    return nx.circulant_graph(N, [1, 2])


def _federated(participation, **options):
    return lambda: (sm.algorithms.FedAvg(0.05, local_steps=2), _least_squares(), participation(),
                    options)  # fmt: skip


def _decentralized(participation, method=None, **options):
    def case():
        made = method() if method is not None else sm.algorithms.DGD(0.05, _ring())
        return made, _least_squares(), participation(), options

    return case


def _clock():
    speeds = np.linspace(0.5, 2.0, N)
    model = sm.timing.TimeModel(compute=1.0, upload=0.2, speeds=speeds)
    return sm.timing.Clock(model, deadline=2.5)


def _composite():
    return sm.problems.Composite(_least_squares(), sm.problems.L1(0.01))


P = sm.participation
CASES = {
    "full": _federated(lambda: P.Full(N)),
    "uniform": _federated(lambda: P.UniformSample(N, 4)),
    "weighted": _federated(lambda: P.WeightedSample(np.arange(1.0, N + 1), 4)),
    "bernoulli": _federated(lambda: P.Bernoulli.heterogeneous(N, 0.1, 0.6, seed=2)),
    "regularized": _federated(lambda: P.Regularized(N, 4)),
    "periodic": _federated(lambda: P.Periodic(3, 2, n_clients=N)),
    "markov": _federated(lambda: P.Markov(0.3, 0.4, N)),
    "uplink-drops": _federated(lambda: P.UplinkDrops(P.Bernoulli(0.5, N), 0.3)),
    "storage-full": _federated(lambda: P.Bernoulli(0.4, N), storage="full"),
    "clock": _federated(lambda: P.Full(N), clock=_clock()),
    "node-activation": _decentralized(lambda: P.Bernoulli(0.5, N)),
    "edge-pairwise": _decentralized(lambda: P.RandomEdge(_graph(), mixing="pairwise")),
    "edge-weights": _decentralized(lambda: P.RandomEdge(_graph(), mixing="weights")),
    "matching": _decentralized(lambda: P.RandomMatching(_graph())),
    "permutation": _decentralized(lambda: P.OnePeerPermutation(N)),
    "poisson": _decentralized(lambda: P.PoissonClocks(1.0, N)),
    "channel-noise": _decentralized(
        lambda: P.Full(N),
        lambda: sm.algorithms.ChannelNoise(sm.algorithms.GradientTracking(0.02, _ring()), 0.05),
    ),
}
COMPOSITE = {
    "fedmid": lambda: (
        sm.algorithms.FedMid(0.05, local_steps=2),
        _composite(),
        P.UniformSample(N, 4),
        {},
    ),  # fmt: skip
    "pg-extra": lambda: (sm.algorithms.PGEXTRA(0.05, _ring()), _composite(), P.Full(N), {}),
}
CASES.update(COMPOSITE)
#: what the shards refuse, before any work, and the words the error must hold
REFUSED = {
    "storage-compact": (
        _federated(lambda: P.Bernoulli(0.4, N), storage="compact"),
        ("storage", "compact", "distributed"),
    ),
    "noisy-problem": (
        lambda: (
            sm.algorithms.FedAvg(0.05),
            sm.problems.Noisy(_least_squares(), 0.1),
            P.Full(N),
            {},
        ),  # fmt: skip
        ("pure formula", "Noisy"),
    ),
}


def _run(case, backend, **extra):
    method, problem, participation, options = case()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.engine.SlowPathWarning)
        return sm.run(
            method, problem, participation, ROUNDS, seed=SEED, backend=backend,
            progress=False, **options, **extra,
        )  # fmt: skip


def _columns(result) -> dict:
    found = {"server": result.server}
    for name in COLUMNS:
        found[name] = np.asarray(getattr(result, name))
    if result.time is not None:
        found["time"] = np.asarray(result.time)
    return found


def _worker(rank, size, port, out):
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
    )
    try:
        results: dict = {}
        for name, case in CASES.items():
            try:
                for key, value in _columns(_run(case, "distributed")).items():
                    results[f"{name}:{key}"] = value
            except Exception as error:  # noqa: BLE001 - reported to the test, not lost
                results[f"{name}:error"] = np.array(f"{type(error).__name__}: {error}")
        for name, (case, _) in REFUSED.items():
            try:
                _run(case, "distributed")
                results[f"{name}:error"] = np.array("")
            except (ValueError, NotImplementedError, TypeError) as error:
                results[f"{name}:error"] = np.array(str(error))
        np.savez(os.path.join(out, f"rank{rank}.npz"), **results)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    import torch.multiprocessing as mp

    out = str(tmp_path_factory.mktemp("distributed-matrix"))
    mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    return [dict(np.load(os.path.join(out, f"rank{k}.npz"))) for k in range(2)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_option_agrees_with_numpy(ranks, name):
    found = ranks[0]
    assert f"{name}:error" not in found, str(found[f"{name}:error"])
    expected = _columns(_run(CASES[name], "numpy", compiled=False))
    assert {k.split(":", 1)[1] for k in found if k.startswith(f"{name}:")} == set(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(
            found[f"{name}:{key}"], value, rtol=1e-12, atol=1e-12, err_msg=f"{name}: {key}"
        )
    for key in expected:  # every rank returns the same Result
        assert np.array_equal(ranks[1][f"{name}:{key}"], found[f"{name}:{key}"])


def test_the_cases_are_not_trivial(ranks):
    """Partial rounds, moving models, a deadline that drops clients, a prox that moves
    the model: the comparisons above compare something."""
    found = ranks[0]
    assert (found["bernoulli:participants"][1:] < N).all()
    assert (found["clock:participants"][1:] < N).any()
    assert np.diff(found["clock:time"]).min() > 0
    for name in CASES:
        assert np.abs(np.diff(found[f"{name}:server"], axis=0)).max() > 1e-6, name
    assert (found["edge-weights:server"] != found["edge-pairwise:server"]).any()
    smooth = _run(lambda: (sm.algorithms.PGEXTRA(0.05, _ring()), _least_squares(), P.Full(N), {}),
                  "numpy")  # fmt: skip
    assert np.abs(found["pg-extra:server"][-1] - smooth.server[-1]).max() > 1e-3  # the prox


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_shards_cannot_run_is_refused_before_any_work(ranks, name):
    message = str(ranks[0][f"{name}:error"])
    for word in REFUSED[name][1]:
        assert word in message, (name, message)
