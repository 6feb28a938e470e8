r"""Polynomial mixing: operators ``p(W)`` of a mixing matrix ``W`` (multi-consensus,
Chebyshev acceleration, FastMix), usable wherever ``W`` is (``x[:] = p @ x``).

A polynomial of degree K in ``W`` is what K rounds of communication over ``W``'s edges
compute when each round is a linear combination of ``W`` times the last iterate, the last
iterate and the one before: every polynomial here is given by the three-term recurrence

.. math::

    P_0 = I,\qquad P_1 = \alpha_0 W + \beta_0 I,\qquad
    P_{k+1} = \alpha_k W P_k + \beta_k P_k + \gamma_k P_{k-1}\quad (1 \le k < K),

and ``p(W) = P_K``. With ``p(1) = 1`` a consensus ``1 c^T`` stays fixed, and when the rows
(or columns) of ``W`` sum to one so do those of ``p(W)``: a doubly stochastic ``W`` gives
a ``p(W)`` whose rows and columns sum to one, though Chebyshev and FastMix polynomials may
have negative entries.

=========================  ================================================================
builder                    ``p(lambda)``
=========================  ================================================================
``power(W, K)``            ``lambda^K`` (multi-consensus: K gossip rounds)
``chebyshev(W, K, l, u)``  ``T_K((2 lambda - u - l) / (u - l)) / T_K((2 - u - l) / (u - l))``:
                           the polynomial with ``p(1) = 1`` smallest on ``[l, u]``
                           (Chebyshev acceleration; Scaman et al. 2017)
``fastmix(W, K, eta)``     FastMix of Mudag (Ye, Luo, Zhou & Zhang): ``x^{k+1} = (1 + eta)
                           W x^k - eta x^{k-1}``, ``x^{-1} = x^0``
=========================  ================================================================

**Traffic.** ``p(W)`` is formed once (a sparse matrix, by the recurrence: K sparse
products), but a node that applies it exchanges K rounds of messages with its neighbours
in ``W``, not one message with each node K hops away: the operator says so
(:attr:`PolynomialMixing.hops` and :attr:`PolynomialMixing.base`), and a Result's
``messages`` and ``floats`` count K times what ``W`` would
(:mod:`stochmix.engine.model.traffic`).

**Fill-in.** ``p(W)[i, j]`` can be nonzero only when j is at most K hops from i in the
graph of ``W``: on a ring (2 neighbours) p(W) has ``n (2K + 1)`` nonzeros against
``3 n`` for ``W``, on a graph of maximum degree d up to ``n (d^{K+1} - 1) / (d - 1)``, and
``p(W)`` is dense once K reaches the graph's diameter. Applying ``p(W)`` costs its
nonzeros; forming it costs K sparse products.

**Activation.** ``p(W)`` needs every node in each of its K rounds: equations activated
for some nodes only refuse it (:mod:`stochmix.engine.model.activated`).

References:
    - K. Scaman, F. Bach, S. Bubeck, Y. T. Lee and L. Massoulié, "Optimal algorithms for
      smooth and strongly convex distributed optimization in networks", ICML 2017
      (Chebyshev acceleration of gossip).
    - H. Ye, L. Luo, Z. Zhou and T. Zhang, "Multi-consensus decentralized accelerated
      gradient descent", Journal of Machine Learning Research 24:1-50, 2023 (Mudag, its
      Algorithm FastMix).
    - J. Liu and A. S. Morse, "Accelerated linear iterations for distributed averaging",
      Annual Reviews in Control 35(2):160-165, 2011 (the momentum recurrence).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from jaxtyping import Inexact

from .._validate import as_float, as_int, as_real_array, choice
from .rowsparse import RowSparse, whole_rows

__all__ = ["KINDS", "PolynomialMixing", "chebyshev", "fastmix", "power"]

#: The polynomial families of :class:`PolynomialMixing`: ``power`` (W^K), ``chebyshev``
#: (the normalised Chebyshev polynomial), ``fastmix`` (Mudag's FastMix) and ``custom``
#: (any recurrence given to the class).
KINDS = ("power", "chebyshev", "fastmix", "custom")

_SUM_ATOL = 1e-10  # rows of W summing to one: the tolerance of mixing.checks


def _base(W, name: str = "W") -> sp.csr_array:
    """``W`` as a canonical float CSR array, validated (square, finite)."""
    from .spectral._matrices import _matrix

    A = _matrix(W, name)
    return A if sp.issparse(A) else sp.csr_array(A)


def _symmetric(A: sp.csr_array) -> bool:
    from .spectral.eigen import _is_symmetric

    return _is_symmetric(A)


def _symmetric_eigenvalues(A: sp.csr_array) -> np.ndarray:
    """Every eigenvalue of a symmetric ``A``, ascending (LAPACK on a dense copy)."""
    from .spectral.eigen import DENSE_FALLBACK

    n = A.shape[0]
    if n > DENSE_FALLBACK:
        raise ValueError(
            f"W has {n} nodes: its eigenvalue bounds are computed densely up to "
            f"{DENSE_FALLBACK} nodes; give them (lower=, upper= or eta=)"
        )
    return np.linalg.eigvalsh(A.toarray())


def _extremes(A: sp.csr_array, what: str) -> tuple[float, float]:
    """``(lambda_min, lambda_2)`` of a symmetric ``A`` whose rows sum to one, checked:
    ``lambda_2 < 1`` (a connected graph)."""
    if not _symmetric(A):
        raise ValueError(
            f"W must be symmetric for {what} computed from its eigenvalues (its eigenvalues "
            "may be complex otherwise); give them for a non-symmetric W"
        )
    values = _symmetric_eigenvalues(A)
    if values.size < 2:
        raise ValueError(f"W must have at least 2 nodes for {what}, got {values.size}")
    lower, upper = float(values[0]), float(values[-2])
    if values[-1] > 1 + 1e-9:
        raise ValueError(
            f"W has an eigenvalue {values[-1]:.12g} above 1: no polynomial with p(1) = 1 "
            f"bounded on W's other eigenvalues keeps it bounded; give {what}"
        )
    if upper >= 1 - 1e-12:
        raise ValueError(
            f"W has a second eigenvalue lambda_2 = {upper:.12g} (its graph is not "
            "connected): no polynomial of W reaches consensus"
        )
    return lower, upper


def _check_sums(A: sp.csr_array, what: str) -> None:
    """Refuse a ``W`` whose rows do not sum to one (``p(1) = 1`` keeps a consensus only
    when ``W 1 = 1``)."""
    sums = np.asarray(A.sum(axis=1)).reshape(-1)
    worst = int(np.argmax(np.abs(sums - 1))) if sums.size else 0
    if sums.size and abs(sums[worst] - 1) > _SUM_ATOL:
        raise ValueError(
            f"W's rows must sum to one for {what} (p(1) = 1 keeps a consensus only when "
            f"W 1 = 1), got row {worst} summing to {float(sums[worst])!r}"
        )


_BUILT_FROM_W = (
    "a PolynomialMixing is built from its W: power(W, K), chebyshev(W, K), fastmix(W, K) or "
    "PolynomialMixing(W, alpha, beta, gamma); RowSparse.whole / from_entries build plain "
    "operators"
)


class PolynomialMixing(RowSparse):
    r"""The operator ``p(W)`` of a polynomial ``p`` of degree K given by its three-term
    recurrence (see the module docstring): ``P_0 = I``, ``P_1 = alpha_0 W + beta_0 I``,
    ``P_{k+1} = alpha_k W P_k + beta_k P_k + gamma_k P_{k-1}``, ``p(W) = P_K``.

    A :class:`~stochmix.mixing.RowSparse` that sets every row (as
    :meth:`DecentralizedMethod.mixing <stochmix.algorithms.DecentralizedMethod.mixing>`
    gives W), so ``x[:] = p @ x`` in an equation applies ``p(W)`` to the whole block ``x``,
    as one sparse product. Built by :func:`power`, :func:`chebyshev` and :func:`fastmix`,
    or directly from any recurrence.

    Args:
        W: the base mixing matrix, ``(n, n)``: a dense array, a SciPy sparse matrix or a
            RowSparse (finite entries).
        alpha: the coefficients of ``W P_k``, shape ``(K,)``, ``K >= 1``.
        beta: the coefficients of ``P_k``, shape ``(K,)``.
        gamma: the coefficients of ``P_{k-1}``, shape ``(K,)`` (``gamma[0]`` is not used:
            ``P_{-1}`` does not exist).
        kind: one of :data:`KINDS`, for the summaries (``"custom"`` by default).
        parameters: what the builder chose (``lower`` and ``upper``, ``eta``), kept and shown.

    Attributes:
        base: ``W`` as a whole-matrix RowSparse: the edges each of the K rounds uses.
        hops: K, the rounds of communication over ``base`` that applying ``p(W)`` costs
            (:mod:`stochmix.engine.model.traffic` counts K times ``base``'s messages).
        kind: the family, one of :data:`KINDS`.
        recurrence: ``(alpha, beta, gamma)``, read-only float arrays of shape ``(K,)``.
        parameters: dict of the builder's choices.

    Cost: K sparse products at construction; the matrix has the fill-in of the module
    docstring.
    """

    def __init__(self, W, alpha, beta, gamma, kind: str = "custom", parameters=None):
        base = _base(W)
        coefs = []
        for name, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma)):
            arr = as_real_array(value, name, ndim=1)
            arr = np.array(arr, dtype=float)
            arr.flags.writeable = False
            coefs.append(arr)
        K = coefs[0].size
        if K < 1:
            raise ValueError(f"alpha must hold at least one coefficient (K >= 1), got {K}")
        for name, arr in zip(("beta", "gamma"), coefs[1:], strict=True):
            if arr.size != K:
                raise ValueError(f"{name} must have shape ({K},) like alpha, got {arr.shape}")
        self.kind = choice(kind, "kind", KINDS)
        self.parameters = dict(parameters or {})
        self.recurrence = tuple(coefs)
        self.hops = K
        self.base = RowSparse.whole(base)
        n = base.shape[0]
        self.size, self.rows, self.identity_elsewhere = n, whole_rows(n), True
        self._values, self._entries, self.pattern = self._form(base), None, None

    @classmethod
    def from_entries(cls, *args, **kwargs):  # type: ignore[override]
        """Refused: a polynomial of W is built from W (:func:`power`, :func:`chebyshev`,
        :func:`fastmix` or the constructor); ``RowSparse.from_entries`` builds a plain
        operator."""
        raise TypeError(_BUILT_FROM_W)

    @classmethod
    def whole(cls, *args, **kwargs):  # type: ignore[override]
        """Refused, as :meth:`from_entries` is; ``RowSparse.whole`` wraps a plain matrix."""
        raise TypeError(_BUILT_FROM_W)

    def _form(self, W: sp.csr_array) -> sp.csr_array:
        """``p(W)`` by the recurrence, as a canonical CSR array."""
        alpha, beta, gamma = self.recurrence
        eye = sp.eye_array(W.shape[0], format="csr")
        previous, current = eye, alpha[0] * W + beta[0] * eye
        for k in range(1, self.hops):
            step = alpha[k] * (W @ current)
            if beta[k]:
                step = step + beta[k] * current
            if gamma[k]:
                step = step + gamma[k] * previous
            previous, current = current, step
        out = sp.csr_array(current)
        out.sum_duplicates()
        out.eliminate_zeros()
        return out

    def eigenvalues(self, w_eigs: Inexact[np.ndarray, " m"]) -> Inexact[np.ndarray, " m"]:
        """``p(lambda)`` for each eigenvalue ``lambda`` of ``W``: the eigenvalues of
        ``p(W)``, with the same eigenvectors (``W v = lambda v`` gives ``p(W) v = p(lambda)
        v``), in the order given.

        Args:
            w_eigs: eigenvalues of ``W`` (real or complex), any shape.

        Returns:
            an array of ``w_eigs``'s shape (complex when ``w_eigs`` is).
        """
        lam = np.asarray(w_eigs)
        if lam.dtype.kind not in "iufc":
            raise TypeError(f"w_eigs must be numbers, got an array of dtype {lam.dtype}")
        lam = lam.astype(complex if lam.dtype.kind == "c" else float)
        alpha, beta, gamma = self.recurrence
        previous, current = np.ones_like(lam), alpha[0] * lam + beta[0]
        for k in range(1, self.hops):
            previous, current = (
                current,
                (alpha[k] * lam + beta[k]) * current + (gamma[k] * previous),
            )
        return current

    def __repr__(self) -> str:
        shown = "".join(f", {key}={value:.6g}" for key, value in self.parameters.items())
        return f"PolynomialMixing({self.kind}, K={self.hops}{shown}, size={self.size})"


def _degree(K) -> int:
    return as_int(K, "K", minimum=1)


def power(W, K: int) -> PolynomialMixing:
    """``W^K`` (multi-consensus: K gossip rounds over ``W``'s edges in one step).

    Args:
        W: ``(n, n)`` mixing matrix (dense, SciPy sparse or RowSparse); any square matrix.
        K: the degree, ``K >= 1``.

    Returns:
        the :class:`PolynomialMixing` of ``p(lambda) = lambda^K`` (``alpha = 1``, ``beta =
        gamma = 0``), costing K rounds of ``W``'s messages.
    """
    K = _degree(K)
    base = _base(W)
    return PolynomialMixing(base, np.ones(K), np.zeros(K), np.zeros(K), "power")


def _bound(value, name: str) -> float | None:
    return None if value is None else as_float(value, name)


def chebyshev(
    W, K: int, lower: float | None = None, upper: float | None = None
) -> PolynomialMixing:
    r"""The normalised Chebyshev polynomial of ``W``:

    .. math::

        p_K(\lambda) = \frac{T_K\big((2\lambda - u - l) / (u - l)\big)}
                            {T_K\big((2 - u - l) / (u - l)\big)},

    the polynomial of degree K with ``p(1) = 1`` whose largest modulus on ``[l, u]`` is
    smallest, ``1 / T_K((2 - u - l) / (u - l))`` (Chebyshev's extremal property). With
    ``[l, u]`` bounding the eigenvalues of ``W`` other than 1, the consensus error shrinks
    by that factor per application: ``2 / (r^K + r^-K)`` with ``r = t_0 + sqrt(t_0^2 -
    1)``, ``t_0 = (2 - u - l) / (u - l)`` (for ``l = -u = gap - 1``, about ``2 (1 -
    sqrt(2 gap))^K`` against ``(1 - gap)^K`` for ``W^K``). Computed by
    ``T_{k+1} = 2 t T_k - T_{k-1}``, normalised at every step (no overflow for large K).
    When ``l = u = c`` (every other eigenvalue equal, e.g. the complete graph's
    ``11^T / n``) the limit ``((lambda - c) / (1 - c))^K`` is taken.

    Args:
        W: ``(n, n)`` mixing matrix whose rows sum to one (dense, SciPy sparse or
            RowSparse); symmetric unless both bounds are given.
        K: the degree, ``K >= 1``.
        lower: ``l``, a lower bound of ``W``'s eigenvalues other than 1; by default
            ``lambda_min(W)`` (symmetric ``W``, computed densely).
        upper: ``u``, an upper bound, ``lower <= upper < 1``; by default ``lambda_2(W)``,
            the second-largest eigenvalue (refused when it is 1: a disconnected graph).

    Returns:
        the :class:`PolynomialMixing` (kind ``"chebyshev"``, ``parameters`` ``lower`` and
        ``upper``), costing K rounds of ``W``'s messages.
    """
    K = _degree(K)
    lower, upper = _bound(lower, "lower"), _bound(upper, "upper")
    base = _base(W)
    _check_sums(base, "chebyshev")
    if lower is None or upper is None:
        low, high = _extremes(base, "the Chebyshev bounds (lower, upper)")
        lower = low if lower is None else lower
        upper = high if upper is None else upper
    if not upper < 1:
        raise ValueError(f"upper must be < 1 (it bounds the eigenvalues other than 1), got {upper}")
    if lower > upper:
        raise ValueError(f"lower must be <= upper = {upper}, got {lower}")
    alpha, beta, gamma = np.empty(K), np.empty(K), np.zeros(K)
    width = upper - lower
    if width <= 1e-12 * max(1.0, abs(upper)):  # the limit of a vanishing interval
        alpha[:] = 1 / (1 - upper)
        beta[:] = -upper / (1 - upper)
    else:
        s, r = 2 / width, (upper + lower) / width  # t(lambda) = s lambda - r
        t0 = s - r  # t(1) > 1
        ratio = 1 / t0  # c_k / c_{k+1}, c_k = T_k(t0): c_0 = 1, c_1 = t0
        alpha[0], beta[0] = s * ratio, -r * ratio
        for k in range(1, K):
            before, ratio = ratio, 1 / (2 * t0 - ratio)  # c_{k+1} = 2 t0 c_k - c_{k-1}
            alpha[k], beta[k], gamma[k] = 2 * s * ratio, -2 * r * ratio, -before * ratio
    return PolynomialMixing(base, alpha, beta, gamma, "chebyshev", {"lower": lower, "upper": upper})


def fastmix(W, K: int, eta: float | None = None) -> PolynomialMixing:
    r"""FastMix (Ye, Luo, Zhou & Zhang, Mudag's Algorithm FastMix; the momentum of Liu &
    Morse): K rounds of

    .. math::

        x^{k+1} = (1 + \eta) W x^k - \eta x^{k-1},\qquad x^{-1} = x^0,

    that is ``P_1 = (1 + eta) W - eta I`` and ``P_{k+1} = (1 + eta) W P_k - eta P_{k-1}``.
    By default ``eta = (1 - sqrt(1 - lambda^2)) / (1 + sqrt(1 - lambda^2))`` with
    ``lambda`` the second-largest eigenvalue modulus of ``W``, ``max(lambda_2,
    -lambda_min)``: the paper's ``lambda_2(W)`` (the second-largest eigenvalue) when ``W``
    has no eigenvalue below ``-lambda_2`` (e.g. a positive semidefinite ``W``), and
    otherwise the value that keeps every mode's contraction at ``sqrt(eta)`` per round.
    Asymptotically the consensus error then shrinks by ``sqrt(eta) = (1 - sqrt(1 -
    lambda^2)) / lambda`` per round, against ``lambda`` for ``W``.

    Args:
        W: ``(n, n)`` mixing matrix whose rows sum to one (dense, SciPy sparse or
            RowSparse); symmetric unless ``eta`` is given.
        K: the rounds, ``K >= 1``.
        eta: the momentum, ``0 <= eta < 1``; by default from ``W``'s spectrum (computed
            densely).

    Returns:
        the :class:`PolynomialMixing` (kind ``"fastmix"``, ``parameters`` ``eta``), costing
        K rounds of ``W``'s messages.
    """
    K = _degree(K)
    eta = _bound(eta, "eta")
    base = _base(W)
    _check_sums(base, "fastmix")
    if eta is None:
        low, high = _extremes(base, "FastMix's eta")
        lam = max(high, -low)
        if lam >= 1 - 1e-12:
            raise ValueError(
                f"W has an eigenvalue lambda_min = {low:.12g} (a bipartite graph without "
                "self-loops): FastMix's default eta needs |lambda| < 1 for every eigenvalue "
                "but 1; give eta"
            )
        root = np.sqrt(1 - lam**2)
        eta = float((1 - root) / (1 + root))
    elif not 0 <= eta < 1:
        raise ValueError(f"eta must lie in [0, 1), got {eta}")
    alpha = np.full(K, 1 + eta)
    beta = np.zeros(K)
    beta[0] = -eta  # x^{-1} = x^0
    gamma = np.full(K, -eta)
    gamma[0] = 0.0
    return PolynomialMixing(base, alpha, beta, gamma, "fastmix", {"eta": eta})
