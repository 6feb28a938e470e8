"""Error messages that say what a method needs: FedBuff's participation, ADMM's local
step (whose hinted formula is checked to converge)."""

import re

import networkx as nx
import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import DecentralizedADMM
from stochmix.config import ConfigError, parse
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import LeastSquares


@pytest.mark.parametrize("kind", ["fedbuff", "fedasync"])
def test_asynchronous_methods_say_they_draw_their_own_clients(kind):
    raw = {
        "problem": {"kind": "quadratic", "n_clients": 30, "dim": 2},
        "participation": {"kind": "bernoulli", "p": 0.5},
        "methods": [{"kind": kind, "lr": 0.1}],
    }
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    message = str(caught.value)
    assert "arrival schedule" in message and "every client in every round" not in message
    assert message.startswith("participation.kind = 'bernoulli' cannot drive")


def test_scaffnew_still_says_its_paper_runs_every_client():
    raw = {
        "problem": {"kind": "quadratic", "n_clients": 4, "dim": 2},
        "participation": {"kind": "bernoulli", "p": 0.5},
        "methods": [{"kind": "scaffnew", "lr": 0.1}],
    }
    with pytest.raises(ConfigError, match="scaffnew runs every client in every round"):
        parse(raw)


def test_admm_without_local_lr_gives_a_safe_step_that_converges():
    n, lr = 6, 0.5
    graph = nx.cycle_graph(n)
    graph.add_edge(0, 3)  # degrees 3, 2, 2, 3, 2, 2: d_max = 3
    graphs = StaticSequence(graph)
    with pytest.raises(ValueError, match="local_lr must be given") as caught:
        DecentralizedADMM(lr, graphs, solver="gradient")
    message = str(caught.value)
    assert "1 / (L + 2 d_max / lr)" in message and "d_max = 3" in message
    shift = float(re.search(r"problem\.smoothness \+ ([0-9.e+-]+)\)$", message).group(1))
    assert shift == 2 * 3 / lr
    problem = LeastSquares.random(n, 3, 8, seed=0)
    local_lr = 1.0 / (problem.smoothness + shift)
    res = run(DecentralizedADMM(lr, graphs, "gradient", local_lr, 3), problem, Full(n), 200)
    assert res.last() < 1e-6 and np.isfinite(res.server).all()
