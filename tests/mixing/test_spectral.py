"""Tests of stochmix.mixing.spectral: eigen quantities against dense NumPy, closed forms
(complete graph, rings, the one-peer exponential graph), the sparse branch against the
dense one, Dobrushin's coefficient, products, expectations against Monte Carlo, summaries
and bad input."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from stochmix.mixing import (
    DirectedRingSequence,
    OnePeerExponential,
    RandomSequence,
    StaticSequence,
    assign,
    average,
    collect,
    consensus_contraction,
    eigenvalues,
    ergodicity_coefficient,
    expected_assign,
    expected_average,
    expected_collect,
    expected_local_diagonal,
    expected_matrix,
    local_diagonal,
    metropolis_hastings,
    mixing_summary,
    perron_vector,
    product,
    second_largest_modulus,
    sequence_product,
    spectral,
    spectral_gap,
    spectral_radius,
    stationary_distributions,
    summary_table,
)
from stochmix.participation import Bernoulli, UniformSample
from tests import examples

FAST = settings(max_examples=examples(40), deadline=None)


def random_row_stochastic(rng, n, density=1.0, lazy=True):
    """Random row-stochastic matrix; with ``lazy`` a positive diagonal (aperiodic)."""
    W = rng.random((n, n)) * (rng.random((n, n)) < density)
    if lazy:
        W += np.eye(n) * rng.random(n)
    W[W.sum(axis=1) == 0, 0] = 1.0
    return W / W.sum(axis=1, keepdims=True)


def numpy_moduli(W):
    """All |lambda| of a dense matrix, descending (plain NumPy)."""
    return np.sort(np.abs(np.linalg.eigvals(np.asarray(W))))[::-1]


def random_metropolis(n, seed):
    return metropolis_hastings(nx.gnp_random_graph(n, 0.3, seed=seed), n)


def circulant(n, weights):
    """Row-stochastic circulant ``W[i, (i + s) mod n] = weights[s]`` and its spectrum
    ``lambda_k = sum_s weights[s] omega^(s k)``, from the FFT."""
    shifts = np.flatnonzero(weights)
    rows = np.repeat(np.arange(n), shifts.size)
    cols = (rows + np.tile(shifts, n)) % n
    W = sp.csr_array((np.tile(weights[shifts], n), (rows, cols)), shape=(n, n))
    return W, np.fft.fft(weights).conj()


# ---------------------------------------------------------------- eigen quantities


@pytest.mark.parametrize("seed", range(4))
def test_eigen_quantities_match_numpy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 25))
    for W in (
        random_row_stochastic(rng, n, density=0.4),
        random_row_stochastic(rng, n).T,  # column-stochastic
        rng.standard_normal((n, n)),  # general, signed
        random_metropolis(n, seed).toarray(),
    ):
        moduli = numpy_moduli(W)
        values = eigenvalues(W)
        assert values.shape == (n,) and values.dtype == complex
        np.testing.assert_allclose(np.abs(values), moduli, atol=1e-10)
        assert np.all(np.diff(np.abs(values)) <= 1e-12)  # sorted by modulus
        np.testing.assert_allclose(np.abs(eigenvalues(W, 2)), moduli[:2], atol=1e-10)
        assert spectral_radius(W) == pytest.approx(moduli[0], abs=1e-10)
        assert second_largest_modulus(W) == pytest.approx(moduli[1], abs=1e-10)
        assert spectral_gap(W) == pytest.approx(1 - moduli[1], abs=1e-10)


def test_stochastic_eigenvalue_one_comes_first():
    W = DirectedRingSequence(4, shifts=(2,)).matrix(0, "natural")  # (I + P)/2, P^2 = I
    swap = np.array([[0.0, 1.0], [1.0, 0.0]])  # eigenvalues -1 and 1
    np.testing.assert_allclose(eigenvalues(swap), [1.0, -1.0], atol=1e-15)
    assert second_largest_modulus(swap) == pytest.approx(1.0)  # periodic: no gap
    assert spectral_gap(W) == pytest.approx(0.0, abs=1e-12)  # reducible: two cycles


def _block_diagonal(*blocks):
    out = np.zeros((sum(b.shape[0] for b in blocks),) * 2)
    start = 0
    for b in blocks:
        out[start : start + b.shape[0], start : start + b.shape[0]] = b
        start += b.shape[0]
    return out


@pytest.mark.parametrize("sizes", [(2, 2), (3, 4), (10, 7), (300, 400)])
def test_gap_of_a_disconnected_stochastic_matrix_is_exactly_zero(sizes):
    # Issue 15: two closed classes give the eigenvalue 1 twice; LAPACK rounded the second
    # to 1 - 2e-16 (gap 2.2e-16) and ARPACK's deflation to a gap of 1.6e-15.
    rng = np.random.default_rng(sum(sizes))
    W = _block_diagonal(*(random_row_stochastic(rng, n) for n in sizes))
    for A in (W, W.T, sp.csr_array(W)):  # row-, column-stochastic, sparse
        for method in ("dense", "sparse"):
            assert second_largest_modulus(A, method=method) == 1.0
            assert spectral_gap(A, method=method) == 0.0
    G = nx.disjoint_union(nx.cycle_graph(sizes[0] + 3), nx.path_graph(sizes[1] + 1))
    M = random_metropolis_of(G)  # symmetric, doubly stochastic
    assert spectral_gap(M) == 0.0 and spectral_gap(M, method="sparse") == 0.0
    assert mixing_summary(W)["spectral_gap"] == 0.0


def test_gap_of_a_periodic_chain_is_exactly_zero_and_transient_nodes_keep_a_gap():
    cycle = np.roll(np.eye(5), 1, axis=1)  # period 5
    assert spectral_gap(cycle) == 0.0
    bipartite = np.array([[0, 0.5, 0.5], [1, 0, 0], [1, 0, 0]])  # period 2
    assert spectral_gap(bipartite) == 0.0
    # One closed class (node 0) and transient nodes: eigenvalue 1 is simple, gap 1 - 0.5.
    transient = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
    assert spectral_gap(transient) == pytest.approx(0.5, abs=1e-14)
    # Aperiodic with a self-loop: positive gap, as the eigenvalues say.
    lazy = 0.5 * (np.eye(5) + cycle)
    assert spectral_gap(lazy) == pytest.approx(1 - np.sort(numpy_moduli(lazy))[-2], abs=1e-12)
    assert spectral_gap(lazy) > 0


def random_metropolis_of(graph):
    n = graph.number_of_nodes()
    W = np.zeros((n, n))
    for i, j in graph.edges():
        W[i, j] = W[j, i] = 1.0 / (1 + max(graph.degree(i), graph.degree(j)))
    W[np.arange(n), np.arange(n)] = 1.0 - W.sum(axis=1)
    return W


def test_slem_of_signed_rows_sum_one_removes_the_eigenvalue_one():
    mask = np.ones(3, dtype=bool)
    # server lr 3: row 0 = (-2, 1, 1, 1); eigenvalue -2 dominates, 1 is the consensus one
    W = average(mask, np.full(3, 1 / 3), server_lr=3.0).toarray()
    values = np.linalg.eigvals(W)
    assert second_largest_modulus(W) == pytest.approx(2.0)
    assert second_largest_modulus(W, method="sparse") == pytest.approx(2.0)
    assert spectral_radius(W) == pytest.approx(np.abs(values).max())


def test_one_by_one():
    assert second_largest_modulus(np.ones((1, 1))) == 0.0
    np.testing.assert_array_equal(perron_vector(np.ones((1, 1))), [1.0])
    assert ergodicity_coefficient(np.ones((1, 1))) == 0.0


# ---------------------------------------------------------------------- Perron vectors


@pytest.mark.parametrize("seed", range(5))
def test_perron_vectors(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30))
    W = random_row_stochastic(rng, n, density=0.3)
    pi = perron_vector(W)
    assert pi.shape == (n,) and np.all(pi >= 0) and pi.sum() == pytest.approx(1.0, abs=1e-14)
    assert np.abs(pi @ W - pi).max() < 1e-12
    np.testing.assert_allclose(perron_vector(sp.csr_array(W)), pi, atol=1e-13)
    np.testing.assert_allclose(perron_vector(W, method="sparse"), pi, atol=1e-12)
    # same as NumPy's eigenvector of W^T for the eigenvalue closest to 1
    values, vectors = np.linalg.eig(W.T)
    reference = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    np.testing.assert_allclose(pi, reference / reference.sum(), atol=1e-10)
    # right Perron vector of a column-stochastic matrix
    C = W.T
    v = perron_vector(C, side="right")
    assert np.abs(C @ v - v).max() < 1e-12 and np.all(v >= 0)
    # the other sides: W 1 = 1 and 1^T C = 1^T (through the null space)
    np.testing.assert_allclose(perron_vector(W, side="right"), np.full(n, 1 / n), atol=1e-12)
    np.testing.assert_allclose(perron_vector(C, side="left"), np.full(n, 1 / n), atol=1e-12)


def test_perron_vector_reducible_with_transient_nodes():
    # 0 <-> 1 closed, 2 and 3 transient (feed into the class)
    W = np.array(
        [[0.5, 0.5, 0, 0], [0.25, 0.75, 0, 0], [0.2, 0.3, 0.5, 0], [0, 0, 0.5, 0.5]],
    )
    pi = perron_vector(W)
    np.testing.assert_allclose(pi, [1 / 3, 2 / 3, 0, 0], atol=1e-14)
    assert np.abs(pi @ W - pi).max() < 1e-15


def test_perron_vector_signed_rows_sum_one():
    rng = np.random.default_rng(7)
    W = rng.standard_normal((6, 6))
    W -= (W.sum(axis=1, keepdims=True) - 1) / 6  # rows sum to one, signed
    pi = perron_vector(W)
    assert np.abs(pi @ W - pi).max() < 1e-12 and pi.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(perron_vector(W, method="sparse"), pi, atol=1e-10)


def test_perron_vector_not_unique_or_absent():
    with pytest.raises(ValueError, match="not simple.*2 closed classes"):
        perron_vector(np.eye(2))
    with pytest.raises(ValueError, match="not an eigenvalue"):
        perron_vector(np.diag([0.5, 2.0]))
    with pytest.raises(ValueError, match="not simple"):
        perron_vector(np.diag([1.0, 1.0, 2.0]))


# ----------------------------------------------------------------- closed-form SLEMs


@pytest.mark.parametrize("n", [2, 5, 8])
def test_slem_complete_graph_averaging_is_zero(n):
    W = metropolis_hastings(nx.complete_graph(n))
    np.testing.assert_allclose(W.toarray(), np.full((n, n), 1 / n), atol=1e-15)
    assert second_largest_modulus(W) == pytest.approx(0.0, abs=1e-12)
    assert spectral_gap(W) == pytest.approx(1.0, abs=1e-12)
    assert ergodicity_coefficient(W) == pytest.approx(0.0, abs=1e-15)
    assert consensus_contraction(W) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("n", [4, 5, 12, 31])
def test_slem_rings(n):
    # Metropolis on the undirected ring: every degree 2, W = (I + P + P^T) / 3, eigenvalues
    # (1 + 2 cos(2 pi k / n)) / 3; the largest nontrivial modulus is k = 1 for n >= 4 (at
    # n = 4 it ties with |lambda_{n/2}| = 1/3).
    W = metropolis_hastings(nx.cycle_graph(n))
    assert second_largest_modulus(W) == pytest.approx((1 + 2 * np.cos(2 * np.pi / n)) / 3)
    # symmetric doubly stochastic: ||W - 11^T/n||_2 = SLEM
    assert consensus_contraction(W) == pytest.approx(second_largest_modulus(W))
    # lazy directed ring (I + P) / 2: |(1 + omega^k) / 2| = |cos(pi k / n)|, SLEM cos(pi/n)
    D = DirectedRingSequence(n).matrix(0, "natural")
    assert second_largest_modulus(D) == pytest.approx(np.cos(np.pi / n))
    np.testing.assert_allclose(perron_vector(D), np.full(n, 1 / n), atol=1e-14)
    # lazy undirected ring I/2 + (P + P^T)/4: (1 + cos(2 pi k / n)) / 2, SLEM cos^2(pi/n)
    lazy = 0.5 * sp.eye_array(n) + 0.5 * sp.csr_array(W * 3 - sp.eye_array(n)) / 2
    assert second_largest_modulus(lazy) == pytest.approx(np.cos(np.pi / n) ** 2)


@pytest.mark.parametrize("n", [2, 8, 16, 64])
def test_one_peer_exponential_product_is_exact_averaging(n):
    seq = OnePeerExponential(n)
    for start in (0, 1):  # circulants commute: any tau consecutive steps
        P = sequence_product(seq, start, seq.tau, rule="natural")
        assert isinstance(P, sp.csr_array)
        np.testing.assert_allclose(P.toarray(), np.full((n, n), 1 / n), atol=1e-15)
        assert second_largest_modulus(P) == pytest.approx(0.0, abs=1e-12)
        assert ergodicity_coefficient(P) == pytest.approx(0.0, abs=1e-14)
    if seq.tau > 1:  # one step alone: (I + P_k)/2 with P_k of order 2^(tau - m)
        assert second_largest_modulus(seq.matrix(1, "natural")) == pytest.approx(1.0)
        shorter = sequence_product(seq, 0, seq.tau - 1, rule="natural")  # window mean
        assert 1e-3 < second_largest_modulus(shorter) < 1 - 1e-3


# ----------------------------------------------------------------- sparse vs dense


def test_sparse_branch_equals_dense_branch_symmetric():
    W = RandomSequence(1000, seed=3).matrix(0, "metropolis")  # n = 1000: eigsh, svds
    spectrum = eigenvalues(W, method="dense")  # eigvalsh of the dense copy
    np.testing.assert_allclose(spectrum[0], 1.0)
    top, slem = spectrum[:5], float(np.abs(spectrum[1]))
    assert second_largest_modulus(W) == pytest.approx(slem, abs=1e-10)  # auto: sparse
    assert second_largest_modulus(W, method="sparse") == pytest.approx(slem, abs=1e-10)
    np.testing.assert_allclose(np.abs(eigenvalues(W, 5, method="sparse")), np.abs(top), atol=1e-10)
    # symmetric doubly stochastic: ||W - 11^T/n||_2 = SLEM (svds on the deflated operator)
    assert consensus_contraction(W, method="sparse") == pytest.approx(slem, abs=1e-10)
    pi = perron_vector(W, method="sparse")
    np.testing.assert_allclose(pi, np.full(1000, 1e-3), atol=1e-14)


def test_sparse_branch_nonsymmetric_circulant_known_spectrum():
    n = 1000
    rng = np.random.default_rng(11)
    weights = np.zeros(n)
    weights[rng.choice(np.arange(1, n), 12, replace=False)] = rng.random(12)
    weights[0] = 1.0
    weights /= weights.sum()
    W, spectrum = circulant(n, weights)
    moduli = np.sort(np.abs(spectrum))[::-1]
    assert second_largest_modulus(W) == pytest.approx(moduli[1], abs=1e-10)
    assert spectral_radius(W * 0.5) == pytest.approx(0.5, abs=1e-10)  # ARPACK, not shortcut
    np.testing.assert_allclose(np.abs(eigenvalues(W, 4)), moduli[:4], atol=1e-10)
    np.testing.assert_allclose(perron_vector(W), np.full(n, 1 / n), atol=1e-14)
    np.testing.assert_allclose(perron_vector(W, "right"), np.full(n, 1 / n), atol=1e-14)
    # doubly stochastic and normal: ||W - 11^T/n||_2 = SLEM
    assert consensus_contraction(W) == pytest.approx(moduli[1], abs=1e-10)


def test_sparse_branch_equals_dense_branch_directed():
    # nonsymmetric, sparse branch forced at n = 200 (a dense nonsymmetric eigen-solve at
    # n = 1000 is too slow for the suite; the circulant above covers n = 1000)
    W = RandomSequence(200, kind="random_directed", seed=5).matrix(0, "row")
    np.testing.assert_allclose(
        np.abs(eigenvalues(W, 4, method="sparse")),
        np.abs(eigenvalues(W, 4, method="dense")),
        atol=1e-10,
    )
    pi_dense = perron_vector(W, method="dense")
    pi_sparse = perron_vector(W, method="sparse")  # splu on the closed class
    np.testing.assert_allclose(pi_sparse, pi_dense, atol=1e-14)
    assert np.abs(pi_sparse @ W - pi_sparse).max() < 1e-12
    assert second_largest_modulus(W, method="sparse") == pytest.approx(
        second_largest_modulus(W, method="dense"), abs=1e-10
    )
    assert consensus_contraction(W, method="sparse") == pytest.approx(
        consensus_contraction(W, method="dense"), abs=1e-10
    )
    # the column-stochastic twin: the bordered sparse LU for the left vector (= 1/n)
    C = RandomSequence(200, kind="random_directed", seed=5).matrix(0, "column")
    np.testing.assert_allclose(perron_vector(C, method="sparse"), np.full(200, 1 / 200), atol=1e-13)
    v = perron_vector(C, side="right", method="sparse")
    assert np.abs(C @ v - v).max() < 1e-12


def test_arpack_failure_falls_back_to_dense(monkeypatch):
    # a lazy directed ring's moduli cos(pi k / n) cluster at 1, where ARPACK gives up
    # (at n = 1000 within its 300 restarts); one restart forces that here, cheaply
    monkeypatch.setattr(spectral, "_ARPACK_MAXITER", 1)
    n = 120
    W = DirectedRingSequence(n).matrix(0, "natural")
    slem = second_largest_modulus(W, method="sparse")
    assert slem == pytest.approx(np.cos(np.pi / n), abs=1e-10)
    assert consensus_contraction(W, method="sparse") == pytest.approx(slem, abs=1e-10)
    monkeypatch.setattr(spectral, "DENSE_FALLBACK", 100)
    with pytest.raises(RuntimeError, match="ARPACK did not converge"):
        second_largest_modulus(W, method="sparse")


# -------------------------------------------------------------------- ergodicity


def brute_force_delta(W):
    W = np.asarray(W)
    n = W.shape[0]
    return max(0.5 * np.abs(W[i] - W[j]).sum() for i in range(n) for j in range(n))


def test_ergodicity_coefficient_extremes():
    for n in (2, 7, 40):
        assert ergodicity_coefficient(np.full((n, n), 1 / n)) == pytest.approx(0.0, abs=1e-15)
        assert ergodicity_coefficient(np.eye(n)) == 1.0
        assert ergodicity_coefficient(sp.eye_array(n)) == 1.0
    pi = np.array([0.1, 0.2, 0.7])
    assert ergodicity_coefficient(np.outer(np.ones(3), pi)) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("seed", range(4))
def test_ergodicity_dense_sparse_and_brute_force_agree(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    for density in (0.1, 0.5, 1.0):
        W = random_row_stochastic(rng, n, density=density)
        expected = brute_force_delta(W)
        expected_min = 1 - min(
            np.minimum(W[i], W[j]).sum() for i in range(n) for j in range(n)
        )  # Dobrushin's form
        assert expected == pytest.approx(expected_min, abs=1e-12)
        assert ergodicity_coefficient(W) == pytest.approx(expected, abs=1e-12)
        assert ergodicity_coefficient(sp.csr_array(W)) == pytest.approx(expected, abs=1e-12)
        assert ergodicity_coefficient(W, method="sparse") == pytest.approx(expected, abs=1e-12)
    # signed rows summing to one (Seneta's tau_1; may exceed 1)
    S = rng.standard_normal((n, n))
    S -= (S.sum(axis=1, keepdims=True) - 1) / n
    assert ergodicity_coefficient(S) == pytest.approx(brute_force_delta(S), abs=1e-12)
    assert ergodicity_coefficient(sp.csr_array(S)) == pytest.approx(brute_force_delta(S))


def test_ergodicity_sparse_large():
    ring = metropolis_hastings(nx.cycle_graph(5000))  # rows 0 and 2500 are disjoint
    assert ergodicity_coefficient(ring) == 1.0
    everyone = np.ones(2000, dtype=bool)  # FedAvg round: 1 e_0^T, a dense column
    W = product([assign(everyone), average(everyone, np.full(2000, 1 / 2000))])
    assert ergodicity_coefficient(W) == pytest.approx(0.0, abs=1e-12)
    near = sp.csr_array(np.full((150, 150), 1 / 150))  # dense pattern, sparse storage
    assert ergodicity_coefficient(near) == pytest.approx(0.0, abs=1e-12)


def stochastic_matrices(n):
    weights = arrays(np.float64, (n, n), elements=st.floats(0, 1))
    return weights.map(lambda w: w + np.eye(n) * 1e-3).map(
        lambda w: w / w.sum(axis=1, keepdims=True)
    )


@FAST
@given(
    st.integers(2, 7).flatmap(lambda n: st.tuples(stochastic_matrices(n), stochastic_matrices(n)))
)
def test_ergodicity_is_submultiplicative(pair):
    A, B = pair
    product_delta = ergodicity_coefficient(A @ B)
    assert product_delta <= ergodicity_coefficient(A) * ergodicity_coefficient(B) + 1e-12
    # and it bounds the SLEM: |lambda_2| <= delta
    assert second_largest_modulus(A) <= ergodicity_coefficient(A) + 1e-9


# ---------------------------------------------------------------------- products


def test_product_order_and_types():
    rng = np.random.default_rng(0)
    A, B, C = (random_row_stochastic(rng, 5) for _ in range(3))
    np.testing.assert_allclose(product([A, B, C]), C @ B @ A)  # A applied first
    np.testing.assert_allclose(product([A]), A)
    out = product([sp.csr_array(A), sp.csr_array(B)])
    assert isinstance(out, sp.csr_array)
    np.testing.assert_allclose(out.toarray(), B @ A)
    mixed = product([sp.csr_array(A), B])
    assert isinstance(mixed, np.ndarray)
    np.testing.assert_allclose(mixed, B @ A)
    np.testing.assert_allclose(product(iter([A, B])), B @ A)  # any iterable


def test_sequence_product_matches_loop():
    seq = RandomSequence(12, seed=4)
    expected = np.eye(12)
    for k in range(3, 7):
        expected = seq.matrix(k, "metropolis").toarray() @ expected
    got = sequence_product(seq, 3, 4, rule="metropolis")
    np.testing.assert_allclose(got.toarray(), expected, atol=1e-15)


# ---------------------------------------------------------------- federated rounds


def test_fedavg_all_pull_round_perron_vectors():
    n_clients = 6
    rng = np.random.default_rng(1)
    q = rng.random(n_clients)
    q /= q.sum()
    everyone = np.ones(n_clients, dtype=bool)
    # pull, then average: every node's value is the server's, W = 1 e_0^T
    round_matrix = product([assign(everyone), average(everyone, q)])
    e0 = np.eye(n_clients + 1)[0]
    np.testing.assert_allclose(round_matrix.toarray(), np.outer(np.ones(n_clients + 1), e0))
    np.testing.assert_allclose(perron_vector(round_matrix), e0, atol=1e-15)
    assert second_largest_modulus(round_matrix) == pytest.approx(0.0, abs=1e-15)
    # average, then broadcast: the consensus is the q-weighted mean of the clients
    broadcast = product([average(everyone, q), assign(everyone)])
    np.testing.assert_allclose(perron_vector(broadcast), np.concatenate([[0.0], q]), atol=1e-14)
    assert consensus_contraction(broadcast) == pytest.approx(0.0, abs=1e-14)
    # collect is column-stochastic: all mass ends at the server
    np.testing.assert_allclose(perron_vector(collect(everyone), side="right"), e0, atol=1e-15)


def test_partial_participation_round_has_several_closed_classes():
    mask = np.array([True, False, True, False])
    W = product([assign(mask), average(mask, np.full(4, 0.5))])
    with pytest.raises(ValueError, match="3 closed classes"):
        perron_vector(W)
    expected = np.eye(5)[[0, 2, 4]]  # server, and the two absent clients alone
    np.testing.assert_allclose(stationary_distributions(W), expected, atol=1e-15)
    assert second_largest_modulus(W) == pytest.approx(1.0)
    summary = mixing_summary(W)
    assert summary["consensus_contraction"] is None and summary["slem"] == pytest.approx(1.0)


# ------------------------------------------------------------------- expectations


def assert_within(mean, se, exact, sigmas=5.0):
    mean, se, exact = (np.asarray(sp.csr_array(x).toarray()) for x in (mean, se, exact))
    assert np.all(np.abs(mean - exact) <= sigmas * se + 1e-12), np.abs(mean - exact).max()


@pytest.mark.parametrize(
    "process",
    [Bernoulli(np.array([0.1, 0.3, 0.5, 0.7, 0.9, 1.0])), UniformSample(6, 2)],
    ids=["bernoulli", "uniform-sample"],
)
def test_expected_blocks_match_monte_carlo(process):
    # E[A_S], E[C_S], E[D_S] depend on the marginals only (the blocks are affine in the
    # mask), so the closed forms hold for the fixed-size uniform sample as well
    p = process.probabilities
    rounds = 1000
    cases = [(assign, expected_assign(p)), (collect, expected_collect(p))]
    if isinstance(process, Bernoulli):
        cases.append((local_diagonal, expected_local_diagonal(p)))
    for builder, closed in cases:
        mean, se = expected_matrix(builder, process, rounds, seed=2, std_error=True)
        assert isinstance(mean, sp.csr_array) and mean.shape == (7, 7)
        assert_within(mean, se, closed)
    if not isinstance(process, Bernoulli):
        return
    q = 1.0 / (6 * p)  # fixed ("unbiased") weights
    mean, se = expected_matrix(
        lambda m: average(m, q, 0.5), process, rounds, seed=3, std_error=True
    )
    assert_within(mean, se, expected_average(p, q, 0.5))


def test_expected_closed_forms_by_hand():
    p = np.array([0.25, 1.0])
    np.testing.assert_allclose(
        expected_assign(p).toarray(), [[1, 0, 0], [0.25, 0.75, 0], [1, 0, 0]]
    )
    np.testing.assert_allclose(
        expected_collect(p).toarray(), [[1, 0.25, 1], [0, 0.75, 0], [0, 0, 0]]
    )
    np.testing.assert_allclose(expected_local_diagonal(p).toarray(), np.diag([0, 0.25, 1]))
    unbiased = expected_average(p, 1 / (2 * p))
    np.testing.assert_allclose(unbiased.toarray()[0], [0, 0.5, 0.5])
    assert mixing_summary(expected_assign(p))["kind"] == "row"
    assert mixing_summary(expected_collect(p))["kind"] == "column"


def test_expected_matrix_from_masks_array_and_dense_builder():
    masks = np.array([[True, False], [False, False], [True, True], [False, True]])
    mean = expected_matrix(lambda m: assign(m).toarray(), masks)
    assert isinstance(mean, np.ndarray)
    manual = sum(assign(m).toarray() for m in masks) / 4
    np.testing.assert_allclose(mean, manual)
    first_two = expected_matrix(assign, masks, rounds=2)
    np.testing.assert_allclose(
        first_two.toarray(), (assign(masks[0]) + assign(masks[1])).toarray() / 2
    )


class SampleOnly:
    """A process known only through ``sample(rounds, seed)`` (duck typing)."""

    def sample(self, rounds, seed):
        return np.random.default_rng(seed).random((rounds, 3)) < 0.5


def test_expected_matrix_duck_typed_sample():
    mean, se = expected_matrix(
        expected_local_diagonal_builder, SampleOnly(), 1000, 0, std_error=True
    )
    assert_within(mean, se, expected_local_diagonal(np.full(3, 0.5)))


def expected_local_diagonal_builder(mask):
    return local_diagonal(mask)


# ---------------------------------------------------------------------- summaries


def test_mixing_summary_and_table():
    W = random_metropolis(20, seed=1)
    summary = mixing_summary(W)
    assert summary["kind"] == "doubly" and summary["doubly_stochastic"]
    assert summary["spectral_radius"] == 1.0
    assert summary["slem"] == pytest.approx(numpy_moduli(W.toarray())[1])
    assert summary["spectral_gap"] == pytest.approx(1 - summary["slem"])
    assert summary["consensus_contraction"] == pytest.approx(summary["slem"])
    assert summary["ergodicity"] == pytest.approx(brute_force_delta(W.toarray()))
    column = mixing_summary(StaticSequence(nx.path_graph(5, nx.DiGraph)).matrix(0, "column"))
    assert column["kind"] == "column" and column["ergodicity"] is None
    general = mixing_summary(2 * np.eye(3))
    assert general["kind"] == "general" and general["consensus_contraction"] is None
    assert general["spectral_radius"] == pytest.approx(2.0)
    table = summary_table({"metropolis": W, "identity": np.eye(3), "given": summary})
    lines = table.splitlines()
    assert len(lines) == 5
    assert lines[0].split() == ["matrix", "kind", "n", "rho", "SLEM", "gap", "delta", "||W-1pi'||"]
    assert lines[1].split()[0] == "------"
    assert lines[3].split() == ["identity", "doubly", "3", "1", "1", "0", "1", "-"]
    assert len({len(line) for line in lines}) == 1  # aligned


# ---------------------------------------------------------------------- bad input


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="W must be a square matrix"):
        second_largest_modulus(np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match="W must be a square matrix"):
        perron_vector(sp.csr_array(np.ones((3, 2))))
    with pytest.raises(ValueError, match="side"):
        perron_vector(np.eye(2), side="up")
    with pytest.raises(ValueError, match="method"):
        spectral_radius(np.eye(2), method="fast")
    with pytest.raises(ValueError, match="k must be"):
        eigenvalues(np.eye(3), k=4)
    with pytest.raises(ValueError, match="W must have rows summing to one"):
        ergodicity_coefficient(2 * np.eye(3))
    with pytest.raises(ValueError, match="W must have finite entries"):
        spectral_gap(np.array([[np.nan, 0.0], [0.0, 1.0]]))
    with pytest.raises(TypeError, match=r"builder\(mask 0\) must be a NumPy array"):
        expected_matrix(lambda mask: [[1.0]], np.ones((2, 1), dtype=bool))
    with pytest.raises(ValueError, match="matrices must hold"):
        product([])
    with pytest.raises(ValueError, match=r"matrices\[1\]"):
        product([np.eye(2), np.eye(3)])
    with pytest.raises(ValueError, match=r"matrices\[0\] must be a square"):
        product([np.ones((2, 3))])
    with pytest.raises(ValueError, match="p must lie in"):
        expected_assign(np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match="pi must have shape"):
        consensus_contraction(sp.eye_array(3), np.ones(2))
    with pytest.raises(ValueError, match="rounds is required"):
        expected_matrix(assign, Bernoulli(np.full(3, 0.5)))
    with pytest.raises(TypeError, match="process_or_masks"):
        expected_matrix(assign, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="W must be column-stochastic"):
        stationary_distributions(np.array([[0.5, 0.5], [0.0, 1.0]]), side="right")
    with pytest.raises(TypeError, match="sequence"):
        sequence_product(np.eye(2), 0, 1)
