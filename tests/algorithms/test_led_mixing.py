"""LED's mixing condition, as its docstring states it: lambda_min(W) > -1/3 for small
steps. Metropolis weights on the 3-cube (lambda_min = -1/2) diverge; the lazy (I + W)/2
on the same graph converges; a cycle (lambda_min = -1/3 at worst) converges too."""

import warnings

import networkx as nx
import numpy as np

from stochmix import run
from stochmix.algorithms import LED
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import LeastSquares


def _metropolis(graph) -> np.ndarray:
    """W[i, j] = 1 / (1 + max(d_i, d_j)) on the edges, the rest on the diagonal."""
    n = graph.number_of_nodes()
    w = np.zeros((n, n))
    for i, j in graph.edges:
        w[i, j] = w[j, i] = 1.0 / (1 + max(graph.degree[i], graph.degree[j]))
    return w + np.diag(1.0 - w.sum(axis=1))


def _weighted(matrix) -> nx.DiGraph:
    """The graph whose natural weights are ``matrix`` (edge j -> i carries W[i, j])."""
    rows, cols = np.nonzero(matrix)
    return nx.DiGraph([(j, i, {"weight": matrix[i, j]}) for i, j in zip(rows, cols, strict=True)])


def _led(graph, rule, rounds=120):
    problem = LeastSquares.random(graph.number_of_nodes(), 4, 10, seed=0)
    method = LED(0.01 / problem.smoothness, StaticSequence(graph), local_steps=2, rule=rule)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the divergence warning of the Metropolis run
        return run(method, problem, Full(graph.number_of_nodes()), rounds)


def test_led_diverges_below_minus_one_third_and_the_lazy_matrix_fixes_it(unchecked):
    cube = nx.convert_node_labels_to_integers(nx.hypercube_graph(3))
    w = _metropolis(cube)
    assert np.linalg.eigvalsh(w)[0] < -1 / 3  # -1/2: below the bound
    bad = _led(cube, "metropolis")
    assert bad.diverged or bad.last() > 1e3
    lazy = (np.eye(8) + w) / 2
    assert np.linalg.eigvalsh(lazy)[0] >= -1e-12
    good = _led(_weighted(lazy), "natural")
    assert not good.diverged and good.last() < bad.error()[0] and good.rate() < 1.0
    cycle = nx.cycle_graph(8)
    assert np.isclose(np.linalg.eigvalsh(_metropolis(cycle))[0], -1 / 3)
    assert _led(cycle, "metropolis").rate() < 1.0
