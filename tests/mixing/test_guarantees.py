"""What a graph sequence promises about its matrices by construction
(``GraphSequence.guarantees``), and what a decentralized run then skips.

Each promise is checked against the library's own checkers on many sequences (a promise
that does not hold would let a wrong matrix through unchecked), and a run on a sequence
that promises everything its method needs calls no checker at all; a sequence that
promises less is still checked, and a disconnected one is still refused.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

import stochmix as sm
import stochmix.algorithms.decentralized_base as base
from stochmix.algorithms import DGD, GradientTracking
from stochmix.mixing import (
    DirectedRingSequence,
    MessageDrops,
    OnePeerExponential,
    RandomSequence,
    StaticSequence,
)
from stochmix.mixing.checks import stochasticity_problem

KINDS = ("row", "column", "doubly")


def _connected_over_period(sequence) -> bool:
    n = sequence.n_nodes
    union = sp.csr_array((n, n))
    for k in range(sequence.period or 1):
        union = union + sequence.adjacency(k)
    return connected_components(union, directed=True, connection="strong")[0] == 1


SEQUENCES = [
    *(OnePeerExponential(n) for n in (1, 2, 3, 5, 8, 13, 64)),
    DirectedRingSequence(12, shifts=(1,)),
    DirectedRingSequence(12, shifts=(2, 3)),
    DirectedRingSequence(12, shifts=(2, 4)),  # gcd 2: not connected
    DirectedRingSequence(9, shifts=(0, 3)),
    StaticSequence(nx.cycle_graph(7)),
    StaticSequence(nx.path_graph(5)),
    RandomSequence(9, "erdos_renyi", seed=3),
    MessageDrops(StaticSequence(nx.cycle_graph(8)), probability=0.3, symmetric=True, seed=1),
]


@pytest.mark.parametrize(
    "sequence",
    SEQUENCES,
    ids=[
        f"{type(s).__name__}-{s.n_nodes}-{getattr(s, 'shifts', '')}-{k}"
        for k, s in enumerate(SEQUENCES)
    ],
)
@pytest.mark.parametrize("rule", ["natural", "metropolis", "row", "column"])
def test_every_promise_holds(sequence, rule):
    promised = sequence.guarantees(rule)
    assert promised <= {*KINDS, "connected"}
    if not promised:
        return
    for k in range(sequence.period or 3):
        try:
            w = sequence.matrix(k, rule)
        except ValueError:  # no such matrix (metropolis on a directed graph): nothing to hold
            return
        for kind in promised & set(KINDS):
            assert stochasticity_problem(w, kind, 1e-12) is None, (k, kind)
    if "connected" in promised:
        assert _connected_over_period(sequence)


def test_what_each_family_promises():
    assert OnePeerExponential(100).guarantees("natural") == {*KINDS, "connected"}
    assert DirectedRingSequence(12, (2, 4)).guarantees("natural") == set(KINDS)
    assert StaticSequence(nx.cycle_graph(5)).guarantees("metropolis") == set(KINDS)
    assert StaticSequence(nx.cycle_graph(5)).guarantees("natural") == frozenset()
    assert StaticSequence(nx.cycle_graph(5)).guarantees("fastest") == frozenset()
    assert math.gcd(12, 2, 4) == 2


def test_a_subclass_that_builds_its_own_matrices_promises_nothing():
    class Own(StaticSequence):
        def _build(self, k, rule):
            return super()._build(k, "row") * 2.0  # not what the rule makes

    assert Own(nx.cycle_graph(5)).guarantees("metropolis") == frozenset()


def test_a_run_on_a_promised_sequence_checks_nothing(monkeypatch):
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return None

    monkeypatch.setattr(base, "stochasticity_problem", counted)
    problem = sm.problems.Quadratic.random(16, 2, seed=0)
    full = sm.participation.Full(16)
    sm.run(GradientTracking(0.05, OnePeerExponential(16), rule="natural"), problem, full, 10)
    assert calls == []
    sm.run(GradientTracking(0.05, StaticSequence(nx.cycle_graph(16))), problem, full, 3)
    assert calls == []  # metropolis: doubly stochastic by construction
    sm.run(DGD(0.05, StaticSequence(nx.cycle_graph(16)), rule="natural"), problem, full, 3)
    assert calls  # the graph's own weights: checked


def test_a_disconnected_ring_is_still_refused():
    problem = sm.problems.Quadratic.random(12, 2, seed=0)
    method = DGD(0.05, DirectedRingSequence(12, shifts=(2, 4)), rule="natural")
    with pytest.raises(ValueError, match="not strongly connected"):
        sm.run(method, problem, sm.participation.Full(12), 4)


def test_periodic_full_rounds_are_planned_once_per_position(monkeypatch):
    """Gradient tracking on the one-peer exponential graph under Full(n): its iterations
    are planned once per position in the period (beyond the participant cap of the plan
    cache: the key names a position), and the run is the same as one that plans every
    iteration."""
    n, period = 4200, OnePeerExponential(4200).period
    problem = sm.problems.Quadratic.random(n, 2, seed=1)
    built = []

    class Counted(GradientTracking):
        rounds_repeat = True  # (stated: its hooks count, they change no round)

        def round_phases(self, r, participants, ctx):
            built.append(r)
            return super().round_phases(r, participants, ctx)

    class Unkeyed(GradientTracking):
        def phase_key(self, r, participants):
            return None

    rounds = 3 * period + 2
    full = sm.participation.Full(n)
    got = sm.run(Counted(0.05, OnePeerExponential(n), rule="natural"), problem, full, rounds)
    # the first iteration, then each position of the period twice (a plan is kept from
    # the second time its key comes); nothing after that
    assert [r for r in built if r > 2 * period] == []
    assert len(built) < rounds
    want = sm.run(Unkeyed(0.05, OnePeerExponential(n), rule="natural"), problem, full, rounds)
    np.testing.assert_array_equal(got.server, want.server)
    for column in ("gradients", "messages", "floats"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))
    # node activation: every iteration is built
    built.clear()
    bern = sm.participation.Bernoulli(0.5, n)
    sm.run(Counted(0.05, OnePeerExponential(n), rule="natural", check_mixing=False), problem,
           bern, 6, seed=0)  # fmt: skip
    assert len(built) == 6
