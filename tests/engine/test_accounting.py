"""The cost columns of a Result (gradients, sample_gradients, messages, floats) against
counts made independently of the engine's accounting.

Gradients and sample gradients: a least-squares problem that logs every call of its
``gradients`` (a full local gradient: one evaluation, m_i samples) and ``sampled_gradients``
(one evaluation per row, one sample per pick), read round by round from a callback. Messages:
proportional to the participants (federated methods: a fixed number per participant) or to
the directed edges of the round's graph (decentralized methods). Every column is the same
with and without round templates (a template instantiated for other participants once
froze FOCUS's columns at its first round's values), and a resumed or segmented run records
what an uninterrupted round-by-round run does.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full, RandomEdge, UniformSample
from stochmix.problems import LeastSquares

N = 8
DIM = 3
ROUNDS = 7
COSTS = ("gradients", "sample_gradients", "messages", "floats")


class Logged(LeastSquares):
    """Least squares that logs what is asked of it: (evaluations, samples) per call."""

    log: list

    def gradients(self, clients, points):
        rows = np.asarray(clients, dtype=np.int64).reshape(-1)
        self.log.append((rows.size, int(self.rows_per_client[rows].sum())))
        return super().gradients(clients, points)

    def sampled_gradients(self, clients, points, picks, scale):
        self.log.append((int(np.size(clients)), int(np.size(picks))))
        return super().sampled_gradients(clients, points, picks, scale)


def problem() -> Logged:
    made = Logged.random(N, DIM, rows_per_client=(2, 6), seed=4)
    made.log = []
    return made


def _lr(scale=0.2):
    return scale / LeastSquares.random(N, DIM, rows_per_client=(2, 6), seed=4).smoothness


def _graphs():
    return RandomSequence(N, "erdos_renyi", seed=5)


FEDERATED = {
    "FedAvg": lambda: A.FedAvg(_lr(), 3),
    "FedAvg-server-lr": lambda: A.FedAvg(_lr(), 2, server_lr=0.7),
    "FOCUS": lambda: A.FOCUS(_lr() / N, 5),
    "SCAFFOLD": lambda: A.SCAFFOLD(_lr(), 2),
    "FedAvgM": lambda: A.FedAvgM(_lr(), 2, beta=0.5),
    "FedAdam": lambda: A.FedAdam(_lr(), 2),
    "FedDyn": lambda: A.FedDyn(_lr(), 2, alpha=0.1),
    "FedProx": lambda: A.FedProx(_lr(), mu=0.1, local_steps=2),
    "FedProx-exact": lambda: A.FedProx(_lr(), mu=0.1, solver="exact"),
    "MIFA": lambda: A.MIFA(_lr(), 2),
    "FedStale": lambda: A.FedStale(_lr(), 2, beta=0.5),
    "FedVARP": lambda: A.FedVARP(_lr(), 2),
    "FedNova": lambda: A.FedNova(_lr(), 2),
    "AmplifiedFedAvg": lambda: A.AmplifiedFedAvg(_lr(), 2, amplification=1.5, period=3),
}
DECENTRALIZED = {
    "DGD": lambda: A.DGD(_lr(), _graphs()),
    "GradientTracking": lambda: A.GradientTracking(_lr(), _graphs()),
    "EXTRA": lambda: A.EXTRA(_lr(), _graphs()),
    "NIDS": lambda: A.NIDS(_lr(), _graphs()),
    "ExactDiffusion": lambda: A.ExactDiffusion(_lr(), _graphs()),
    "KGT": lambda: A.KGT(_lr(), _graphs(), local_steps=2),
    "LED": lambda: A.LED(_lr(0.05), _graphs(), local_steps=2),
    "GT-SVRG": lambda: A.GTSVRG(_lr(0.05), _graphs(), snapshot_every=3, batch=2),
    "GT-SARAH": lambda: A.GTSARAH(_lr(0.05), _graphs(), restart_every=3),
    "GT-SAGA": lambda: A.GTSAGA(_lr(0.05), _graphs()),
    "DecentralizedADMM": lambda: A.DecentralizedADMM(_lr(), _graphs()),
    "DecentralizedADMM-gradient": lambda: A.DecentralizedADMM(
        _lr(), _graphs(), solver="gradient", local_lr=_lr(0.1), local_steps=2
    ),
}
#: methods whose local problems are solved in closed form: no gradient evaluations
EXACT_SOLVES = {"DecentralizedADMM"}
PROCESSES = {
    "bernoulli": lambda: Bernoulli(0.4, N),  # empty rounds included (seed 7: checked)
    "uniform": lambda: UniformSample(N, 3),
    "full": lambda: Full(N),
}


def _run(method, made, process, *, templates=True, **options):
    """The run and the (evaluations, samples) the problem was asked for in each round."""
    marks = []
    if not templates:
        method.template_key = lambda r, participants: None  # every round built in full
    result = sm.run(
        method, made, process, ROUNDS, seed=7, metrics=(), progress=False,
        callback=lambda r, z, ctx: marks.append(len(made.log)), **options,
    )  # fmt: skip
    asked = np.zeros((ROUNDS + 1, 2), dtype=np.int64)
    start = 0
    for r, end in enumerate(marks, start=1):
        for evaluations, samples in made.log[start:end]:
            asked[r] += (evaluations, samples)
        start = end
    return result, asked


def _same_costs(a, b):
    for name in COSTS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("process", sorted(PROCESSES))
@pytest.mark.parametrize("name", sorted(FEDERATED))
def test_federated_columns_count_what_the_round_asked(name, process):
    result, asked = _run(FEDERATED[name](), problem(), PROCESSES[process]())
    np.testing.assert_array_equal(result.gradients, asked[:, 0])
    np.testing.assert_array_equal(result.sample_gradients, asked[:, 1])
    # messages: a fixed number per participant, the same in every round after the first
    participants = result.participants[2:]
    per = {int(m) // int(p) for m, p in zip(result.messages[2:], participants, strict=True) if p}
    assert len(per) == 1 and per.pop() >= 2
    np.testing.assert_array_equal(result.messages[2:][participants == 0], 0)
    assert np.all(result.floats % DIM == 0)
    if process == "bernoulli":  # the participants change from round to round
        assert np.unique(result.participants[1:]).size > 2
    untemplated, _ = _run(FEDERATED[name](), problem(), PROCESSES[process](), templates=False)
    _same_costs(result, untemplated)


@pytest.mark.parametrize("name", sorted(DECENTRALIZED))
def test_decentralized_columns_count_what_the_iteration_asked(name):
    method = DECENTRALIZED[name]()
    result, asked = _run(method, problem(), Full(N))
    np.testing.assert_array_equal(result.gradients, asked[:, 0])
    np.testing.assert_array_equal(result.sample_gradients, asked[:, 1])
    if name not in EXACT_SOLVES:  # every iteration evaluates gradients
        assert np.all(result.gradients[1:] > 0)
    # messages: a whole number of messages per directed edge of the iteration's graph
    graphs = _graphs()
    edges = np.array([graphs.adjacency(k).nnz for k in range(ROUNDS)])  # no self-loops
    assert np.all(result.messages[1:] % edges == 0)
    assert np.all(result.messages[2:] // edges[1:] >= 1)


def test_focus_columns_follow_the_participants():
    """The bug report: FOCUS's gradients and messages froze at the first templated
    round's values (510, 560, 560, ... under Bernoulli participation)."""
    made = LeastSquares.random(200, 5, seed=0)
    focus = sm.run(A.FOCUS(0.05, 5), made, Bernoulli(0.5, 200), 8, seed=1, progress=False)
    np.testing.assert_array_equal(focus.gradients, 5 * focus.participants)
    np.testing.assert_array_equal(focus.messages, 2 * focus.participants)
    expected = 5 * np.array(
        [made.rows_per_client[np.flatnonzero(mask)].sum() for mask in _masks(200, 1, 8)]
    )
    np.testing.assert_array_equal(focus.sample_gradients[1:], expected)


