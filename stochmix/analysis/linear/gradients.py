"""Affine client gradients ``grad F_i(x) = H_i x - c_i``: :class:`AffineGradients` and
:func:`affine_gradients`, which reads them off a problem (cached per problem object)."""

from __future__ import annotations

import weakref

import numpy as np
import scipy.sparse as sp

from ..._validate import _show, as_real_array
from ...problems import LeastSquares, Quadratic

__all__ = [
    "AffineGradients",
    "affine_gradients",
]


class AffineGradients:
    """Per-client affine gradients ``grad F_i(x) = H_i x - c_i``.

    Attributes:
        hessians: (N, d) diagonals when ``diagonal``, else (N, d, d) symmetric H_i.
        linear: (N, d), row i is c_i.
        diagonal: whether the H_i are stored as diagonals.
    """

    def __init__(self, hessians: np.ndarray, linear: np.ndarray):
        hessians = as_real_array(hessians, "hessians")
        linear = as_real_array(linear, "linear")
        if linear.ndim != 2:
            raise ValueError(f"linear must have shape (N, d), got {linear.shape}")
        n, d = linear.shape
        if hessians.shape not in ((n, d), (n, d, d)):
            raise ValueError(
                f"hessians must have shape ({n}, {d}) or ({n}, {d}, {d}) to match linear "
                f"{linear.shape}, got {hessians.shape}"
            )
        self.hessians, self.linear = hessians, linear
        self.diagonal = hessians.ndim == 2
        #: the problem's sampled gradients, where it has them (see :meth:`sampled`)
        self.sampler = None

    @property
    def n_clients(self) -> int:
        return self.linear.shape[0]

    @property
    def dim(self) -> int:
        return self.linear.shape[1]

    def apply(self, clients: np.ndarray, points: np.ndarray) -> np.ndarray:
        """``H_c x`` for each requested client c at its point x (the linear part only)."""
        h = self.hessians[clients]
        if self.diagonal:
            return h * points
        return np.einsum("mij,mj->mi", h, points)

    def apply_columns(self, clients: np.ndarray, points: np.ndarray) -> np.ndarray:
        """:meth:`apply` on points of shape (c, k d): k points per client side by side, each
        multiplied by the client's ``H_c``; returns (c, k d)."""
        c, d = clients.size, self.dim
        at = points.reshape(c, -1, d)
        h = self.hessians[clients]
        if self.diagonal:
            return (at * h[:, None, :]).reshape(c, -1)
        return np.einsum("mij,mkj->mki", h, at).reshape(c, -1)

    def block(self, clients: np.ndarray) -> sp.csr_array:
        """``blockdiag(H_c)`` over ``clients``, a sparse (c d, c d) matrix."""
        h = self.hessians[clients]
        c, d = clients.size, self.dim
        if self.diagonal:
            return sp.diags_array(h.reshape(-1), format="csr")
        bsr = sp.bsr_array((h, np.arange(c), np.arange(c + 1)), shape=(c * d, c * d))
        return sp.csr_array(bsr)

    def sampled(self, clients: np.ndarray, picks: np.ndarray) -> AffineGradients:
        """The affine maps of the sampled gradients of ``clients`` drawing ``picks``
        ((c, b); :func:`~stochmix.engine.model.functions.grad`), one per client, in their
        order: read off the problem's ``sampled_gradients`` at zero and at the unit
        vectors (exact: they are affine where the full gradients are)."""
        if self.sampler is None:
            raise TypeError(
                "sampled gradients (grad(S, samples=...)) need the problem itself: give the "
                "problem, not its affine gradients"
            )
        from ...engine.plan.gradients import sampled_gradients_at

        c, d = clients.size, self.dim
        at = np.zeros((c, d))
        zero = sampled_gradients_at(self.sampler, clients, at, picks)
        hessians = np.empty((c, d, d))
        for k in range(d):
            at[:, k] = 1.0
            hessians[:, :, k] = sampled_gradients_at(self.sampler, clients, at, picks) - zero
            at[:, k] = 0.0
        return AffineGradients(hessians, -zero)

    def weighted(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sum_i w_i H_i, sum_i w_i c_i)`` as a dense (d, d) matrix and a (d,) vector."""
        if self.diagonal:
            hw = np.diag(weights @ self.hessians)
        else:
            hw = np.einsum("n,nij->ij", weights, self.hessians)
        return hw, weights @ self.linear


_AFFINE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def affine_gradients(problem) -> AffineGradients:
    """The affine gradients ``grad F_i(x) = H_i x - c_i`` of a problem.

    Accepts a :class:`~stochmix.problems.Quadratic` (``c_i = H_i z_i``), a
    :class:`~stochmix.problems.LeastSquares` (``H_i = A_i^T A_i + reg I``, ``c_i = A_i^T b_i``),
    any object with a ``hessians_and_linear_terms()`` method returning ``(H, c)``, or an
    :class:`AffineGradients` (returned as is). Results are cached per problem object.

    Raises:
        TypeError: a problem whose gradients are not known to be affine.
    """
    if isinstance(problem, AffineGradients):
        return problem
    try:
        hit = _AFFINE_CACHE.get(problem)
    except TypeError:  # not weak-referenceable or not hashable
        hit = None
    if hit is not None:
        return hit
    if isinstance(problem, Quadratic):
        h, z = problem.hessians, problem.centers
        c = h * z if problem.diagonal else np.einsum("nij,nj->ni", h, z)
        out = AffineGradients(h, c)
    elif isinstance(problem, LeastSquares) or hasattr(problem, "hessians_and_linear_terms"):
        out = AffineGradients(*problem.hessians_and_linear_terms())
    else:
        raise TypeError(
            "problem must have affine gradients (a Quadratic, a LeastSquares, or an object with "
            f"hessians_and_linear_terms()), got {type(problem).__name__}: {_show(problem)}"
        )
    if callable(getattr(problem, "sampled_gradients", None)):
        out.sampler = problem
    try:
        _AFFINE_CACHE[problem] = out
    except TypeError:
        pass
    return out
