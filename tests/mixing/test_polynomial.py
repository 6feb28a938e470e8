"""Polynomial mixing p(W) (stochmix.mixing.polynomial): the matrices against dense NumPy
polynomials written from their definitions, their eigenvalues against numpy's eigvalsh,
the messages a run counts (K rounds of W's), a user's DGD mixing with ``chebyshev(W, K) @
x`` reaching consensus in fewer iterations than with W, and ``stochmix spectrum``'s
polynomial table."""

from __future__ import annotations

import re

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import stochmix as sm
from stochmix.algorithms import DecentralizedMethod
from stochmix.cli import main
from stochmix.engine import grad
from stochmix.mixing import (
    PolynomialMixing,
    RowSparse,
    StaticSequence,
    chebyshev,
    fastmix,
    polynomial_summary,
    polynomial_table,
    power,
)
from stochmix.participation import Bernoulli, Full
from stochmix.problems import LeastSquares

N = 12


def metropolis_dense(graph: nx.Graph) -> np.ndarray:
    """Metropolis-Hastings weights written out from their definition:
    W_ij = 1 / (1 + max(d_i, d_j)) on edges, W_ii = 1 - sum of the row."""
    n = graph.number_of_nodes()
    W = np.zeros((n, n))
    for i, j in graph.edges():
        W[i, j] = W[j, i] = 1.0 / (1 + max(graph.degree[i], graph.degree[j]))
    W[np.arange(n), np.arange(n)] = 1 - W.sum(axis=1)
    return W


def graphs() -> dict[str, np.ndarray]:
    er = nx.erdos_renyi_graph(N, 0.3, seed=3)
    assert nx.is_connected(er)
    return {"cycle": metropolis_dense(nx.cycle_graph(N)), "erdos_renyi": metropolis_dense(er)}


def chebyshev_dense(W: np.ndarray, K: int, lower: float, upper: float) -> np.ndarray:
    """T_K(t(W)) / T_K(t(1)) from T_K's monomial coefficients (numpy.polynomial) by Horner,
    T_K(t0) = cosh(K arccosh t0) for t0 > 1."""
    n = W.shape[0]
    t = (2 * W - (upper + lower) * np.eye(n)) / (upper - lower)
    t0 = (2 - upper - lower) / (upper - lower)
    coefs = np.polynomial.chebyshev.cheb2poly([0] * K + [1])
    out = np.zeros_like(W)
    for c in coefs[::-1]:
        out = out @ t + c * np.eye(n)
    return out / np.cosh(K * np.arccosh(t0))


def fastmix_dense(W: np.ndarray, K: int, eta: float) -> np.ndarray:
    """The paper's iteration x^{k+1} = (1 + eta) W x^k - eta x^{k-1}, x^{-1} = x^0 = I."""
    before = now = np.eye(W.shape[0])
    for _ in range(K):
        before, now = now, (1 + eta) * W @ now - eta * before
    return now


# ------------------------------------------------------------------------- the matrices


@pytest.mark.parametrize("name", ["cycle", "erdos_renyi"])
@pytest.mark.parametrize("K", [1, 2, 5])
def test_matrices_equal_dense_numpy_polynomials(name, K):
    W = graphs()[name]
    lam = np.linalg.eigvalsh(W)
    lower, upper = lam[0], lam[-2]
    lam2 = max(lam[-2], -lam[0])
    eta = (1 - np.sqrt(1 - lam2**2)) / (1 + np.sqrt(1 - lam2**2))
    expected = {
        "power": np.linalg.matrix_power(W, K),
        "chebyshev": chebyshev_dense(W, K, lower, upper),
        "fastmix": fastmix_dense(W, K, eta),
    }
    made = {
        "power": power(sp.csr_array(W), K),
        "chebyshev": chebyshev(W, K),
        "fastmix": fastmix(RowSparse.whole(sp.csr_array(W)), K),
    }
    for kind, op in made.items():
        assert isinstance(op, PolynomialMixing) and op.kind == kind and op.hops == K
        np.testing.assert_allclose(op.toarray(), expected[kind], rtol=0, atol=1e-12)
        P = op.toarray()  # p(1) = 1: rows and columns still sum to one
        np.testing.assert_allclose(P.sum(axis=0), 1, rtol=0, atol=1e-12)
        np.testing.assert_allclose(P.sum(axis=1), 1, rtol=0, atol=1e-12)
    assert made["chebyshev"].parameters == pytest.approx({"lower": lower, "upper": upper})
    assert made["fastmix"].parameters["eta"] == pytest.approx(eta, rel=1e-12)