def _masks(n, seed, rounds):
    stream = Bernoulli(0.5, n).masks(seed)
    return [next(stream) for _ in range(rounds)]


def test_variance_reduced_methods_count_their_sampled_gradients():
    """The bug report: GT-SAGA recorded [0, 40, 0, 0, ...] gradients (its row maps were
    counted as none). Now: one evaluation and one sample gradient per node per iteration
    (GT-SAGA), two of each (GT-SVRG, GT-SARAH: the same samples at two points), besides
    the full gradients at the start, snapshots and restarts."""
    made = LeastSquares.random(20, 5, rows_per_client=(3, 7), seed=0)
    ring = StaticSequence(nx.cycle_graph(20))
    m = int(made.rows_per_client.sum())
    saga = sm.run(A.GTSAGA(0.01, ring), made, Full(20), 6, progress=False)
    np.testing.assert_array_equal(saga.gradients[2:], 20)
    np.testing.assert_array_equal(saga.sample_gradients[2:], 20)
    # round 1: y0 = v0 = grad F (one full gradient), the table (m one-sample evaluations),
    # its average (a full gradient again) and the iteration's draws
    assert saga.gradients[1] == 20 + m + 20 + 20
    assert saga.sample_gradients[1] == m + m + m + 20
    svrg = sm.run(A.GTSVRG(0.01, ring, snapshot_every=3, batch=2), made, Full(20), 7)
    snapshots = np.arange(1, 7) % 3 == 0  # iterations 1..6 (entries 2..7 of the record)
    np.testing.assert_array_equal(svrg.gradients[2:], np.where(snapshots, 60, 40))
    np.testing.assert_array_equal(svrg.sample_gradients[2:], np.where(snapshots, m + 80, 80))


