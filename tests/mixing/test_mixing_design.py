"""The optimal weight rules "fastest" (fastest mixing Markov chain, Boyd, Diaconis & Xiao
2004) and "fdla" (fastest distributed linear averaging, Xiao & Boyd 2004): the closed-form
optima of complete graphs, paths and cycles, the order metropolis >= fastest >= fdla on
random graphs, valid matrices on disconnected graphs, and the rules wherever a weight rule
is taken (graph sequences, methods, configurations, ``stochmix spectrum``)."""

import re
import sys

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("cvxpy")

import stochmix as sm  # noqa: E402
from stochmix.algorithms import EXTRA, GradientTracking  # noqa: E402
from stochmix.cli import main  # noqa: E402
from stochmix.config import ConfigError, parse  # noqa: E402
from stochmix.mixing import (  # noqa: E402
    RULES,
    MessageDrops,
    PeriodicSequence,
    StaticSequence,
    fastest_mixing_weights,
    fdla_weights,
    is_doubly_stochastic,
    metropolis_hastings,
    sequences,
)
from stochmix.mixing.spectral_sequences import RULE_CLAIMS, check_rule  # noqa: E402
from stochmix.participation import Full  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RULE_FUNCTIONS = {"fastest": fastest_mixing_weights, "fdla": fdla_weights}


def slem(W) -> float:
    """``||W - 11^T/n||_2`` of a symmetric W, from numpy's dense eigen-solver."""
    dense = W.toarray() if sp.issparse(W) else np.asarray(W)
    n = dense.shape[0]
    return float(np.abs(np.linalg.eigvalsh(dense - 1.0 / n)).max())


def assert_valid(W, graph: nx.Graph, n: int, rule: str) -> None:
    """Symmetric, rows summing to one (1e-10), nonzero off the diagonal on edges only;
    "fastest" nonnegative (doubly stochastic at the library's 1e-10)."""
    assert isinstance(W, sp.csr_array) and W.shape == (n, n)
    dense = W.toarray()
    np.testing.assert_array_equal(dense, dense.T)
    np.testing.assert_allclose(dense.sum(axis=1), 1.0, rtol=0, atol=1e-10)
    allowed = np.zeros((n, n), dtype=bool)
    for i, j in graph.edges():
        allowed[i, j] = allowed[j, i] = True
    off = ~np.eye(n, dtype=bool)
    assert not np.any((dense != 0) & off & ~allowed), "a weight off the graph's edges"
    if rule == "fastest":
        assert dense.min() >= 0.0
        assert is_doubly_stochastic(W, atol=1e-10)


# ------------------------------------------------------------------ closed-form optima
@pytest.mark.parametrize("rule", ["fastest", "fdla"])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_complete_graph_averages_in_one_step(rule, n):
    graph = nx.complete_graph(n)
    W = RULE_FUNCTIONS[rule](graph)
    assert_valid(W, graph, n, rule)
    np.testing.assert_allclose(W.toarray(), np.full((n, n), 1.0 / n), rtol=0, atol=1e-6)
    assert slem(W) <= 1e-6


@pytest.mark.parametrize("n", range(3, 9))
def test_path_weights_are_one_half(n):
    """Boyd, Diaconis & Xiao: on the path every edge weighs 1/2 (the end nodes keep 1/2,
    the inner nodes nothing), SLEM cos(pi / n)."""
    graph = nx.path_graph(n)
    W = fastest_mixing_weights(graph)
    assert_valid(W, graph, n, "fastest")
    dense = W.toarray()
    edges = np.arange(n - 1)
    np.testing.assert_allclose(dense[edges, edges + 1], 0.5, rtol=0, atol=1e-6)
    diagonal = np.zeros(n)
    diagonal[[0, -1]] = 0.5
    np.testing.assert_allclose(np.diag(dense), diagonal, rtol=0, atol=1e-6)
    assert slem(W) == pytest.approx(np.cos(np.pi / n), abs=1e-6)
    assert slem(fdla_weights(graph)) <= np.cos(np.pi / n) + 1e-7