def test_given_bounds_and_eta_are_used_and_a_non_symmetric_w_needs_them():
    W = graphs()["cycle"]
    op = chebyshev(W, 4, lower=-0.5, upper=0.95)
    np.testing.assert_allclose(op.toarray(), chebyshev_dense(W, 4, -0.5, 0.95), atol=1e-12)
    np.testing.assert_allclose(fastmix(W, 3, eta=0.3).toarray(), fastmix_dense(W, 3, 0.3))
    ring = 0.5 * (np.eye(6) + np.roll(np.eye(6), 1, axis=1))  # directed: not symmetric
    with pytest.raises(ValueError, match="W must be symmetric"):
        chebyshev(ring, 3)
    with pytest.raises(ValueError, match="W must be symmetric"):
        fastmix(ring, 3)
    np.testing.assert_allclose(power(ring, 3).toarray(), np.linalg.matrix_power(ring, 3))
    high = chebyshev(ring, 3, lower=-1.0, upper=0.5)  # the user vouches for the bounds
    np.testing.assert_allclose(high.toarray(), chebyshev_dense(ring, 3, -1.0, 0.5), atol=1e-12)


def test_equal_bounds_take_the_limit_and_large_degrees_do_not_overflow():
    n = 7
    complete = np.full((n, n), 1.0 / n)  # every eigenvalue but 1 is 0: l = u = 0
    op = chebyshev(complete, 3)
    np.testing.assert_allclose(op.toarray(), complete, atol=1e-12)  # ((W - 0) / 1)^3 = W
    W = graphs()["cycle"]
    lam = np.linalg.eigvalsh(W)
    big = chebyshev(W, 400)  # T_400(t0) ~ 1e+160: only ratios are formed
    assert np.isfinite(big.toarray()).all()
    np.testing.assert_allclose(big.eigenvalues(lam)[-1], 1.0, atol=1e-12)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda W: power(W, 0), ValueError, "K must be >= 1, got 0"),
        (lambda W: fastmix(W, -1), ValueError, "K must be >= 1, got -1"),
        (lambda W: power(W[:3], 2), ValueError, "W must be a square matrix"),
        (lambda W: chebyshev(W, 2, upper=1.0), ValueError, "upper must be < 1"),
        (lambda W: chebyshev(W, 2, lower=0.5, upper=0.2), ValueError, "lower must be <= upper"),
        (lambda W: fastmix(W, 2, eta=1.0), ValueError, r"eta must lie in \[0, 1\), got 1.0"),
        (lambda W: fastmix(2 * W, 2), ValueError, "W's rows must sum to one"),
        (lambda W: chebyshev(W, 2, lower=np.nan), ValueError, "lower must be finite"),
    ],
)
def test_bad_arguments_are_refused_naming_them(call, error, message):
    with pytest.raises(error, match=message):
        call(graphs()["cycle"])


def test_a_polynomial_is_built_from_its_w_only():
    with pytest.raises(TypeError, match="built from its W"):
        PolynomialMixing.whole(sp.csr_array(np.eye(3)))
    with pytest.raises(TypeError, match="W must be"):
        power("W", 2)
    with pytest.raises(ValueError, match=r"beta must have shape \(2,\)"):
        PolynomialMixing(np.eye(3), [1.0, 1.0], [0.0], [0.0, 0.0])


