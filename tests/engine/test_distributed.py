"""The ``distributed`` backend (torch.distributed, gloo on the CPU).

Two and four processes are spawned (``torch.multiprocessing``); each runs FedAvg, FOCUS,
FedStale and SCAFFOLD on a problem of 37 clients whose participation leaves rounds nobody
joins, rounds of one participant (planned one row at a time) and shards without
participants. Every rank's Result and its rows of the final state are written to files and
compared here: bit for bit with the run on one rank (a group of one, made inside the
two-process job), and to 1e-12 with the NumPy backend in this process.

The same jobs run decentralized methods over 37 nodes (gradient tracking in both forms,
push-pull in both forms, DGD, push-sum, EXTRA, K-GT, and GT-SVRG and GT-SARAH, whose
sampled gradients each shard's chunks take from the round's draw) on a static ring, the one-peer
exponential graph (periodic) and random graphs drawn afresh each step, with halo
exchanges: their final state is bit-identical on 1, 2 and 4 ranks *and* to the NumPy
backend's with ``compiled=False`` (each product adds a row's entries in the same order on
a shard as on one process); their reported model and consensus error (sums over all
nodes, added per fixed segment) are bit-identical across ranks and agree with the NumPy
backend to 1e-12 (one process adds them in another order). The halo moves exactly the
rows the closed forms count.
"""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import stochmix as sm  # noqa: E402
from stochmix.participation import Bernoulli  # noqa: E402
from stochmix.problems import LeastSquares  # noqa: E402
from tests import CHILD_TIMEOUT  # noqa: E402

pytestmark = pytest.mark.slow  # minutes of work: run in CI's slow stage (-m slow)

N, D, ROUNDS, SEED = 37, 5, 40, 3
METHODS = ("FedAvg", "FOCUS", "FedStale", "SCAFFOLD")
# decentralized cases: name -> (method, graph sequence)
DECENTRALIZED = (
    "GT-ring", "GT-atc-random", "PP-random", "PP-ab-exp", "DGD-exp", "PS-random", "EXTRA-ring",
    "KGT-random", "SVRG-ring", "SARAH-ring",
)  # fmt: skip


def _problem():
    problem = LeastSquares.random(N, D, rows_per_client=(2, 8), reg=0.1, seed=1)
    participation = Bernoulli.heterogeneous(N, 0.005, 0.12, seed=2)
    return problem, participation


def _method(name: str, lr: float = 0.05):
    if name in DECENTRALIZED:
        return _decentralized(name, lr)
    return getattr(sm.algorithms, name)(lr, local_steps=2)