def cycle_optimum(n: int, nonnegative: bool) -> tuple[float, float]:
    """The optimal common edge weight of the n-cycle and its SLEM.

    By symmetry (the rotations and reflections of the cycle map the convex problem to
    itself, so the average of a solution over them is a solution) every edge has the same
    weight w, and ``W = I - w L`` has the eigenvalues ``1 - w a_k``, ``a_k = 2 (1 - cos(2 pi
    k / n))``, ``k = 0..n-1``. The SLEM ``max(|1 - w a_min|, |1 - w a_max|)`` (``a_min =
    a_1``, ``a_max = a_{floor(n/2)}``) is convex in w, smallest where ``1 - w a_min = w
    a_max - 1``: ``w = 2 / (a_min + a_max)``, SLEM ``(a_max - a_min) / (a_max + a_min)``.
    "fastest" also needs the diagonal ``1 - 2 w >= 0``: w at most 1/2, the nearest
    feasible point of the convex SLEM. (``a_min + a_max >= 4`` for every n, so the bound
    does not bind and the two rules agree on cycles.)"""
    a = 2.0 * (1.0 - np.cos(2.0 * np.pi * np.arange(1, n) / n))
    w = 2.0 / (a.min() + a.max())
    if nonnegative:
        w = min(w, 0.5)
    return w, float(np.abs(1.0 - w * a).max())


@pytest.mark.parametrize("rule", ["fastest", "fdla"])
@pytest.mark.parametrize("n", range(4, 10))
def test_cycle_weights_are_the_closed_form_optimum(rule, n):
    graph = nx.cycle_graph(n)
    W = RULE_FUNCTIONS[rule](graph)
    assert_valid(W, graph, n, rule)
    w, best = cycle_optimum(n, nonnegative=rule == "fastest")
    dense = W.toarray()
    nodes = np.arange(n)
    np.testing.assert_allclose(dense[nodes, (nodes + 1) % n], w, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.diag(dense), 1.0 - 2.0 * w, rtol=0, atol=1e-6)
    assert slem(W) == pytest.approx(best, abs=1e-6)
    # Metropolis: w = 1/3, the optimum on the 4-cycle only
    assert slem(W) <= slem(metropolis_hastings(graph)) + 1e-9
    assert n == 4 or slem(W) < slem(metropolis_hastings(graph)) - 1e-3


# ------------------------------------------------------------------------ random graphs
@pytest.mark.parametrize(
    ("n", "p", "seed"), [(10, 0.4, 0), (12, 0.3, 1), (16, 0.25, 2), (20, 0.2, 3)]
)
def test_random_graphs_order_metropolis_fastest_fdla(n, p, seed):
    graph = nx.erdos_renyi_graph(n, p, seed=seed)
    assert nx.is_connected(graph)
    fastest, fdla = fastest_mixing_weights(graph), fdla_weights(graph)
    assert_valid(fastest, graph, n, "fastest")
    assert_valid(fdla, graph, n, "fdla")
    assert slem(fastest) <= slem(metropolis_hastings(graph)) + 1e-7
    assert slem(fdla) <= slem(fastest) + 1e-7
    # every graph form gives the same weights
    np.testing.assert_allclose(
        fastest_mixing_weights(sp.csr_array(nx.to_scipy_sparse_array(graph))).toarray(),
        fastest.toarray(),
        rtol=0,
        atol=1e-9,
    )
    np.testing.assert_allclose(fdla_weights(nx.DiGraph(graph)).toarray(), fdla.toarray(), atol=1e-9)