def test_a_disconnected_graph_or_an_eigenvalue_above_one_is_refused():
    W = np.kron(np.eye(2), np.full((3, 3), 1 / 3))  # two components: lambda_2 = 1
    with pytest.raises(ValueError, match="not connected"):
        chebyshev(W, 3)
    with pytest.raises(ValueError, match="not connected"):
        fastmix(W, 3)
    signed = np.array([[1.5, -0.5], [-0.5, 1.5]])  # rows sum to one, eigenvalues 1 and 2
    with pytest.raises(ValueError, match="W has an eigenvalue 2 above 1"):
        chebyshev(signed, 2)
    with pytest.raises(ValueError, match=r"got row 0 summing to 2\.0"):
        fastmix(2 * graphs()["cycle"], 2)


# ------------------------------------------------------------------------ the spectrum


@pytest.mark.parametrize("name", ["cycle", "erdos_renyi"])
def test_eigenvalues_are_p_of_ws_eigenvalues(name):
    W = graphs()[name]
    lam = np.linalg.eigvalsh(W)
    for op in (power(W, 3), chebyshev(W, 4), fastmix(W, 5)):
        mine = np.sort(op.eigenvalues(lam))
        np.testing.assert_allclose(mine, np.linalg.eigvalsh(op.toarray()), rtol=0, atol=1e-12)
    ring = 0.5 * (np.eye(6) + np.roll(np.eye(6), 1, axis=1))  # complex eigenvalues
    mu = power(ring, 3).eigenvalues(np.linalg.eigvals(ring))
    np.testing.assert_allclose(np.sort_complex(mu), np.sort_complex(np.linalg.eigvals(ring) ** 3))


def test_fastmix_contracts_by_sqrt_eta_per_round_asymptotically():
    W = graphs()["erdos_renyi"]
    lam = np.linalg.eigvalsh(W)
    slem = max(lam[-2], -lam[0])
    eta = fastmix(W, 1).parameters["eta"]
    assert np.sqrt(eta) == pytest.approx((1 - np.sqrt(1 - slem**2)) / slem, rel=1e-12)
    moduli = [polynomial_summary(fastmix(W, K))["slem"] for K in (300, 301)]
    assert moduli[1] / moduli[0] == pytest.approx(np.sqrt(eta), rel=1e-2)
    assert np.sqrt(eta) < slem  # faster than W per round


def test_summary_against_numpy_and_chebyshevs_extremal_value():
    W = graphs()["cycle"]
    n = W.shape[0]
    lam = np.linalg.eigvalsh(W)
    K = 4
    for op in (power(W, K), chebyshev(W, K), fastmix(W, K), W):
        P = op.toarray() if isinstance(op, PolynomialMixing) else W
        summary = polynomial_summary(op)
        rest = np.sort(np.linalg.eigvalsh(P))[:-1]  # p(1) = 1 is the largest here
        slem = np.linalg.norm(P - np.ones((n, n)) / n, 2)  # ||p(W) - 11'/n||_2
        assert summary["lambda_2"] == pytest.approx(rest[-1], abs=1e-12)
        assert summary["lambda_min"] == pytest.approx(rest[0], abs=1e-12)
        assert summary["slem"] == pytest.approx(slem, abs=1e-12)
        assert summary["spectral_gap"] == pytest.approx(1 - slem, abs=1e-12)
        rounds = summary["rounds"]
        assert rounds == (1 if op is W else K)
        assert summary["gap_per_round"] == pytest.approx(1 - slem ** (1 / rounds), abs=1e-12)
    gap = 1 - max(lam[-2], -lam[0])
    assert polynomial_summary(power(W, K))["gap_per_round"] == pytest.approx(gap, abs=1e-12)
    t0 = (2 - lam[-2] - lam[0]) / (lam[-2] - lam[0])  # the bounds are eigenvalues:
    expected = 1 / np.cosh(K * np.arccosh(t0))  # max |p| on [l, u] = 1 / T_K(t0)
    assert polynomial_summary(chebyshev(W, K))["slem"] == pytest.approx(expected, abs=1e-12)
    table = polynomial_table({"W": W, "cheb": chebyshev(W, K)})
    assert "gap/round" in table and f"{expected:.6g}" in table