def _decentralized(name: str, lr: float | None = None):
    """A decentralized method over N nodes (a fresh graph sequence each time)."""
    import networkx as nx

    algorithms, mixing = sm.algorithms, sm.mixing
    directed = {"kind": "random_directed"}
    build = {
        "GT-ring": lambda lr: algorithms.GradientTracking(
            lr or 0.01, mixing.StaticSequence(nx.cycle_graph(N))
        ),
        "GT-atc-random": lambda lr: algorithms.GradientTracking(
            lr or 0.02, mixing.RandomSequence(N, seed=4), form="atc"
        ),
        "PP-random": lambda lr: algorithms.PushPull(
            lr or 0.02, mixing.RandomSequence(N, seed=5, **directed)
        ),
        "PP-ab-exp": lambda lr: algorithms.PushPull(
            lr or 0.02, mixing.OnePeerExponential(N), form="ab"
        ),
        "DGD-exp": lambda lr: algorithms.DGD(lr or 0.02, mixing.OnePeerExponential(N), rule="row"),
        "PS-random": lambda lr: algorithms.PushSum(
            lr or 0.02, mixing.RandomSequence(N, seed=6, **directed)
        ),
        "EXTRA-ring": lambda lr: algorithms.EXTRA(
            lr or 0.02, mixing.StaticSequence(nx.cycle_graph(N))
        ),
        "KGT-random": lambda lr: algorithms.KGT(
            lr or 0.01, mixing.RandomSequence(N, seed=7), local_steps=2
        ),
        "SVRG-ring": lambda lr: algorithms.GTSVRG(
            lr or 0.01, mixing.StaticSequence(nx.cycle_graph(N)), snapshot_every=5, batch=2
        ),
        "SARAH-ring": lambda lr: algorithms.GTSARAH(
            lr or 0.01, mixing.StaticSequence(nx.cycle_graph(N)), restart_every=5, batch=2
        ),
    }
    return build[name](lr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(name, backend, rounds=ROUNDS, **kwargs):
    """A run of ``name``; returns (Result, the state after the last round)."""
    problem, participation = _problem()
    if name in DECENTRALIZED:
        participation = sm.participation.Full(N)
    final = {}

    def keep(r, z, ctx):
        final["z"] = np.array(z, copy=True)

    lr = kwargs.pop("lr", None if name in DECENTRALIZED else 0.05)
    result = sm.run(
        _method(name, lr), problem, participation, rounds, seed=SEED,
        backend=backend, progress=False, callback=keep, **kwargs,
    )  # fmt: skip
    return result, final.get("z")


def _save(out, tag, rank, results: dict) -> None:
    np.savez(os.path.join(out, f"{tag}-{rank}.npz"), **results)


def _worker(rank, size, port, out, extra):
    from stochmix.engine.backends.distributed import DistributedBackend

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
    )
    try:
        groups = [(size, None)]
        if extra:  # a group of one inside the job: the one-rank reference
            groups.append((1, dist.new_group([0])))
        for ranks, group in groups:
            if group is not None and rank != 0:
                continue
            results = {}
            for name in METHODS + DECENTRALIZED:
                back = DistributedBackend(group=group)
                res, z = _run(name, back)
                results[f"{name}_server"] = res.server
                results[f"{name}_count"] = res.participants
                results[f"{name}_distance"] = res.distance
                results[f"{name}_z"] = z
                results[f"{name}_keep"] = back.shard.keep
                results[f"{name}_sent"] = back.traffic.sent
                if name in DECENTRALIZED:
                    halo = back.traffic.by_kind.get("halo", [0, 0, 0])
                    results[f"{name}_consensus"] = res.consensus
                    results[f"{name}_halo"] = np.array(halo)  # sent, received, exchanges
                    results[f"{name}_range"] = np.array([back.shard.lo, back.shard.hi])
                    results[f"{name}_plans"] = back.shard.plans_built
                    results[f"{name}_plans_kept"] = len(back.shard.plans)
            _save(out, f"r{ranks}", rank, results)
        if extra:
            _extras(rank, size, out)
    finally:
        dist.destroy_process_group()


def _extras(rank, size, out):
    """Checkpoints, divergence and refusals, on ``size`` ranks."""
    import warnings

    results = {}
    path = os.path.join(out, "ck.bin")
    half, _ = _run("SCAFFOLD", "distributed", checkpoint=path, checkpoint_every=7)
    results["ck_server"] = half.server
    resumed, _ = _run("SCAFFOLD", "distributed", checkpoint=path, checkpoint_every=7)
    results["resumed_server"] = resumed.server
    # a decentralized run on a random graph stopped halfway and resumed
    path = os.path.join(out, "gt.bin")
    _run("GT-atc-random", "distributed", rounds=ROUNDS // 2, checkpoint=path, checkpoint_every=7)
    resumed, z = _run("GT-atc-random", "distributed", checkpoint=path, checkpoint_every=7)
    results["gt_resumed_server"], results["gt_resumed_z"] = resumed.server, z
    results["gt_resumed_consensus"] = resumed.consensus
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        diverged, _ = _run("FedAvg", "distributed", lr=40.0)
        diverged_dgd, _ = _run("DGD-exp", "distributed", lr=40.0)
    results["diverged_at"] = -1 if diverged.diverged_at is None else diverged.diverged_at
    results["dgd_diverged_at"] = diverged_dgd.diverged_at or -1
    problem, participation = _problem()
    noisy = sm.algorithms.ChannelNoise(_decentralized("GT-ring"), 0.1)
    messages = []
    for method, prob, part in (
        (noisy, problem, sm.participation.Full(N)),
        (_method("FedAvg"), sm.problems.Noisy(problem, 0.1), participation),
    ):
        try:
            sm.run(method, prob, part, 2, backend="distributed", progress=False)
            messages.append("")
        except (ValueError, NotImplementedError) as error:
            messages.append(str(error))
    results["messages"] = np.array(messages)
    _save(out, f"extra{size}", rank, results)


def _spawn(size, out, extra=False):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(size, _free_port(), out, extra), nprocs=size, join=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("distributed"))
    _spawn(2, out, extra=True)
    _spawn(4, out)
    return out