def test_minibatch_gradients_cost_their_batch():
    made = LeastSquares.random(N, DIM, rows_per_client=(2, 6), seed=4)
    result = sm.run(A.FedAvg(0.01, 3), made.minibatch(2), Bernoulli(0.5, N), 6, progress=False)
    np.testing.assert_array_equal(result.sample_gradients, 2 * result.gradients)


def test_gossip_segments_count_the_endpoints_samples():
    """Compiled gossip segments record each tick's two endpoints' samples (m_i + m_j),
    as the independent count over the activation stream says."""
    made = LeastSquares.random(12, 4, rows_per_client=(3, 7), seed=0)
    ring = nx.cycle_graph(12)
    method = A.DGD(0.01, StaticSequence(ring))
    result = sm.run(method, made, RandomEdge(ring), 3000, seed=3, progress=False)
    stream = RandomEdge(ring).activations(3)
    expected = [made.rows_per_client[next(stream).nodes].sum() for _ in range(3000)]
    np.testing.assert_array_equal(result.sample_gradients[1:], expected)
    np.testing.assert_array_equal(result.gradients[1:], 2)


def test_a_resumed_gossip_run_ends_bit_for_bit_where_the_uninterrupted_one_does(tmp_path):
    made = LeastSquares.random(12, 4, seed=0)
    ring = nx.cycle_graph(12)

    def run(rounds, path):
        method = A.GradientTracking(0.1 / made.smoothness, StaticSequence(ring))
        return sm.run(
            method, made, RandomEdge(ring), rounds, progress=False, checkpoint=path,
            checkpoint_every=100,
        )  # fmt: skip

    whole = run(1000, tmp_path / "whole.ckpt")
    run(500, tmp_path / "cut.ckpt")
    resumed = run(1000, tmp_path / "cut.ckpt")
    assert resumed.config["resumed_from"] == 500
    np.testing.assert_array_equal(resumed.server, whole.server)
    np.testing.assert_array_equal(resumed.distance, whole.distance)
    _same_costs(resumed, whole)


GOSSIP = ("DGD", "GradientTracking", "EXTRA", "NIDS", "ExactDiffusion")


@pytest.mark.parametrize("name", GOSSIP)
def test_gossip_columns_count_what_the_ticks_asked(name):
    """Under edge activation: the callback's round-by-round run against the problem's log,
    and the compiled segments (no callback) against it."""
    ring = nx.cycle_graph(N)

    def make():
        method = DECENTRALIZED[name]()
        method.graphs = StaticSequence(ring)
        return method

    result, asked = _run(make(), problem(), RandomEdge(ring))
    np.testing.assert_array_equal(result.gradients, asked[:, 0])
    np.testing.assert_array_equal(result.sample_gradients, asked[:, 1])
    # a tick's messages: each endpoint sends to the other in each mixing phase
    assert np.all(result.messages[1:] % 2 == 0) and np.all(result.messages[2:] > 0)
    segmented = sm.run(make(), problem(), RandomEdge(ring), ROUNDS, seed=7, metrics=())
    _same_costs(segmented, result)