# ----------------------------------------------------------------- a user's method, traffic


class PolyDGD(DecentralizedMethod):
    """DGD (adapt then combine) mixing with W, with a polynomial of W, or with W in
    ``repeat`` phases: x <- x - lr grad F(x), then x <- p(W) x."""

    name = "poly DGD"
    needs = {"rule": "doubly"}
    rule = "metropolis"

    def __init__(self, lr, graphs, kind=None, K=1, repeat=1):
        super().__init__(lr, graphs)
        self.kind, self.K, self.repeat = kind, K, repeat

    def blocks(self, n):
        return [sm.Block("x", n, "model")]

    def round_phases(self, k, participants, ctx):
        eq = self.round_equations(participants, ctx)
        (x,) = eq.blocks("x")
        x[:] -= self.lr * grad()
        phases = [eq.build("local step")]
        w = self.mixing(k, self.rule)
        if self.kind is not None:
            builder = {"power": power, "chebyshev": chebyshev, "fastmix": fastmix}[self.kind]
            w = self.operators(k, self.kind, lambda: builder(w, self.K))
        for _ in range(self.repeat):
            x[:] = w @ x
            phases.append(eq.build("combine"))
        return phases


def run_on(graph, method, rounds=3):
    problem = LeastSquares.random(graph.number_of_nodes(), 3, 6, seed=1)
    return sm.run(method, problem, Full(graph.number_of_nodes()), rounds)


@pytest.mark.parametrize("kind", ["power", "chebyshev", "fastmix"])
@pytest.mark.parametrize("name", ["cycle", "erdos_renyi"])
def test_messages_count_k_rounds_of_ws_edges(kind, name):
    K, lr = 4, 0.05
    graph = nx.cycle_graph(N) if name == "cycle" else nx.erdos_renyi_graph(N, 0.3, seed=3)
    sequence = StaticSequence(graph)
    plain = run_on(graph, PolyDGD(lr, sequence))
    poly = run_on(graph, PolyDGD(lr, sequence, kind, K))
    edges = 2 * graph.number_of_edges()  # directed: each node sends to each neighbour
    np.testing.assert_array_equal(plain.messages[1:], edges)
    np.testing.assert_array_equal(poly.messages[1:], K * edges)
    np.testing.assert_array_equal(poly.messages, K * plain.messages)
    np.testing.assert_array_equal(poly.floats, K * plain.floats)
    np.testing.assert_array_equal(poly.floats[1:], K * edges * 3)  # d = 3 floats a row
    np.testing.assert_array_equal(poly.gradients, plain.gradients)
    repeated = run_on(graph, PolyDGD(lr, sequence, repeat=K))  # W applied in K phases
    np.testing.assert_array_equal(poly.messages, repeated.messages)
    np.testing.assert_array_equal(poly.floats, repeated.floats)
    if kind == "power":  # the same iterates: W^K in one phase, W in K phases
        np.testing.assert_allclose(poly.server, repeated.server, rtol=0, atol=1e-12)
    if name == "erdos_renyi":  # p(W)'s own nonzeros would say otherwise: the count is K x W's
        P = power(metropolis_dense(graph), K).toarray()
        assert np.count_nonzero(P - np.diag(np.diag(P))) != K * edges


class RowPolyDGD(PolyDGD):
    needs = {"rule": "row"}  # node activation keeps D W + I - D row-stochastic


