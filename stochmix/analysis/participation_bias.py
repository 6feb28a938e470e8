"""Which objective FedAvg minimises under heterogeneous participation.

FedAvg with uniform weights gives client i the weight ``q_i = 1{i in S} / |S|`` in a round
with participants S (a round nobody joins leaves the server as it was). With K = 1 local step
and server step 1 the server moves by ``-gamma sum_i q_i grad F_i(x_0)``; since the masks do
not depend on the iterates, the mean of the iterates follows gradient descent on
``sum_i E[q_i] F_i``, so the stationary mean of the server is exactly

    weighted_minimizer(problem, E[q])  =  argmin_x sum_i E[q_i] F_i(x)

for any step size (with K > 1 client drift adds an O(gamma (K - 1)) shift on top). This
module computes E[q_i] and that minimiser.

**All-pull round matrix** (FOCUS paper, appendix C). Rewrite FedAvg so that *every* client
pulls the server model, while the same set S is averaged: the round matrix becomes
``W_S = A_all @ average(S, 1/|S|)``, whose rows are all equal to ``(0, q_1, ..., q_N)`` (and
to ``e_0`` in an empty round). Hence ``E[W] = 1 w^T`` with ``w = (P(S = {}), E[q_1], ...,
E[q_N])``: a rank-one row-stochastic matrix whose left Perron vector is ``w`` itself, and the
server row after averaging, ``sum_i q_i x_i``, has expectation ``sum_i E[q_i] x_i``. So the
Perron vector of the expected all-pull round restricted to the clients is E[q_i], as the
direct expectation gives (:func:`expected_all_pull_matrix`, :func:`perron_vector`).

**Closed forms.** Full participation and uniform sampling of a fixed size: E[q_i] = 1/N.
Independent Bernoulli(p_i): with X_{-i} the number of the other clients that join,

    E[q_i] = p_i E[1 / (1 + X_{-i})] = p_i int_0^1 prod_{j != i} (1 - p_j + p_j t) dt,

a polynomial integral evaluated exactly by Gauss-Legendre quadrature. Other processes
(weighted sampling, Markov, periodic, regularized) by Monte Carlo, with a batch-means
standard error (valid for processes correlated across rounds).

**FedStale's eq. (4)** says FedAvg minimises ``sum_i p_i / sum_j p_j F_i``. Under independent
Bernoulli participation that is only approximate: E[q_i | S nonempty] / (p_i / sum_j p_j) is
increasing in p_i (X_{-i} leaves client i out, so a frequent client shares a round with fewer
others on average), so FedAvg overweights frequent clients a little more than eq. (4) says.
Measured with :func:`compare_with_fedstale_eq4` (maximum over clients of the relative
deviation of the normalised E[q_i] from eq. (4)), p_i drawn uniformly (``default_rng(0)``):
N = 5 clients with p_i in [0.1, 0.9]: 18%; N = 10, p_i in [0.05, 0.95]: 11%;
N = 20, [0.1, 0.9]: 5.1%; N = 100: 1.0%; N = 1000: 0.10%; N = 10000: 0.01%; homogeneous p:
0 (exactly). The deviation shrinks like 1/N, as each client's own share of sum_j p_j does;
eq. (4) is the large-N limit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.special
from jaxtyping import Bool, Float

from .._validate import (
    _show,
    as_bool,
    as_int,
    as_mask,
    as_nonnegative,
    as_probabilities,
    as_real_array,
    as_seed,
)
from ..mixing.federated import assign, average
from ..participation import Bernoulli, Full, ParticipationProcess, UniformSample
from .linear import affine_gradients

__all__ = [
    "EXACT_NODES_LIMIT",
    "Eq4Comparison",
    "WeightEstimate",
    "all_pull_round_matrix",
    "bernoulli_expected_weights",
    "compare_with_fedstale_eq4",
    "expected_all_pull_matrix",
    "expected_weights",
    "perron_vector",
    "weighted_minimizer",
]

EXACT_NODES_LIMIT = 4096  # Gauss-Legendre nodes; exact for N <= 2 * limit


class WeightEstimate(NamedTuple):
    """E[q_i] under uniform ``1/|S|`` aggregation weights.

    Attributes:
        weights: (N,) E[q_i]; they sum to ``1 - empty``.
        stderr: (N,) standard errors (zeros for a closed form).
        empty: P(S = {}), the probability of a round nobody joins.
        exact: whether ``weights`` is a closed form (else a Monte Carlo estimate).
    """

    weights: np.ndarray
    stderr: np.ndarray
    empty: float
    exact: bool

    @property
    def normalized(self) -> np.ndarray:
        """E[q_i] / sum_j E[q_j] = E[q_i | S nonempty]: the weights of the objective FedAvg
        minimises (for K = 1 exactly, see the module docstring)."""
        return self.weights / self.weights.sum()


def _process(participation, n_clients) -> ParticipationProcess:
    """The process, or Bernoulli(p) for ``participation = p``; errors name ``participation``."""
    if n_clients is not None:
        n_clients = as_int(n_clients, "n_clients", minimum=1)
    if isinstance(participation, ParticipationProcess):
        if n_clients is not None and n_clients != participation.n_clients:
            raise ValueError(
                f"n_clients = {n_clients} does not match the process's {participation.n_clients}"
            )
        return participation
    if isinstance(participation, str) or participation is None:
        raise TypeError(
            "participation must be a participation process or Bernoulli probabilities p, "
            f"got {_show(participation)}"
        )
    try:
        return Bernoulli(participation, n_clients)
    except (TypeError, ValueError) as error:
        raise type(error)(f"participation (Bernoulli p): {error}") from None


def bernoulli_expected_weights(p: Float[np.ndarray, " n"]) -> Float[np.ndarray, " n"]:
    """Closed form of E[q_i] = p_i int_0^1 prod_{j != i} (1 - p_j + p_j t) dt under
    independent Bernoulli(p_i) participation.

    Gauss-Legendre quadrature with N/2 + 1 nodes integrates the degree N-1 polynomial exactly
    (to rounding) for N <= 2 * ``EXACT_NODES_LIMIT``; beyond, the nodes are capped there and
    the (entire, smooth) integrand is still integrated to near rounding. Cost O(N x nodes),
    in chunks; products are taken in log space, so large N does not underflow.
    """
    p = as_probabilities(p, "p")
    n = p.size
    nodes, wts = scipy.special.roots_legendre(min(n // 2 + 1, EXACT_NODES_LIMIT))
    t, w = 0.5 * (nodes + 1.0), 0.5 * wts
    log_all = np.zeros(t.size)
    step = max(1, (1 << 20) // t.size)
    for s in range(0, n, step):
        log_all += np.log1p(-np.outer(p[s : s + step], 1.0 - t)).sum(axis=0)
    out = np.empty(n)
    for s in range(0, n, step):
        pi = p[s : s + step, None]
        # prod_{j != i} = prod_all / (1 - p_i + p_i t); 1 - p_i (1 - t) >= t > 0 at the nodes
        out[s : s + step] = np.exp(log_all - np.log1p(-pi * (1.0 - t))) @ w
    return p * out


def expected_weights(
    participation,
    n_clients: int | None = None,
    *,
    rounds: int = 20_000,
    seed=0,
    batches: int = 20,
    monte_carlo: bool = False,
) -> WeightEstimate:
    """E[q_i], the expected weight of client i in FedAvg's uniform average ``1{i in S}/|S|``.

    ``participation`` is a participation process, or ``p`` (a vector, or a scalar with
    ``n_clients``) for independent Bernoulli participation. Closed forms for
    :class:`Full`, :class:`UniformSample` (1/N each) and :class:`Bernoulli`
    (:func:`bernoulli_expected_weights`); any other process, or ``monte_carlo=True``, is
    estimated from ``rounds`` masks of ``participation.masks(seed)`` with a standard error
    from ``batches`` batch means.
    """
    proc = _process(participation, n_clients)
    monte_carlo = as_bool(monte_carlo, "monte_carlo")
    rounds = as_int(rounds, "rounds", minimum=2)
    batches = as_int(batches, "batches", minimum=2)
    seed = as_seed(seed)
    n = proc.n_clients
    if not monte_carlo:
        if isinstance(proc, Full):
            return WeightEstimate(np.full(n, 1.0 / n), np.zeros(n), 0.0, True)
        if isinstance(proc, UniformSample) and proc.size >= 1:
            return WeightEstimate(np.full(n, 1.0 / n), np.zeros(n), 0.0, True)
        if isinstance(proc, Bernoulli):
            p = proc.probabilities
            empty = float(np.prod(1.0 - p))
            return WeightEstimate(bernoulli_expected_weights(p), np.zeros(n), empty, True)
    length = rounds // batches
    if length < 1:
        raise ValueError(f"rounds ({rounds}) must be at least batches ({batches})")
    stream = proc.masks(seed)
    means = np.empty((batches, n))
    empties = np.empty(batches)
    for b in range(batches):
        masks = np.stack([next(stream) for _ in range(length)])
        sizes = masks.sum(axis=1)
        q = masks / np.maximum(sizes, 1)[:, None]
        means[b] = q.mean(axis=0)
        empties[b] = float((sizes == 0).mean())
    stderr = means.std(axis=0, ddof=1) / math.sqrt(batches)
    return WeightEstimate(means.mean(axis=0), stderr, float(empties.mean()), False)


def all_pull_round_matrix(mask: Bool[np.ndarray, " n"]) -> sp.csr_array:
    """``W_S = A_all @ average(S, 1/|S|)``, (N+1, N+1): FedAvg's round rewritten so that every
    client pulls (FOCUS paper, appendix C). Every row is ``(0, q_1, ..., q_N)`` (``e_0`` in an
    empty round), built from :func:`stochmix.mixing.assign` and :func:`stochmix.mixing.average`.
    """
    mask = as_mask(mask, None, "mask")
    size = int(mask.sum())
    q = np.full(mask.shape, 1.0 / max(size, 1))
    return sp.csr_array(assign(np.ones(mask.shape, dtype=bool)) @ average(mask, q))


def expected_all_pull_matrix(
    participation, n_clients: int | None = None, *, rounds: int = 20_000, seed=0
) -> Float[np.ndarray, "m m"]:
    """Monte Carlo mean of :func:`all_pull_round_matrix` over ``rounds`` masks of
    ``participation.masks(seed)`` (a process, or Bernoulli ``p``): a dense (N+1, N+1)
    row-stochastic matrix."""
    proc = _process(participation, n_clients)
    rounds = as_int(rounds, "rounds", minimum=1)
    stream = proc.masks(seed)
    total = np.zeros((proc.n_clients + 1, proc.n_clients + 1))
    for _ in range(rounds):
        total += all_pull_round_matrix(next(stream)).toarray()
    return total / rounds


def perron_vector(matrix: Float[np.ndarray, "m m"]) -> Float[np.ndarray, " m"]:
    """The left Perron vector of a (row-)stochastic matrix: ``pi W = pi``, ``sum pi = 1``
    (the left eigenvector of the eigenvalue of largest real part)."""
    a = as_real_array(matrix, "matrix")
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.size == 0:
        raise ValueError(f"matrix must be a non-empty square matrix, got shape {a.shape}")
    vals, vecs = scipy.linalg.eig(a.T)
    v = np.real(vecs[:, int(np.argmax(vals.real))])
    return v / v.sum()


def weighted_minimizer(problem, weights: Float[np.ndarray, " n"]) -> Float[np.ndarray, " d"]:
    """``argmin_x sum_i w_i F_i(x)`` for a problem with affine gradients (quadratic or least
    squares): the solution of ``(sum_i w_i H_i) x = sum_i w_i c_i``. The scale of ``weights``
    does not matter; they must be nonnegative with a positive sum."""
    aff = affine_gradients(problem)
    w = as_nonnegative(weights, "weights", aff.n_clients)
    if not w.sum() > 0:
        raise ValueError(f"weights must have a positive sum, got sum {float(w.sum())}")
    hw, cw = aff.weighted(w / w.sum())
    return scipy.linalg.solve(hw, cw, assume_a="sym")


class Eq4Comparison(NamedTuple):
    """E[q_i] against FedStale's eq. (4) weights p_i / sum_j p_j.

    Attributes:
        expected: (N,) E[q_i] (exact).
        normalized: (N,) E[q_i] / sum_j E[q_j] = E[q_i | S nonempty].
        eq4: (N,) p_i / sum_j p_j.
        max_relative_deviation: ``max_i |normalized_i - eq4_i| / eq4_i``.
    """

    expected: np.ndarray
    normalized: np.ndarray
    eq4: np.ndarray
    max_relative_deviation: float


def compare_with_fedstale_eq4(p: Float[np.ndarray, " n"]) -> Eq4Comparison:
    """How far FedAvg's expected weights under independent Bernoulli(p_i) participation are
    from FedStale's eq. (4), ``p_i / sum_j p_j``.

    The comparison is between normalised weights (the objective's weights; E[q_i] itself
    sums to P(S nonempty) = 1 - prod_j (1 - p_j)). See the module docstring for measured
    values: about 5% for 20 clients with p_i in [0.1, 0.9], shrinking like 1/N.
    """
    p = as_probabilities(p, "p")
    expected = bernoulli_expected_weights(p)
    normalized = expected / expected.sum()
    eq4 = p / p.sum()
    dev = float(np.max(np.abs(normalized - eq4) / eq4))
    return Eq4Comparison(expected, normalized, eq4, dev)