def _load(out, tag, rank):
    return dict(np.load(os.path.join(out, f"{tag}-{rank}.npz")))


def _assemble(parts: list[dict], name: str) -> np.ndarray:
    """The full final state from the ranks' rows (replicated rows must agree)."""
    size = max(int(p[f"{name}_keep"].max()) for p in parts) + 1
    full = np.full((size, D), np.nan)
    for p in parts:
        keep, z = p[f"{name}_keep"], p[f"{name}_z"]
        seen = ~np.isnan(full[keep, 0])
        assert np.array_equal(full[keep][seen], z[seen]), "replicated rows differ across ranks"
        full[keep] = z
    assert not np.isnan(full).any()
    return full


def test_rounds_cover_the_hard_cases(runs):
    count = _load(runs, "r1", 0)["FedAvg_count"][1:]
    assert (count == 0).any() and (count == 1).any() and (count >= 3).any()
    # with 4 ranks (about 9 clients each) most rounds leave a shard without participants
    assert (count < 4).sum() > ROUNDS // 2


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("ranks", [2, 4])
def test_bit_identical_to_one_rank(runs, name, ranks):
    one = _load(runs, "r1", 0)
    parts = [_load(runs, f"r{ranks}", k) for k in range(ranks)]
    for p in parts:  # every rank returns the same Result
        for key in ("server", "count", "distance"):
            assert np.array_equal(p[f"{name}_{key}"], one[f"{name}_{key}"], equal_nan=True)
    assert np.array_equal(_assemble(parts, name), _assemble([one], name))
    assert parts[0][f"{name}_sent"] > 0 and one[f"{name}_sent"] == 0


@pytest.mark.parametrize("name", METHODS)
def test_agrees_with_numpy_backend(runs, name):
    one = _load(runs, "r1", 0)
    res, z = _run(name, "numpy", compiled=False)
    np.testing.assert_allclose(one[f"{name}_server"], res.server, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_assemble([one], name), z, rtol=1e-12, atol=1e-12)
    assert np.array_equal(one[f"{name}_count"], res.participants)


def test_checkpoint_resume_and_divergence(runs):
    parts = [_load(runs, "extra2", k) for k in range(2)]
    for p in parts:
        assert np.array_equal(p["ck_server"], p["resumed_server"])
        assert np.array_equal(p["ck_server"], _load(runs, "r1", 0)["SCAFFOLD_server"])
    with pytest.warns(sm.engine.DivergenceWarning):
        numpy_run, _ = _run("FedAvg", "numpy", lr=40.0, compiled=False)
    assert parts[0]["diverged_at"] == parts[1]["diverged_at"] == numpy_run.diverged_at
    files = sorted(os.listdir(runs))
    assert "ck.rank0-of-2.bin" in files and "ck.rank1-of-2.bin" in files


def test_refusals_are_clear(runs):
    """Row maps run on shards (channel noise: compared with NumPy in
    tests/engine/test_distributed_matrix.py); gradients that draw random numbers are refused."""
    row_map, stochastic = _load(runs, "extra2", 0)["messages"]
    assert row_map == ""
    assert "pure formula" in stochastic and "problem Noisy" in stochastic


# ------------------------------------------------------------------ decentralized
@pytest.mark.parametrize("name", DECENTRALIZED)
@pytest.mark.parametrize("ranks", [2, 4])
def test_decentralized_bit_identical_to_one_rank(runs, name, ranks):
    one = _load(runs, "r1", 0)
    parts = [_load(runs, f"r{ranks}", k) for k in range(ranks)]
    for p in parts:  # every rank returns the same Result, the one rank's
        for key in ("server", "distance", "consensus"):
            assert np.array_equal(p[f"{name}_{key}"], one[f"{name}_{key}"])
    assert np.array_equal(_assemble(parts, name), _assemble([one], name))
    assert all(p[f"{name}_halo"].min() > 0 for p in parts)  # rows did move