def test_polynomial_mixing_is_refused_under_activation():
    ring = StaticSequence(nx.cycle_graph(N))
    problem = LeastSquares.random(N, 3, 6, seed=1)
    sm.run(RowPolyDGD(0.05, ring), problem, Bernoulli(np.full(N, 0.5)), 3)  # W: fine
    with pytest.raises(ValueError, match="cannot mix under node or edge activation"):
        sm.run(RowPolyDGD(0.05, ring, "chebyshev", 3), problem, Bernoulli(np.full(N, 0.5)), 3)


def test_dgd_with_chebyshev_mixing_reaches_consensus_in_fewer_iterations(unchecked):
    n, K = 20, 4
    ring = StaticSequence(nx.cycle_graph(n))
    problem = LeastSquares.random(n, 3, 6, seed=1)
    lr = 1e-5 / problem.smoothness  # small: the consensus floor O(lr^2) is far below 1e-6
    x0 = np.random.default_rng(0).standard_normal((n, 3))  # the nodes start apart
    runs = {
        kind: sm.run(
            PolyDGD(lr, ring, kind, K), problem, Full(n), 250, x0=x0, metrics=("consensus",)
        )
        for kind in (None, "chebyshev")
    }
    start = runs[None].consensus[0]
    reached = {}
    for kind, result in runs.items():
        below = np.flatnonzero(result.consensus <= 1e-6 * start)
        assert below.size, kind
        reached[kind] = int(below[0])
    assert reached == {None: 180, "chebyshev": 10}  # the guide's figures (analysis.md)
    # and fewer messages too (K per iteration): the gap per round is larger
    sent = {kind: int(runs[kind].messages[: reached[kind] + 1].sum()) for kind in runs}
    assert sent == {None: 180 * 40, "chebyshev": 10 * 4 * 40}  # the ring's 40 per round


# ---------------------------------------------------------------------------- the command


def test_spectrum_command_prints_the_polynomials(capsys):
    code = main(
        ["spectrum", "--graph", "cycle", "--nodes", "20", "--rules", "metropolis",
         "--chebyshev", "4", "--power", "4", "--fastmix", "4"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    rows = {}
    for line in out.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 7 and cells[1] in ("1", "4"):
            rows[cells[0]] = cells[1:]
    W = metropolis_dense(nx.cycle_graph(20))
    shown = {}
    for label, op in (
        ("W (metropolis)", W),
        ("W^4 (metropolis)", power(W, 4)),
        ("chebyshev K=4 (metropolis)", chebyshev(W, 4)),
        ("fastmix K=4 (metropolis)", fastmix(W, 4)),
    ):
        P = op.toarray() if isinstance(op, PolynomialMixing) else op
        rest = np.sort(np.linalg.eigvalsh(P))[:-1]
        lambda_2, slem = rest[-1], max(rest[-1], -rest[0])
        assert float(rows[label][1]) == pytest.approx(lambda_2, rel=1e-5)
        assert float(rows[label][3]) == pytest.approx(slem, rel=1e-5)
        assert float(rows[label][4]) == pytest.approx(1 - slem, rel=1e-5)
        # the figures the guide shows (analysis.md), here from numpy's eigenvalues
        rounds = 1 if label.startswith("W (") else 4
        shown[label] = (round(slem, 3), float(f"{1 - slem ** (1 / rounds):.3g}"))
    assert shown == {
        "W (metropolis)": (0.967, 0.0326),
        "W^4 (metropolis)": (0.876, 0.0326),
        "chebyshev K=4 (metropolis)": (0.524, 0.149),
        "fastmix K=4 (metropolis)": (0.679, 0.0923),
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--graph", "directed_ring", "--chebyshev", "3"], "--chebyshev 3 --rules row: W must"),
        (["--graph", "cycle", "--fastmix", "0"], "--fastmix must be a positive integer, got 0"),
        (["--chebyshev", "3"], "--chebyshev applies with --graph or a configuration only"),
        (["--graph", "one_peer_exponential", "--power", "2"], "--power applies to a static"),
    ],
)
def test_spectrum_command_refuses_bad_polynomial_options(capsys, argv, message):
    assert main(["spectrum", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
