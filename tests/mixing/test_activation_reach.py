"""Activation graphs are checked as the method's own W is (issue 41): a gossip process
over a disconnected graph, a graph with an isolated node, weights that zero out edges, or
a node activation that never activates some node is refused before any work with one
error naming ``participation``; ``check_mixing=False`` runs it anyway."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as alg
from stochmix import mixing, participation, problems
from stochmix.engine.runner.arguments import RunOptions
from stochmix.mixing.reach import activation_reach_problem

N = 6
GRAPHS = mixing.StaticSequence(nx.cycle_graph(N), N)
PROBLEM = problems.Quadratic.random(N, 2, seed=0)
TWO_TRIANGLES = nx.Graph([(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)])
WITH_ISOLATED = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 4)])
WITH_ISOLATED.add_node(5)
HALF_OFF = np.array([True, True, True, True, True, False])

BROKEN = {
    "disconnected RandomEdge": lambda: participation.RandomEdge(TWO_TRIANGLES),
    "disconnected RandomMatching": lambda: participation.RandomMatching(TWO_TRIANGLES),
    "isolated node RandomEdge": lambda: participation.RandomEdge(WITH_ISOLATED),
    "isolated node RandomMatching": lambda: participation.RandomMatching(WITH_ISOLATED),
    "weights that zero out edges": lambda: participation.RandomEdge(
        nx.cycle_graph(N), weights=[1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    ),
    "a node never active (trace)": lambda: participation.Trace(
        np.stack([HALF_OFF, HALF_OFF]), repeat=True
    ),
}

METHODS = {
    "DGD": lambda check: alg.DGD(0.1, GRAPHS, check_mixing=check),
    "GradientTracking": lambda check: alg.GradientTracking(0.1, GRAPHS, check_mixing=check),
}


def _connected_over_all_nodes(n, edges) -> bool:
    """networkx's answer, computed independently of stochmix.mixing.reach."""
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(map(tuple, edges))
    return nx.is_connected(graph)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", list(BROKEN))
def test_an_activation_that_cannot_reach_every_node_is_refused(case, method):
    process = BROKEN[case]()
    if method == "GradientTracking" and case.endswith("(trace)"):
        pytest.skip("gradient tracking refuses node activation anyway (doubly stochastic)")
    with pytest.raises(ValueError) as caught:
        RunOptions.of().checked(METHODS[method](True), PROBLEM, process, 10)
    message = str(caught.value)
    assert message.startswith("participation: ") and "\n" not in message
    assert repr(process) in message and "check_mixing=False" in message


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", list(BROKEN))
def test_check_mixing_false_accepts_it(case, method):
    process = BROKEN[case]()
    RunOptions.of().checked(METHODS[method](False), PROBLEM, process, 10)


def test_check_mixing_false_runs_it_and_the_cut_off_part_never_hears_the_rest():
    """DGD over two triangles (check_mixing=False) averages each triangle alone: with
    centres 0 in one and 1 in the other, every node ends near its own triangle's centre,
    so the consensus error (mean squared distance to the average, 1/2) stays near 1/4."""
    z = np.array([[0.0], [0.0], [0.0], [1.0], [1.0], [1.0]])
    result = sm.run(
        alg.DGD(0.05, GRAPHS, check_mixing=False), problems.Quadratic(z, np.ones((N, 1))),
        participation.RandomEdge(TWO_TRIANGLES), 3000, metrics=("consensus",),
    )  # fmt: skip
    assert result.consensus[-1] == pytest.approx(0.25, abs=1e-6)


def test_a_connected_activation_is_accepted():
    for process in (
        participation.RandomEdge(nx.cycle_graph(N)),
        participation.RandomMatching(nx.cycle_graph(N)),
        participation.RandomEdge(nx.cycle_graph(N), weights=[1.0, 2.0, 3.0, 0.0, 1.0, 1.0]),
        participation.OnePeerPermutation(N),
        participation.Bernoulli(0.5, n_clients=N),
    ):
        assert activation_reach_problem(process, GRAPHS) is None
        RunOptions.of().checked(alg.DGD(0.1, GRAPHS), PROBLEM, process, 3)


@pytest.mark.parametrize("seed", range(8))
def test_the_edge_check_agrees_with_networkx(seed):
    rng = np.random.default_rng(seed)
    graph = nx.gnp_random_graph(N, 0.35, seed=seed)
    if graph.number_of_edges() == 0:
        graph.add_edge(0, 1)
    process = participation.RandomEdge(
        graph,
        weights=rng.integers(0, 2, graph.number_of_edges())
        + (np.arange(graph.number_of_edges()) == 0),
    )
    kept = process.edge_list[process.edge_probabilities > 0]
    expected_ok = _connected_over_all_nodes(N, kept)
    assert (activation_reach_problem(process) is None) == expected_ok


def test_weights_mixing_keeps_only_the_edges_of_the_methods_graphs():
    """With ``mixing="weights"`` an activated edge that W lacks mixes nothing: a gossip
    graph connected only through such edges is refused."""
    path = mixing.StaticSequence(nx.path_graph(N), N)  # lacks the edge (0, 5)
    ring_minus = nx.cycle_graph(N)
    ring_minus.remove_edge(2, 3)  # connected only through (0, 5)
    gossip = participation.RandomEdge(ring_minus, mixing="weights")
    problem = activation_reach_problem(gossip, path)
    assert problem is not None and "the method's graphs lack" in problem
    assert activation_reach_problem(participation.RandomEdge(ring_minus), path) is None
