"""Round templates of methods weighted by 1/p_i (FedStale, FedVARP, MIFA, FedAvg with
unbiased weights): the per-client weights are a RoundArray whose rule gives each round's
(``eta / (N p_i)`` over its participants) and the server's own coefficient a round scalar,
so rounds of every size and every set of participants share one template, under a uniform
sample and under Bernoulli participation with p_i that differ from client to client.
FedAU's learned weights too: its estimator records a round once, and a repeated call for
the same round and participants returns the same estimates. Templated runs equal the runs
built in full bit for bit, every cost column included."""

import pickle

import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine.model.round_scalars import RoundArray
from stochmix.participation import Bernoulli, FedAUEstimator, UniformSample

N, ROUNDS = 40, 14
METHODS = {
    "FedStale": lambda lr: A.FedStale(lr, 2, beta=0.5),
    "FedVARP": lambda lr: A.FedVARP(lr, 2),
    "MIFA": lambda lr: A.MIFA(lr, 2),
    "FedAvg unbiased": lambda lr: A.FedAvg(lr, 2, weights="unbiased", server_lr=0.8),
    "FedAU": lambda lr: A.FedAvg(lr, 2, weights="fedau"),
    "FedStale, FedAU's estimates": lambda lr: A.FedStale(lr, 2, probabilities="fedau"),
}
PROCESSES = {
    "uniform sample": lambda: UniformSample(N, 6),  # every p_i = 6 / 40
    "Bernoulli, p_i from 0.1 to 0.5": lambda: Bernoulli(np.linspace(0.1, 0.5, N), N),
}
COLUMNS = ("distance", "gradients", "messages", "floats", "participants")


def _problem():
    return sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=2)


def _run(method, process, templates: bool):
    if not templates:
        method.template_key = lambda r, participants: None  # every round built in full
    return sm.run(method, _problem(), process, ROUNDS, seed=5, progress=False)


@pytest.mark.parametrize("process", sorted(PROCESSES))
@pytest.mark.parametrize("name", sorted(METHODS))
def test_weights_bound_by_rule_are_templated_and_change_no_number(name, process):
    lr = 0.3 / _problem().smoothness
    text = str(sm.explain(METHODS[name](lr), _problem(), PROCESSES[process](), rounds=6))
    assert "templating: on" in text and "instantiated from its template" in text, text
    assert "slow paths: none" in text, text
    templated = _run(METHODS[name](lr), PROCESSES[process](), templates=True)
    full = _run(METHODS[name](lr), PROCESSES[process](), templates=False)
    np.testing.assert_array_equal(templated.server, full.server)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(templated, column), getattr(full, column), column)
    if process.startswith("Bernoulli"):  # rounds of several sizes, one template
        assert np.unique(templated.participants[1:]).size > 3


def test_the_fedau_estimator_records_a_round_once():
    one, two = FedAUEstimator(6), FedAUEstimator(6)
    for r, s in ((0, [0, 2]), (3, [0, 1, 2]), (5, [1, 2, 4])):
        first = one.update(r, np.array(s))
        np.testing.assert_array_equal(one.update(r, np.array(s)), first)  # repeated
        np.testing.assert_array_equal(two.update(r, np.array(s)), first)  # once
    for key in ("last", "records", "omega"):
        np.testing.assert_array_equal(getattr(one, key), getattr(two, key))
    with pytest.raises(ValueError, match="increase"):
        one.update(5, np.array([1, 3]))  # the same round, other participants


def test_a_subclass_keeps_a_key_by_size():
    """A user's FedStale may read |S| in its hooks without a rule: its key holds |S|."""

    class Mine(A.FedStale):
        pass

    assert Mine(0.1).template_key(2, np.arange(7)) == 7
    assert A.FedStale(0.1).template_key(2, np.arange(7)) == A.FedStale(0.1).template_key(
        3, np.arange(9)
    )


def test_a_round_array_keeps_its_rule_through_scaling_only():
    table = np.linspace(1.0, 2.0, 10)
    a = RoundArray(table[[1, 4, 6]], lambda r, s: table[s])
    later = np.array([0, 2, 3, 9])
    for scaled, expected in (
        (0.3 * a, 0.3 * table[later]),
        (a * 0.3, table[later] * 0.3),
        (a / 7.0, table[later] / 7.0),
        (-a, -table[later]),
        (-0.5 * (2.0 * a), -0.5 * (2.0 * table[later])),
    ):
        assert isinstance(scaled, RoundArray) and scaled.rule is not None
        np.testing.assert_array_equal(scaled.at(5, later), expected)  # the same bits
    for derived in (a + 1.0, a * a, a[::-1], a.copy(), np.sqrt(a)):
        assert getattr(derived, "rule", None) is None
    assert type(pickle.loads(pickle.dumps(0.3 * a))) is np.ndarray
    with pytest.raises(ValueError, match="shape"):
        RoundArray(table[:3], lambda r, s: table[:2]).at(0, np.arange(3))
