"""Quadratic clients: F_i(x) = 1/2 (x - z_i)^T H_i (x - z_i)."""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Real

from .._lazy import lazy_module
from .._validate import as_bool, as_float, as_int, check_finite, make_rng
from ._common import ClientData, client_rows, float_array, hessian_products, metric_rows
from .base import Problem

__all__ = [
    "Quadratic",
]

la = lazy_module("scipy.linalg")


class Quadratic(Problem):
    """N quadratic clients F_i(x) = 1/2 (x - z_i)^T H_i (x - z_i) in dimension d.

    ``centers`` Z has shape (N, d), row i is z_i. ``hessians`` is either (N, d), row i the
    diagonal of a diagonal H_i, or (N, d, d), the full symmetric positive semidefinite H_i.
    The average Hessian Hbar = (1/N) sum_i H_i must be positive definite, so that f has the
    unique minimiser

        x_star = (sum_i H_i)^{-1} sum_i H_i z_i.

    Constants: ``smoothness`` L = max_i lambda_max(H_i), ``strong_convexity``
    mu = lambda_min(Hbar).

    Metrics in closed form: f(x) - f(x_star) = 1/2 (x - x_star)^T Hbar (x - x_star) and
    grad f(x) = Hbar (x - x_star), in O(d) (diagonal) or O(d^2), with no pass over the
    clients, and exact to rounding of the *gap* itself (no cancellation of f(x) - f_star).

    Raises:
        ValueError: shapes that do not match, values that are not finite, a full H_i that is
            not symmetric or not positive semidefinite, or an average Hessian that is singular.
        TypeError: arrays that do not hold real numbers.
    """

    closed_form_metrics = frozenset({"objective", "gradient_norm"})

    def __init__(
        self,
        centers: Real[np.ndarray, "n d"],
        hessians: Real[np.ndarray, "n d"] | Real[np.ndarray, "n d d"],
    ):
        self._setup(centers, hessians, copy=True)

    def _setup(self, centers, hessians, *, copy: bool) -> None:
        z = float_array(centers, "centers").astype(np.float64, copy=copy)
        if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1:
            raise ValueError(f"centers must have shape (n_clients, dim), got {z.shape}")
        check_finite(z, "centers")
        n, d = z.shape
        h = float_array(hessians, "hessians").astype(np.float64, copy=copy)
        if h.shape not in ((n, d), (n, d, d)):
            raise ValueError(
                f"hessians must have shape ({n}, {d}) (diagonals) or ({n}, {d}, {d}) (full) "
                f"to match centers {z.shape}, got {h.shape}"
            )
        check_finite(h, "hessians")
        super().__init__(n, d)
        self._diagonal = h.ndim == 2

        if self._diagonal:
            if h.min() < 0:
                i, j = np.argwhere(h < 0)[0]
                raise ValueError(
                    f"hessians must be positive semidefinite; client {i} has diagonal entry "
                    f"{float(h[i, j])!r} < 0"
                )
            self._smoothness = float(h.max())
            mean_diag = h.mean(axis=0)
            mu = float(mean_diag.min())
            self._check_mean_definite(mu, float(mean_diag.max()))
            weighted = _sum_of_products(h, z)
            total = h.sum(axis=0)
            self._x_star = weighted / total
            self._mean_h = mean_diag  # the diagonal of Hbar
        else:
            scale = float(np.abs(h).max())
            asym = float(np.abs(h - h.swapaxes(1, 2)).max())
            if asym > 1e-10 * scale:
                i = int(np.argmax(np.abs(h - h.swapaxes(1, 2)).reshape(n, -1).max(axis=1)))
                raise ValueError(
                    f"hessians must be symmetric; client {i} has |H - H^T| up to {asym:.3g}"
                )
            h = 0.5 * (h + h.swapaxes(1, 2))
            eig = np.linalg.eigvalsh(h)  # (n, d), ascending
            bad = eig[:, 0] < -1e-10 * np.maximum(np.abs(eig[:, -1]), np.finfo(float).tiny)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"hessians must be positive semidefinite; client {i} has eigenvalue "
                    f"{float(eig[i, 0])!r}"
                )
            self._smoothness = float(max(eig[:, -1].max(), 0.0))
            mean_h = h.mean(axis=0)
            mean_eig = np.linalg.eigvalsh(mean_h)
            mu = float(mean_eig[0])
            self._check_mean_definite(mu, float(mean_eig[-1]))
            hz = np.einsum("nij,nj->i", h, z) / n
            self._x_star = la.solve(mean_h, hz, assume_a="pos")
            self._mean_h = mean_h
        self._strong_convexity = mu
        self.data = ClientData(centers=z, hessians=h)

    @staticmethod
    def _check_mean_definite(lam_min: float, lam_max: float) -> None:
        if not (lam_max > 0 and lam_min > 1e-12 * lam_max):
            raise ValueError(
                "hessians: the average Hessian (1/N) sum_i H_i must be positive definite so "
                f"that x_star exists; its eigenvalues range over [{lam_min:.3g}, {lam_max:.3g}]"
            )

    # ----------------------------------------------------------------------- properties
    @property
    def centers(self) -> Float[np.ndarray, "n d"]:
        """Z, shape (N, d): row i is the minimiser z_i of F_i."""
        return self.data.like(np.float64)["centers"]

    @property
    def hessians(self) -> Float[np.ndarray, "n d"] | Float[np.ndarray, "n d d"]:
        """The H_i: (N, d) diagonals when :attr:`diagonal`, else (N, d, d)."""
        return self.data.like(np.float64)["hessians"]

    def stacked(self) -> dict:
        """The data as the constructor takes it (``Quadratic(**problem.stacked())``
        rebuilds the problem): ``centers`` (N, d), the z_i, and ``hessians``, the H_i
        ((N, d) diagonals when :attr:`diagonal`, else (N, d, d)); client i's gradient is
        H_i (x - z_i). Fresh copies."""
        return {"centers": np.array(self.centers), "hessians": np.array(self.hessians)}

    @property
    def diagonal(self) -> bool:
        """Whether every H_i is diagonal (stored as its diagonal)."""
        return self._diagonal

    def affine_gradients(
        self,
    ) -> tuple[Float[np.ndarray, "n d"] | Float[np.ndarray, "n d d"], Float[np.ndarray, "n d"]]:
        """Every client's gradient as an affine map, grad F_i(x) = H_i x - c_i, in the
        compact form of :class:`~stochmix.protocols.AffineGradientProblem`: ``(H, c)``
        with ``H`` the :attr:`hessians` ((N, d) diagonals when :attr:`diagonal`, else
        (N, d, d); read-only) and ``c[i] = H_i z_i`` (N, d), in float64. O(N d) for
        diagonal Hessians (:meth:`hessians_and_linear_terms` writes them out in full)."""
        data = self.data.like(np.float64)
        h, z = data["hessians"], data["centers"]
        c = h * z if self._diagonal else np.einsum("kij,kj->ki", h, z)
        h = h.view()
        h.flags.writeable = False
        return h, c

    def hessians_and_linear_terms(
        self,
    ) -> tuple[Float[np.ndarray, "n d d"], Float[np.ndarray, "n d"]]:
        """Every client's gradient as an affine map, grad F_i(x) = H_i x - c_i.

        The same contract as :meth:`LeastSquares.hessians_and_linear_terms
        <stochmix.problems.LeastSquares.hessians_and_linear_terms>`: returns ``(H, c)``
        with ``H[i]`` the full Hessian H_i of shape (N, d, d) (a diagonal H_i written out as
        ``diag(hessians[i])``) and ``c[i] = H_i z_i`` of shape (N, d), in float64 (fresh
        arrays), so that ``einsum("nij,nj->ni", H, x) - c`` is every client's gradient.
        Costs O(N d^2) memory even for diagonal Hessians; :attr:`hessians` and
        :attr:`centers` give them in O(N d) (``c_i = hessians[i] * centers[i]`` there).
        """
        data = self.data.like(np.float64)
        h, z = data["hessians"], data["centers"]
        n, d = self.n_clients, self.dim
        if self._diagonal:
            full = np.zeros((n, d, d))
            full[:, np.arange(d), np.arange(d)] = h
            return full, h * z
        return h.copy(), np.einsum("nij,nj->ni", h, z)

    @property
    def x_star(self) -> Float[np.ndarray, " d"]:
        """x_star = (sum_i H_i)^{-1} sum_i H_i z_i, shape (d,)."""
        return self._x_star

    @property
    def smoothness(self) -> float:
        """L = max_i lambda_max(H_i)."""
        return self._smoothness

    @property
    def strong_convexity(self) -> float:
        """mu = lambda_min((1/N) sum_i H_i)."""
        return self._strong_convexity

    # ----------------------------------------------------------------------- evaluation
    def gradient_formula(self, xp, data: dict, idx, x):
        """H_c (x_t - z_c) with c = idx[t]: O(d) per row for diagonal H, O(d^2) for full."""
        if not self._diagonal:
            return hessian_products(xp, data["hessians"], data["centers"], idx, x, after=False)
        diff = x - client_rows(xp, data["centers"], idx)
        diff *= client_rows(xp, data["hessians"], idx)  # in place: one temporary, not two
        return diff

    def row_gradient(self, dtype):
        from . import kernels

        data = self.data.like(dtype)
        kernel = kernels.quadratic_diagonal if self._diagonal else kernels.quadratic_full
        return kernel, kernels.fetch_two, (data["hessians"], data["centers"])

    def chunk_cost(self) -> int:
        return self.dim if self._diagonal else self.dim * self.dim

    def objective(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) = (1/N) sum_i 1/2 (x - z_i)^T H_i (x - z_i), computed in float64."""
        x = self._check_point(x).astype(np.float64, copy=False)
        data = self.data.like(np.float64)
        diff = x - data["centers"]
        if self._diagonal:
            return float(0.5 * np.einsum("nj,nj->", data["hessians"], diff * diff) / self.n_clients)
        return float(0.5 * np.einsum("ni,nij,nj->", diff, data["hessians"], diff) / self.n_clients)

    def _mean_hessian_times(self, e: np.ndarray) -> np.ndarray:
        """Hbar e for e of shape (d,), Hbar = (1/N) sum_i H_i; O(d) diagonal, O(d^2) full."""
        return self._mean_h * e if self._diagonal else self._mean_h @ e

    def gradient(self, x: Float[np.ndarray, " d"]) -> Float[np.ndarray, " d"]:
        """grad f(x) = Hbar (x - x_star) with Hbar = (1/N) sum_i H_i; O(d) or O(d^2)."""
        x = self._check_point(x)
        g = self._mean_hessian_times(x.astype(np.float64, copy=False) - self._x_star)
        return g.astype(x.dtype, copy=False)

    def objective_gap(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) - f(x_star) = 1/2 (x - x_star)^T Hbar (x - x_star); O(d) or O(d^2)."""
        e = self._check_point(x).astype(np.float64, copy=False) - self._x_star
        return float(0.5 * (e @ self._mean_hessian_times(e)))

    def closed_form_rows(self, name: str, models: Float[np.ndarray, "b d"]):
        """:meth:`objective_gap` (``"objective"``), the norm of :meth:`gradient`
        (``"gradient_norm"``) or the gradient (``"gradient"``) at every row of ``models``
        (B, d) (see :meth:`Problem.closed_form_rows`): O(B d) or O(B d^2)."""
        errors = np.asarray(models, dtype=np.float64) - self._x_star
        hessian = self._mean_h * errors if self._diagonal else errors @ self._mean_h.T
        return metric_rows(name, errors, hessian)

    def client_objectives(self, points: Float[np.ndarray, "n d"]) -> Float[np.ndarray, " n"]:
        """F_i(points[i]) = 1/2 (points[i] - z_i)^T H_i (points[i] - z_i), shape (N,)."""
        pts = self._check_all_points(points)
        data = self.data.like(pts.dtype)
        diff = pts - data["centers"]
        if self._diagonal:
            return 0.5 * np.einsum("nj,nj->n", data["hessians"], diff * diff)
        return 0.5 * np.einsum("ni,nij,nj->n", diff, data["hessians"], diff)

    # ----------------------------------------------------------------------- generation
    @classmethod
    def random(
        cls,
        n_clients: int,
        dim: int,
        *,
        diagonal: bool = True,
        condition: float = 10.0,
        heterogeneity: float = 1.0,
        seed=None,
    ) -> Quadratic:
        """A random instance with every Hessian eigenvalue in [1, condition].

        Eigenvalues are log-uniform on [1, condition]; full Hessians (``diagonal=False``)
        rotate them by a Haar-random orthogonal matrix per client. Centers are
        z_i ~ heterogeneity * N(0, I_d), so ``heterogeneity=0`` gives identical minimisers.
        Everything is drawn in a few vectorized calls (N = 10^6, d = 10 diagonal takes well
        under a second). ``seed``: int, SeedSequence, Generator or None.
        """
        n = as_int(n_clients, "n_clients", minimum=1)
        d = as_int(dim, "dim", minimum=1)
        diagonal = as_bool(diagonal, "diagonal")
        kappa = as_float(condition, "condition")
        if kappa < 1:
            raise ValueError(f"condition must be >= 1, got {kappa}")
        spread = as_float(heterogeneity, "heterogeneity", nonnegative=True)
        rng = make_rng(seed)
        eig = rng.uniform(0.0, np.log(kappa), size=(n, d))
        np.exp(eig, out=eig)  # in place: no (N, d) temporary at ten million clients
        centers = rng.standard_normal((n, d))
        centers *= spread
        if diagonal:
            hess = eig
        else:
            q, r = np.linalg.qr(rng.standard_normal((n, d, d)))
            q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]  # Haar-distributed
            hess = np.einsum("nij,nj,nkj->nik", q, eig, q)
            hess = 0.5 * (hess + hess.swapaxes(1, 2))
        obj = cls.__new__(cls)
        obj._setup(centers, hess, copy=False)  # fresh arrays: no defensive copy needed
        return obj


def _sum_of_products(h: np.ndarray, z: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """``(h * z).sum(axis=0)`` for (n, d) arrays, the same bits (rows are added in order),
    without an (n, d) temporary: chunk by chunk, each chunk's sum starting from the total
    so far."""
    total = np.zeros(h.shape[1], dtype=np.result_type(h, z))
    for lo in range(0, h.shape[0], chunk):
        part = h[lo : lo + chunk] * z[lo : lo + chunk]
        total = np.concatenate([total[None], part]).sum(axis=0)
    return total