@pytest.mark.parametrize("name", DECENTRALIZED)
def test_decentralized_agrees_with_numpy_backend(runs, name):
    """The state bit for bit; the network average and consensus error (sums over all
    nodes, in another order on one process) to 1e-12."""
    one = _load(runs, "r1", 0)
    res, z = _run(name, "numpy", compiled=False)
    assert np.array_equal(_assemble([one], name), z)
    np.testing.assert_allclose(one[f"{name}_server"], res.server, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(one[f"{name}_consensus"], res.consensus, rtol=1e-12, atol=0)
    assert res.distance[-1] < 0.5 * res.distance[0]  # the runs do converge


def test_halo_plans_one_per_distinct_matrix(runs):
    """A static graph is planned once (x and y mix with the same W); the one-peer
    exponential graph once per step of its period (push-pull's row and column rules give
    two matrices); random graphs once per step, and their plans go with their matrices."""
    tau = sm.mixing.OnePeerExponential(N).tau
    for ranks in (1, 2, 4):
        p = _load(runs, f"r{ranks}", 0)
        assert p["GT-ring_plans"] == 1
        assert p["DGD-exp_plans"] == tau
        assert p["PP-ab-exp_plans"] == 2 * tau
        assert p["GT-atc-random_plans"] == ROUNDS
        assert p["PP-random_plans"] == 2 * ROUNDS
        assert p["PS-random_plans"] == ROUNDS
        assert p["GT-atc-random_plans_kept"] <= 2 and p["PP-random_plans_kept"] <= 4


@pytest.mark.parametrize("ranks", [2, 4])
def test_halo_bytes_equal_closed_form(runs, ranks):
    """Per rank: a ring moves 2 rows a product (one to and one from each side); the
    one-peer exponential graph at hop h moves min(m, h) - max(0, m + h - n) rows; each
    row is D float64 values. Gradient tracking mixes x and y each round, DGD x; the
    products of a round move in one exchange (y's halo is fetched with x's: the phase
    that mixes x does not rewrite y)."""
    from stochmix.engine.backends.distributed import ring_halo_rows, shift_halo_rows

    graphs = sm.mixing.OnePeerExponential(N)
    for k in range(ranks):
        p = _load(runs, f"r{ranks}", k)
        lo, hi = (int(v) for v in p["GT-ring_range"])
        ring = ROUNDS * 2 * ring_halo_rows(N, hi - lo) * D * 8
        assert ring_halo_rows(N, hi - lo) == 2
        assert list(p["GT-ring_halo"]) == [ring, ring, ROUNDS]  # x's and y's: one exchange
        hops = sum(shift_halo_rows(N, hi - lo, -graphs.shift(r)) for r in range(ROUNDS))
        assert list(p["DGD-exp_halo"]) == [hops * D * 8] * 2 + [ROUNDS]
        assert list(p["PP-ab-exp_halo"]) == [2 * hops * D * 8] * 2 + [ROUNDS]


def test_decentralized_checkpoint_resume_and_divergence(runs):
    one = _load(runs, "r1", 0)
    parts = [_load(runs, "extra2", k) for k in range(2)]
    for p in parts:
        assert np.array_equal(p["gt_resumed_server"], one["GT-atc-random_server"])
        assert np.array_equal(p["gt_resumed_consensus"], one["GT-atc-random_consensus"])
    full = np.full((3 * N, D), np.nan)
    for k, p in enumerate(parts):
        full[_load(runs, "r2", k)["GT-atc-random_keep"]] = p["gt_resumed_z"]
    assert np.array_equal(full, _assemble([one], "GT-atc-random"))
    with pytest.warns(sm.engine.DivergenceWarning):
        numpy_run, _ = _run("DGD-exp", "numpy", lr=40.0, compiled=False)
    assert parts[0]["dgd_diverged_at"] == parts[1]["dgd_diverged_at"] == numpy_run.diverged_at
    assert "gt.rank0-of-2.bin" in os.listdir(runs)


def test_needs_a_process_group():
    problem, participation = _problem()
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="initialised torch.distributed process group"):
        sm.run(_method("FedAvg"), problem, participation, 2, backend="distributed")


CONFIG = """
name = "small"
rounds = 30
seeds = [0, 1]

[problem]
kind = "quadratic"
n_clients = 11
dim = 3
seed = 1

[participation]
kind = "uniform_sample"
size = 3

[[methods]]
kind = "fedavg"
lr = [0.05, 0.2]
local_steps = 2

[[methods]]
kind = "focus"
label = "FOCUS"
lr = 0.02
local_steps = 2
"""


