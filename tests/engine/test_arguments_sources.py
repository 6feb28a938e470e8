"""Every source of partial participation goes through the method's check, before any
work (issue 41): the process, a clock's deadline, a clock's availability and lost uploads,
for each method that needs every node in every round."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as alg
from stochmix import mixing, participation, problems
from stochmix.config import ConfigError, parse
from stochmix.engine.runner.arguments import RunOptions
from stochmix.participation.thinned import Thinned, thinned
from stochmix.timing import Clock, Exponential, OnOff, TimeModel

N = 6
GRAPHS = mixing.StaticSequence(nx.cycle_graph(N), N)
PROBLEM = problems.LeastSquares.random(N, 2, rows_per_client=4, seed=0)
TIMES = TimeModel(compute=Exponential(1.0))

#: method -> what the refusal says about it
METHODS = {
    "GradientTracking": lambda: alg.GradientTracking(0.1, GRAPHS),
    "DecentralizedADMM": lambda: alg.DecentralizedADMM(0.5, GRAPHS),
    "DLM": lambda: alg.DLM(0.1, GRAPHS, 1.0),
    "FedPD": lambda: alg.FedPD(0.1),
    "GT-SVRG": lambda: alg.GTSVRG(0.1, GRAPHS),
    "GT-SAGA": lambda: alg.GTSAGA(0.1, GRAPHS),
    "GT-SARAH": lambda: alg.GTSARAH(0.1, GRAPHS),
    "Scaffnew": lambda: alg.Scaffnew(0.1),
}

#: source -> (participation, clock, what the error names)
SOURCES = {
    "process": (participation.Bernoulli(0.5, n_clients=N), None, "Bernoulli"),
    "deadline": (participation.Full(N), Clock(TIMES, deadline=1.5), "clock.deadline=1.5"),
    "availability": (
        participation.Full(N),
        Clock(TIMES, availability=OnOff(1.0, 1.0)),
        "clock.availability=OnOff(mean_on=1.0, mean_off=1.0)",
    ),
    "uplink": (participation.UplinkDrops(participation.Full(N), 0.2), None, "UplinkDrops"),
}


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("name", list(METHODS))
def test_every_source_of_partial_participation_is_refused_before_any_work(name, source):
    process, clock, names = SOURCES[source]
    method = METHODS[name]()
    with pytest.raises(ValueError, match="participation") as caught:
        RunOptions.of(clock=clock).checked(method, PROBLEM, process, 10)
    message = str(caught.value)
    assert names in message and "\n" not in message


@pytest.mark.parametrize("source", ["deadline", "availability"])
def test_a_refused_clock_stops_the_run_before_any_gradient(source, monkeypatch):
    process, clock, names = SOURCES[source]
    calls = []
    monkeypatch.setattr(type(PROBLEM), "gradients", lambda self, *a, **k: calls.append(1) or 1 / 0)
    with pytest.raises(ValueError, match=names.replace("(", r"\(").replace(")", r"\)")):
        sm.run(alg.GradientTracking(0.1, GRAPHS), PROBLEM, process, 50, clock=clock)
    assert calls == []


def test_a_clock_that_drops_nobody_is_still_accepted():
    for name in METHODS:
        RunOptions.of(clock=Clock(TIMES)).checked(
            METHODS[name](), PROBLEM, participation.Full(N), 3
        )


def test_methods_that_take_partial_participation_take_a_thinning_clock():
    for method in (alg.FedAvg(0.1, 2), alg.DGD(0.1, GRAPHS)):
        for source in ("deadline", "availability"):
            process, clock, _ = SOURCES[source]
            RunOptions.of(clock=clock).checked(method, PROBLEM, process, 3)


def test_check_mixing_false_lets_gradient_tracking_run_under_a_deadline():
    method = alg.GradientTracking(0.1, GRAPHS, check_mixing=False)
    RunOptions.of(clock=SOURCES["deadline"][1]).checked(method, PROBLEM, participation.Full(N), 3)


def test_the_thinned_view_names_each_source_and_knows_no_marginals():
    process = participation.UplinkDrops(participation.Full(N), 0.25)
    clock = Clock(TIMES, deadline=2.0, availability=OnOff(1.0, 3.0))
    view = thinned(process, clock)
    assert isinstance(view, Thinned) and view.n_clients == N
    assert view.probabilities is None and view.drops_nodes and view.activates == "nodes"
    assert repr(view) == (
        f"{process!r} thinned by clock.deadline=2.0 and clock.availability="
        "OnOff(mean_on=1.0, mean_off=3.0) and lost uploads (p=0.25)"
    )
    assert thinned(participation.Full(N), Clock(TIMES)) is not None
    full = participation.Full(N)
    assert thinned(full, Clock(TIMES)) is full and thinned(full, None) is full


def test_a_clock_with_an_edge_process_is_refused_before_any_work():
    gossip = participation.RandomEdge(nx.cycle_graph(N))
    with pytest.raises(ValueError, match=r"clock must be None with participation RandomEdge"):
        RunOptions.of(clock=Clock(TIMES)).checked(alg.DGD(0.1, GRAPHS), PROBLEM, gossip, 3)


def test_a_configuration_with_a_deadline_refuses_gradient_tracking():
    table = {
        "problem": {"kind": "quadratic", "n_clients": N, "dim": 2},
        "graphs": {"kind": "cycle"},
        "methods": [{"kind": "gradient_tracking", "lr": 0.1}],
        "clock": {"compute": {"kind": "exponential", "mean": 1.0}, "deadline": 1.5},
    }
    with pytest.raises(ConfigError, match=r"clock: methods\[0\].*clock\.deadline=1\.5"):
        parse(table)
    table["clock"] = {"compute": 1.0, "availability": {"mean_on": 1.0, "mean_off": 1.0}}
    with pytest.raises(ConfigError, match=r"clock: methods\[0\].*clock\.availability=OnOff"):
        parse(table)


def test_gradient_tracking_without_a_thinning_clock_still_converges():
    """The refusal takes nothing from the runs it allows: full participation under a
    clock without deadline reaches the minimiser, computed independently (diagonal
    quadratics: x* = sum_i h_i z_i / sum_i h_i coordinate by coordinate)."""
    rng = np.random.default_rng(3)
    z, h = rng.normal(size=(N, 2)), rng.uniform(1.0, 2.0, size=(N, 2))
    x_star = (h * z).sum(axis=0) / h.sum(axis=0)
    complete = mixing.StaticSequence(nx.complete_graph(N), N)
    result = sm.run(
        alg.GradientTracking(0.1, complete),
        problems.Quadratic(z, h),
        participation.Full(N),
        300,
        clock=Clock(TIMES),
    )
    assert np.allclose(result.final, x_star, rtol=0, atol=1e-12)