@pytest.mark.parametrize("leaves", [3, 4, 6])
def test_star_weights_and_the_price_of_nonnegativity(leaves):
    """The star with k leaves: every edge weight w alike (by symmetry), the leaves'
    differences have the eigenvalue ``1 - w`` and the centre-against-leaves mode ``1 - (k +
    1) w``. "fastest" needs the centre's diagonal ``1 - k w >= 0``: ``w = 1/k``, SLEM ``(k -
    1)/k``; "fdla" balances ``1 - w = (k + 1) w - 1``: ``w = 2/(k + 2)``, SLEM ``k/(k + 2)``,
    with the negative centre weight ``1 - 2k/(k + 2)``."""
    graph = nx.star_graph(leaves)  # centre 0
    n, k = leaves + 1, leaves
    for rule, w, best in (("fastest", 1 / k, (k - 1) / k), ("fdla", 2 / (k + 2), k / (k + 2))):
        W = RULE_FUNCTIONS[rule](graph)
        assert_valid(W, graph, n, rule)
        dense = W.toarray()
        np.testing.assert_allclose(dense[0, 1:], w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(dense[0, 0], 1 - k * w, rtol=0, atol=1e-6)
        assert slem(W) == pytest.approx(best, abs=1e-6)
    assert fdla_weights(graph).toarray()[0, 0] < -0.1


@pytest.mark.parametrize("rule", ["fastest", "fdla"])
def test_disconnected_graphs_and_isolated_nodes_give_valid_matrices(rule):
    graph = nx.disjoint_union(nx.path_graph(3), nx.cycle_graph(4))  # nodes 0..6
    n = 9  # nodes 7 and 8 have no edge
    W = RULE_FUNCTIONS[rule](graph, n_nodes=n)
    assert_valid(W, graph, n, rule)
    assert slem(W) == pytest.approx(1.0, abs=1e-9)  # no weights join the components
    np.testing.assert_array_equal(W.toarray()[7:, 7:], np.eye(2))
    empty = nx.empty_graph(3)
    np.testing.assert_array_equal(RULE_FUNCTIONS[rule](empty).toarray(), np.eye(3))
    np.testing.assert_array_equal(RULE_FUNCTIONS[rule](nx.empty_graph(1)).toarray(), [[1.0]])


# --------------------------------------------------------------------------- mistakes
@pytest.mark.parametrize("rule", ["fastest", "fdla"])
def test_directed_graphs_are_refused_naming_graph(rule):
    with pytest.raises(ValueError, match=rf"graph must be undirected for rule='{rule}'.*0 -> 1"):
        RULE_FUNCTIONS[rule](nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match=rf"step 0, rule='{rule}': graph must be undirected"):
        StaticSequence(nx.DiGraph([(0, 1), (1, 2), (2, 0)])).matrix(0, rule)
    one_way = MessageDrops(StaticSequence(nx.cycle_graph(6)), 0.3, seed=0)
    with pytest.raises(ValueError, match=rf"rule='{rule}'.*symmetric=True"):
        one_way.matrix(0, rule)
    with pytest.raises(TypeError, match="graph"):
        RULE_FUNCTIONS[rule]("a graph")


@pytest.mark.parametrize("rule", ["fastest", "fdla"])
def test_missing_cvxpy_says_how_to_install_it(rule, monkeypatch):
    monkeypatch.setitem(sys.modules, "cvxpy", None)
    with pytest.raises(ImportError, match=rf"rule='{rule}'.*pip install \"stochmix\[analysis\]\""):
        RULE_FUNCTIONS[rule](nx.path_graph(3))
    with pytest.raises(ImportError, match=r"stochmix\[analysis\]"):
        StaticSequence(nx.path_graph(3)).matrix(0, rule)


# ------------------------------------------------------------ where rules are taken
def test_rules_are_listed_with_what_they_promise():
    assert {"fastest", "fdla"} <= set(RULES)
    assert set(sequences.UNDIRECTED_RULES) == {"metropolis", "fastest", "fdla"}
    assert RULE_CLAIMS["fastest"] == "doubly stochastic"
    assert RULE_CLAIMS["fdla"] == "rows and columns sum to one"
    signed = np.array([[1.5, -0.5], [-0.5, 1.5]])
    check_rule(signed, "fdla", 2)
    with pytest.raises(ValueError, match="rule='fastest' at step 2.*negative"):
        check_rule(signed, "fastest", 2)
    with pytest.raises(ValueError, match="rule='fdla' at step 1.*row 0 sums to 2"):
        check_rule(np.array([[1.5, 0.5], [-0.5, 1.5]]), "fdla", 1)


def counting(monkeypatch, rule: str) -> list:
    """Count the solves of ``rule`` behind every graph sequence."""
    calls = []
    solve = sequences._RULE_FUNCTIONS[rule]

    def counted(*args, **kwargs):
        calls.append(1)
        return solve(*args, **kwargs)

    monkeypatch.setitem(sequences._RULE_FUNCTIONS, rule, counted)
    return calls


def test_sequences_solve_each_distinct_graph_once(monkeypatch):
    calls = counting(monkeypatch, "fastest")
    static = StaticSequence(nx.cycle_graph(7))
    first = static.matrix(0, "fastest", copy=False)
    assert all(static.matrix(k, "fastest", copy=False) is first for k in range(20))
    assert len(calls) == 1
    periodic = PeriodicSequence([nx.path_graph(5), nx.star_graph(4)])
    for k in range(10):
        periodic.matrix(k, "fastest")
    assert len(calls) == 3
    star = periodic.matrix(1, "fastest").toarray()  # the star's optimum: edge weights 1/4
    np.testing.assert_allclose(star[0, 1:], 0.25, rtol=0, atol=1e-6)


def test_methods_converge_with_the_fastest_weights_solved_once(monkeypatch):
    """Gradient tracking converges with "fastest", its weights solved once for the whole
    run; EXTRA, which mixes with (I + W) / 2, needs fewer rounds with them than with
    Metropolis' on a sparse graph."""
    calls = counting(monkeypatch, "fastest")
    graph = nx.erdos_renyi_graph(10, 0.6, seed=1)
    problem = Quadratic.random(10, 3, seed=0, condition=2.0)
    tracking = GradientTracking(0.2 / problem.smoothness, StaticSequence(graph), rule="fastest")
    assert sm.run(tracking, problem, Full(10), 150, progress=False).relative_error[-1] < 1e-8
    assert len(calls) == 1
    graph = nx.erdos_renyi_graph(12, 0.3, seed=1)
    problem = Quadratic.random(12, 4, seed=0, condition=2.0)
    lr, sequence = 0.3 / problem.smoothness, StaticSequence(graph)
    fastest = sm.run(EXTRA(lr, sequence, rule="fastest"), problem, Full(12), 120, progress=False)
    metropolis = sm.run(EXTRA(lr, sequence), problem, Full(12), 120, progress=False)
    assert len(calls) == 2  # one solve per sequence
    assert fastest.rounds_to(1e-8) < metropolis.rounds_to(1e-8)


def test_fdla_negative_weights_meet_the_methods_checks():
    """Gradient tracking needs doubly stochastic mixing: the star's "fdla" W (a negative
    centre weight) is refused by its check, and runs (and converges) with
    ``check_mixing=False``."""
    graph = nx.star_graph(4)
    problem = Quadratic.random(5, 3, seed=2, condition=2.0)
    lr = 0.05 / problem.smoothness  # the step W's eigenvalue -2/3 allows
    method = GradientTracking(lr, StaticSequence(graph), rule="fdla")
    with pytest.raises(ValueError, match=r"rule='fdla' is not doubly stochastic.*negative"):
        sm.run(method, problem, Full(5), 5, progress=False)
    unchecked = GradientTracking(lr, StaticSequence(graph), rule="fdla", check_mixing=False)
    assert sm.run(unchecked, problem, Full(5), 300, progress=False).relative_error[-1] < 1e-4


CONFIG = """
[problem]
kind = "quadratic"
n_clients = 8
dim = 3

[graphs]
kind = "{graph}"
rule = "{rule}"

[[methods]]
kind = "gradient_tracking"
lr = 0.05
"""


def test_configurations_take_the_rules():
    exp = parse(tomllib.loads(CONFIG.format(graph="cycle", rule="fastest")))
    assert exp.methods[0].options["rule"] == "fastest"
    assert exp.resolved()["graphs"]["rule"] == "fastest"
    result = sm.run(exp.methods[0].build(0.05), exp.problem, exp.participation, 5, progress=False)
    assert np.isfinite(result.server).all()
    # on a cycle the optimal weights are nonnegative: fdla is doubly stochastic there
    exp = parse(tomllib.loads(CONFIG.format(graph="cycle", rule="fdla")))
    assert exp.methods[0].options["rule"] == "fdla"
    with pytest.raises(ConfigError, match=r"graphs.rule must be one of \[.*'fastest', 'fdla'\]"):
        parse(tomllib.loads(CONFIG.format(graph="cycle", rule="fastets")))
    with pytest.raises(ConfigError, match="graphs.rule = 'fastest' does not apply.*undirected"):
        parse(tomllib.loads(CONFIG.format(graph="directed_ring", rule="fastest")))


def spectrum_slems(capsys, *argv: str) -> dict[str, float]:
    """``stochmix spectrum ARGV``'s SLEM column, by row label."""
    assert main(["spectrum", *argv]) == 0
    out = capsys.readouterr().out
    slems = {}
    for line in out.splitlines()[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 8 and not cells[0].startswith(("matrix", "-")):
            slems[cells[0]] = float(cells[4])
    return slems


def test_spectrum_command_takes_the_rules(capsys):
    slems = spectrum_slems(
        capsys, "--graph", "cycle", "--nodes", "9", "--rules", "metropolis", "fastest", "fdla"
    )
    _, best = cycle_optimum(9, nonnegative=True)
    assert slems["k=0 (fastest)"] == pytest.approx(best, abs=1e-5)
    assert slems["k=0 (fdla)"] == pytest.approx(best, abs=1e-5)
    assert slems["k=0 (fastest)"] < slems["k=0 (metropolis)"] - 0.05