def _torchrun(ranks: int, config, out):
    import subprocess
    import sys

    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
        "-m", "stochmix", "run", str(config), "--out", str(out), "--quiet", "--no-plot",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _table(path):
    import csv

    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_torchrun_command(tmp_path):
    from stochmix.cli import main

    config = tmp_path / "experiment.toml"
    config.write_text(CONFIG)
    printed = _torchrun(2, config, tmp_path / "two")
    assert printed.count("per-round metrics") == 1  # rank 0 alone prints and writes
    _torchrun(1, config, tmp_path / "one")
    two = (tmp_path / "two" / "metrics.csv").read_bytes()
    assert two == (tmp_path / "one" / "metrics.csv").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["experiment.toml", "one", "two"]
    assert main(["run", str(config), "--out", str(tmp_path / "plain"), "--quiet", "--no-plot"]) == 0
    ours, plain = (
        _table(tmp_path / "two" / "metrics.csv"),
        _table(tmp_path / "plain" / "metrics.csv"),
    )
    assert len(ours) == len(plain) == 6 * 31
    for a, b in zip(ours, plain, strict=True):
        for key, value in a.items():
            if key in ("method", "seed", "round", "participants", "lr"):
                assert value == b[key]
            elif value:
                assert float(value) == pytest.approx(float(b[key]), rel=1e-12, abs=1e-14)


# ------------------------------------------------------------------ gossip (edge activation)
GOSSIP_N, GOSSIP_TICKS = 12, 300


def _gossip(mixing: str, backend, **kwargs):
    """DGD on a circulant graph, one random edge a tick (``RandomEdge(mixing=...)``);
    returns (Result, the state after the last tick: this rank's rows on a shard)."""
    import networkx as nx

    graph = nx.circulant_graph(GOSSIP_N, [1, 2])
    problem = LeastSquares.random(GOSSIP_N, D, rows_per_client=(2, 6), reg=0.1, seed=1)
    method = sm.algorithms.DGD(0.05, sm.mixing.StaticSequence(graph))
    final = {}

    def keep(r, z, ctx):
        final["z"] = np.array(z, copy=True)

    result = sm.run(
        method, problem, sm.participation.RandomEdge(graph, mixing=mixing), GOSSIP_TICKS,
        seed=SEED, backend=backend, progress=False, callback=keep, **kwargs,
    )  # fmt: skip
    return result, final["z"]


def _gossip_worker(rank, size, port, out):
    from stochmix.engine.backends.distributed import DistributedBackend

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
    )
    try:
        results = {}
        for mixing in ("weights", "pairwise"):
            back = DistributedBackend()
            res, z = _gossip(mixing, back)
            results[f"{mixing}_server"] = res.server
            results[f"{mixing}_consensus"] = res.consensus
            results[f"{mixing}_z"] = z
            results[f"{mixing}_keep"] = back.shard.keep
        _save(out, "gossip", rank, results)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("mixing", ["weights", "pairwise"])
def test_gossip_edge_mixing_agrees_with_numpy_backend(gossip_runs, mixing):
    """A shard mixes an activated edge with the matrix the participation process names
    (``RandomEdge(mixing="weights")``: the method's W_k on the edge, not the pairwise
    average), as one process does: at 2 ranks, the state bit for bit as the NumPy
    backend's, the network average and consensus error to 1e-12. (A shard that ignored
    the process's ``mixing`` ran pairwise averaging: 0.14 off in the model.)"""
    res, z = _gossip(mixing, "numpy", compiled=False)
    for k in range(2):
        p = _load(gossip_runs, "gossip", k)
        np.testing.assert_allclose(p[f"{mixing}_server"], res.server, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(p[f"{mixing}_consensus"], res.consensus, rtol=1e-12, atol=0)
        assert np.array_equal(p[f"{mixing}_z"], z[p[f"{mixing}_keep"]])  # the rank's rows
    assert np.abs(res.server[-1] - res.server[0]).max() > 1e-3  # the model did move


@pytest.fixture(scope="module")
def gossip_runs(tmp_path_factory):
    import torch.multiprocessing as mp

    out = str(tmp_path_factory.mktemp("gossip"))
    mp.spawn(_gossip_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    return out
