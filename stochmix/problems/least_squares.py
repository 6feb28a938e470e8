"""Least-squares (ridge) clients: F_i(x) = 1/2 ||A_i x - b_i||^2 + reg/2 ||x||^2."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import Float, Int, Real

from .._arrays import namespace
from .._lazy import lazy_module
from .._validate import as_float, as_int, check_finite, choice, make_rng
from ._clients import check_counts, random_counts, stack_clients
from ._common import (
    NUMPY_NAMESPACE,
    ClientData,
    client_rows,
    float_array,
    hessian_products,
    metric_rows,
)
from .base import Problem

__all__ = [
    "LeastSquares",
]

la = lazy_module("scipy.linalg")

_FORMS = ("auto", "padded", "gram")


class LeastSquares(Problem):
    """N least-squares clients with an optional ridge term (``reg > 0`` is ridge regression).

    Client i holds A_i of shape (n_i, d) and b_i of shape (n_i,), and

        F_i(x) = 1/2 ||A_i x - b_i||^2 + reg/2 ||x||^2,
        grad F_i(x) = A_i^T (A_i x - b_i) + reg x,
        f(x) = (1/N) sum_i F_i(x).

    The minimiser solves the normal equations of f,

        (sum_i A_i^T A_i + N reg I) x_star = sum_i A_i^T b_i,

    and must be unique: with ``reg = 0`` a singular sum_i A_i^T A_i (for instance fewer rows in
    all than d) is refused.

    Args:
        features: one array (N, n, d) (every client holds n rows), or a sequence of N arrays
            A_i of shape (n_i, d) (clients may hold different numbers of rows, at least one).
        targets: (N, n), or a sequence of N vectors b_i of shape (n_i,), matching ``features``.
        reg: the ridge coefficient, >= 0.
        form: how :meth:`gradients` is vectorized. ``"padded"`` keeps every A_i padded with
            zero rows to (n_max, d) (zero rows add nothing) and costs O(m n_max d);
            ``"gram"`` keeps A_i^T A_i (d, d) and A_i^T b_i (d,) and costs O(m d^2);
            ``"auto"`` (default) takes ``"gram"`` when n_max > d, else ``"padded"``.

    Constants: ``smoothness`` L = max_i ||A_i||_2^2 + reg (computed on first use),
    ``strong_convexity`` mu = lambda_min((1/N) sum_i A_i^T A_i) + reg.

    Metrics in closed form, with Hbar = (1/N) sum_i A_i^T A_i + reg I:
    f(x) - f(x_star) = 1/2 (x - x_star)^T Hbar (x - x_star) and grad f(x) = Hbar (x - x_star),
    in O(d^2) with no pass over the clients' rows.

    Raises:
        ValueError: mismatched shapes or lengths, no rows for a client, values that are not
            finite, a negative ``reg``, or a singular problem with ``reg = 0``.
        TypeError: arrays that do not hold real numbers, or ``features`` of the wrong kind.
    """

    closed_form_metrics = frozenset({"objective", "gradient_norm"})

    def __init__(
        self,
        features: Real[np.ndarray, "n k d"] | Sequence[np.ndarray],
        targets: Real[np.ndarray, "n k"] | Sequence[np.ndarray],
        reg: float = 0.0,
        *,
        form: str = "auto",
    ):
        rows, rhs, counts = stack_clients(
            features, targets, "targets", floats=True, require_array=True
        )
        self._setup(rows, rhs, counts, reg, form)

    @classmethod
    def from_stacked(
        cls,
        features: Real[np.ndarray, "r d"],
        targets: Real[np.ndarray, " r"],
        counts: Int[np.ndarray, " n"],
        reg: float = 0.0,
        *,
        form: str = "auto",
    ) -> LeastSquares:
        """Build from all clients' rows stacked client after client.

        ``features`` (R, d) and ``targets`` (R,) hold A_0, A_1, ... and b_0, b_1, ... one
        after the other; ``counts`` (N,) gives n_i >= 1 with sum_i n_i = R. Avoids building
        N separate arrays for large N.
        """
        a = float_array(features, "features").astype(np.float64)
        if a.ndim != 2 or a.shape[1] < 1:
            raise ValueError(f"features must have shape (rows, dim), got {a.shape}")
        b = float_array(targets, "targets").astype(np.float64)
        if b.shape != (a.shape[0],):
            raise ValueError(f"targets must have shape ({a.shape[0]},), got {b.shape}")
        cnt = check_counts(counts, a.shape[0])
        obj = cls.__new__(cls)
        obj._setup(a, b, cnt, reg, form)
        return obj

    def _setup(self, rows: np.ndarray, rhs: np.ndarray, counts: np.ndarray, reg, form) -> None:
        reg = as_float(reg, "reg", nonnegative=True)
        form = choice(form, "form", _FORMS)
        check_finite(rows, "features")
        check_finite(rhs, "targets")
        n, d = counts.shape[0], rows.shape[1]
        super().__init__(n, d)
        self._reg = reg
        self._counts = counts
        self._offsets = np.concatenate([[0], np.cumsum(counts)])
        self._rows = rows
        self._rhs = rhs
        n_max = int(counts.max())
        if form == "auto":
            form = "gram" if n_max > d else "padded"
        self._form = form

        # Normal equations of f: (sum A^T A + N reg I) x = sum A^T b.
        gram_sum = rows.T @ rows
        rhs_sum = rows.T @ rhs
        normal = gram_sum + (n * reg) * np.eye(d)
        eig = np.linalg.eigvalsh(normal)
        if not (eig[-1] > 0 and eig[0] > 1e-12 * eig[-1]):
            raise ValueError(
                "features: the least-squares problem is singular (sum_i A_i^T A_i + N reg I has "
                f"eigenvalues in [{eig[0]:.3g}, {eig[-1]:.3g}] with reg={reg}), so x_star is "
                "not unique; give more rows in all than the dimension, or reg > 0"
            )
        self._x_star = la.solve(normal, rhs_sum, assume_a="pos")
        self._mean_gram = gram_sum / n
        self._strong_convexity = float(eig[0]) / n
        self._smoothness: float | None = None

        if form == "padded":
            if (counts == n_max).all():
                padded_a = rows.reshape(n, n_max, d)
                padded_b = rhs.reshape(n, n_max)
            else:
                owner = np.repeat(np.arange(n), counts)
                pos = np.arange(rows.shape[0]) - self._offsets[owner]
                padded_a = np.zeros((n, n_max, d))
                padded_b = np.zeros((n, n_max))
                padded_a[owner, pos] = rows
                padded_b[owner, pos] = rhs
            self.data = ClientData(a=padded_a, b=padded_b)
        else:
            gram = np.empty((n, d, d))
            atb = np.empty((n, d))
            for clients, a, b in self._groups():
                gram[clients] = np.matmul(a.swapaxes(1, 2), a)
                atb[clients] = np.einsum("knd,kn->kd", a, b)
            self.data = ClientData(gram=gram, atb=atb)

    def _groups(self):
        """Yield (clients, A (k, n, d), b (k, n)) for each distinct row count n."""
        values, inverse = np.unique(self._counts, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(values)))])
        for j, n_rows in enumerate(values):
            clients = order[bounds[j] : bounds[j + 1]]
            # Bound the temporaries by processing large groups in pieces.
            step = max(1, (1 << 22) // (int(n_rows) * self.dim))
            for s in range(0, clients.size, step):
                part = clients[s : s + step]
                idx = self._offsets[part][:, None] + np.arange(n_rows)
                yield part, self._rows[idx], self._rhs[idx]

    def stacked(self) -> dict:
        """The data as :meth:`from_stacked` takes it (``LeastSquares.from_stacked(
        **problem.stacked())`` rebuilds the problem): ``features`` (R, d), the A_i stacked
        client after client, ``targets`` (R,), the b_i, ``counts`` (N,), the n_i (sum R),
        and ``reg``. Client i's gradient is A_i^T (A_i x - b_i) + reg x whichever
        :attr:`form` the gradients use. Fresh copies."""
        return {
            "features": self._rows.copy(),
            "targets": self._rhs.copy(),
            "counts": self._counts.copy(),
            "reg": self._reg,
        }

    # ----------------------------------------------------------------------- properties
    @property
    def reg(self) -> float:
        """The ridge coefficient of every F_i."""
        return self._reg

    @property
    def form(self) -> str:
        """``"padded"`` or ``"gram"``: how :meth:`gradients` is vectorized."""
        return self._form

    @property
    def rows_per_client(self) -> Int[np.ndarray, " n"]:
        """n_i, shape (N,)."""
        return self._counts

    @property
    def x_star(self) -> Float[np.ndarray, " d"]:
        """The solution of (sum_i A_i^T A_i + N reg I) x = sum_i A_i^T b_i, shape (d,)."""
        return self._x_star

    @property
    def strong_convexity(self) -> float:
        """mu = lambda_min((1/N) sum_i A_i^T A_i) + reg."""
        return self._strong_convexity

    @property
    def smoothness(self) -> float:
        """L = max_i ||A_i||_2^2 + reg (largest eigenvalue of any client's Hessian)."""
        if self._smoothness is None:
            top = 0.0
            for _, a, _ in self._groups():
                small = a @ a.swapaxes(1, 2) if a.shape[1] <= a.shape[2] else a.swapaxes(1, 2) @ a
                top = max(top, float(np.linalg.eigvalsh(small)[:, -1].max()))
            self._smoothness = top + self._reg
        return self._smoothness

    def hessians_and_linear_terms(
        self,
    ) -> tuple[Float[np.ndarray, "n d d"], Float[np.ndarray, "n d"]]:
        """Every client's gradient as an affine map, grad F_i(x) = H_i x - c_i.

        Returns ``(H, c)`` with ``H[i] = A_i^T A_i + reg I`` of shape (N, d, d) and
        ``c[i] = A_i^T b_i`` of shape (N, d), in float64 (fresh arrays). Costs O(N d^2) memory;
        used by :mod:`stochmix.analysis` to build exact linear operators.
        """
        n, d = self.n_clients, self.dim
        if self._form == "gram":
            data = self.data.like(np.float64)
            gram, atb = data["gram"].copy(), data["atb"].copy()
        else:
            gram, atb = np.empty((n, d, d)), np.empty((n, d))
            for clients, a, b in self._groups():
                gram[clients] = np.matmul(a.swapaxes(1, 2), a)
                atb[clients] = np.einsum("knd,kn->kd", a, b)
        if self._reg:
            gram += self._reg * np.eye(d)
        return gram, atb

    def affine_gradients(self) -> tuple[Float[np.ndarray, "n d d"], Float[np.ndarray, "n d"]]:
        """Every client's gradient as an affine map, grad F_i(x) = H_i x - c_i (the
        :class:`~stochmix.protocols.AffineGradientProblem` contract): the full Hessians
        and linear terms of :meth:`hessians_and_linear_terms`."""
        return self.hessians_and_linear_terms()

    def sampled_gradients(self, clients, points, picks, scale):
        """Row t: ``scale[t]`` times the sum over the rows ``picks[t]`` of client c =
        ``clients[t]`` of a_r (a_r . x_t - b_r), plus reg x_t; with ``scale[t] = n_c / b``
        the minibatch estimate of grad F_c (the
        :class:`~stochmix.protocols.FiniteSumProblem` contract)."""
        xp = NUMPY_NAMESPACE if isinstance(points, np.ndarray) else namespace(points)
        return self._sampled_gradient_formula(xp, clients, points, picks, scale)

    # ----------------------------------------------------------------------- evaluation
    def gradient_formula(self, xp, data: dict, idx, x):
        """A_c^T (A_c x_t - b_c) + reg x_t with c = idx[t], from the padded rows (O(n_max d)
        per row) or from A_c^T A_c and A_c^T b_c (O(d^2) per row)."""
        if self._form != "padded":
            return self._gram_formula(xp, data, idx, x)
        a = client_rows(xp, data["a"], idx)
        r = xp.einsum("mkd,md->mk", a, x) - client_rows(xp, data["b"], idx)
        g = xp.einsum("mkd,mk->md", a, r)
        if self._reg:
            g = g + self._reg * x
        return g

    def _gram_formula(self, xp, data: dict, idx, x):
        """A_c^T A_c x_t - A_c^T b_c + reg x_t from ``data["gram"]`` and ``data["atb"]``:
        one pass over the Hessians (:func:`~stochmix.problems._common.hessian_products`)."""
        g = hessian_products(xp, data["gram"], data["atb"], idx, x, after=True)
        if self._reg:
            g = g + self._reg * x
        return g

    #: Bytes of per-client Hessians A_i^T A_i (N d^2 floats) that a problem of the
    #: ``"padded"`` form may keep to compute the gradients of whole blocks of clients.
    hessian_budget = 1 << 29

    def _slice_formula(self, dtype) -> tuple:
        """Gradients of consecutive clients (every peer of a decentralized block) from the
        Hessians A_i^T A_i and A_i^T b_i, one einsum, where that costs no more flops than
        the padded rows (d <= 2 n_max: d^2 against 2 n_max d per client) and the Hessians
        fit :attr:`hessian_budget`; they are computed on first use and kept. The same
        gradients as :meth:`gradient_formula` to rounding (A^T (A x - b) and (A^T A) x -
        A^T b add in another order: about 1e-16 relative). Otherwise the padded rows."""
        d = self.dim
        if (
            self._form == "padded"
            and type(self).gradient_formula is LeastSquares.gradient_formula
            and d <= 2 * (self.chunk_cost() // d)  # n_max, kept
            and self.n_clients * d * d * np.dtype(dtype).itemsize <= self.hessian_budget
        ):
            hessians = self.__dict__.get("_hessians")
            if hessians is None:
                n = self.n_clients
                gram, atb = np.empty((n, d, d)), np.empty((n, d))
                for clients, a, b in self._groups():
                    gram[clients] = np.matmul(a.swapaxes(1, 2), a)
                    atb[clients] = np.einsum("knd,kn->kd", a, b)
                hessians = self._hessians = ClientData(gram=gram, atb=atb)
            return self._gram_formula, hessians.like(dtype), d * d
        return super()._slice_formula(dtype)

    def row_gradient(self, dtype):
        from . import kernels

        data = self.data.like(dtype)
        if self._form == "padded":
            data = (data["a"], data["b"], float(self._reg))
            return kernels.least_squares_padded, kernels.fetch_two, data
        data = (data["gram"], data["atb"], float(self._reg))
        return kernels.least_squares_gram, kernels.fetch_two, data

    def sampled_row_gradient(self, dtype):
        from . import kernels

        data = self._samples.like(dtype)
        fixed = (data["rows"], data["rhs"], data["offsets"], float(self._reg))
        return kernels.least_squares_sampled, kernels.fetch_sample, fixed

    def _sampled_gradient_formula(self, xp, idx, x, picks, scale):
        """(n_c / b) sum_{r in picks[t]} a_r (a_r . x_t - b_r) + reg x_t, c = idx[t]: the
        minibatch estimate from the rows ``picks`` (positions within each client)."""
        data = self._samples.like(x)
        rows = xp.take(data["offsets"], idx, axis=0)[:, None] + picks
        a = xp.take(data["rows"], xp.reshape(rows, (-1,)), axis=0)
        a = xp.reshape(a, (*picks.shape, self.dim))
        b = xp.reshape(xp.take(data["rhs"], xp.reshape(rows, (-1,)), axis=0), picks.shape)
        r = xp.einsum("mbd,md->mb", a, x) - b
        g = scale[:, None] * xp.einsum("mbd,mb->md", a, r)
        if self._reg:
            g = g + self._reg * x
        return g

    @property
    def _samples(self) -> ClientData:
        if getattr(self, "_sample_cache", None) is None:
            self._sample_cache = ClientData(
                rows=self._rows, rhs=self._rhs, offsets=self._offsets[:-1].copy()
            )
        return self._sample_cache

    def chunk_cost(self) -> int:
        found = self.__dict__.get("_chunk_cost")  # asked every round: kept
        if found is None:
            n_max = int(self._counts.max())
            found = n_max * self.dim if self._form == "padded" else self.dim * self.dim
            self._chunk_cost = found
        return found

    def objective(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) = 1/(2N) sum_i ||A_i x - b_i||^2 + reg/2 ||x||^2, computed in float64."""
        x = self._check_point(x).astype(np.float64, copy=False)
        r = self._rows @ x - self._rhs
        return float(0.5 * (r @ r) / self.n_clients + 0.5 * self._reg * (x @ x))

    def _mean_hessian_times(self, e: np.ndarray) -> np.ndarray:
        """Hbar e = (1/N) sum_i A_i^T A_i e + reg e for e of shape (d,); O(d^2)."""
        return self._mean_gram @ e + self._reg * e

    def gradient(self, x: Float[np.ndarray, " d"]) -> Float[np.ndarray, " d"]:
        """grad f(x) = Hbar (x - x_star), Hbar = (1/N) sum_i A_i^T A_i + reg I; O(d^2)."""
        x = self._check_point(x)
        g = self._mean_hessian_times(x.astype(np.float64, copy=False) - self._x_star)
        return g.astype(x.dtype, copy=False)

    def objective_gap(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) - f(x_star) = 1/2 (x - x_star)^T Hbar (x - x_star); O(d^2)."""
        e = self._check_point(x).astype(np.float64, copy=False) - self._x_star
        return float(0.5 * (e @ self._mean_hessian_times(e)))

    def closed_form_rows(self, name: str, models: Float[np.ndarray, "b d"]):
        """:meth:`objective_gap` (``"objective"``), the norm of :meth:`gradient`
        (``"gradient_norm"``) or the gradient (``"gradient"``) at every row of ``models``
        (B, d) (see :meth:`Problem.closed_form_rows`): O(B d^2)."""
        errors = np.asarray(models, dtype=np.float64) - self._x_star
        return metric_rows(name, errors, errors @ self._mean_gram + self._reg * errors)

    def client_objectives(self, points: Float[np.ndarray, "n d"]) -> Float[np.ndarray, " n"]:
        """F_i(points[i]) = 1/2 ||A_i points[i] - b_i||^2 + reg/2 ||points[i]||^2, shape (N,)."""
        pts = self._check_all_points(points)
        owner = np.repeat(np.arange(self.n_clients), self._counts)
        r = np.einsum("rd,rd->r", self._rows, pts[owner].astype(np.float64)) - self._rhs
        val = 0.5 * np.bincount(owner, weights=r * r, minlength=self.n_clients)
        val += 0.5 * self._reg * np.einsum("nd,nd->n", pts, pts)
        return val.astype(pts.dtype, copy=False)

    # ----------------------------------------------------------------------- generation
    @classmethod
    def random(
        cls,
        n_clients: int,
        dim: int,
        rows_per_client: int | tuple[int, int] = 10,
        *,
        reg: float = 0.0,
        heterogeneity: float = 1.0,
        noise: float = 0.1,
        seed=None,
        form: str = "auto",
        support: int | None = None,
    ) -> LeastSquares:
        """A random heterogeneous instance.

        A_i has i.i.d. N(0, 1) entries; client i has its own ground truth
        x_i = x_0 + heterogeneity * u_i with x_0, u_i ~ N(0, I_d), and
        b_i = A_i x_i + noise * e_i with e_i ~ N(0, I). ``rows_per_client`` is a fixed n_i
        or a pair (low, high): each n_i uniform on low..high inclusive. Strongly convex
        (almost surely) when the rows in all number at least d, or when ``reg > 0``.
        ``support`` = s < d keeps s coordinates (drawn at random) of every x_i and zeroes the
        others: sparse ground truths, for LASSO problems (:class:`~stochmix.problems.Composite`
        with :class:`~stochmix.problems.L1`); the draws of the other arrays are unchanged.
        """
        n = as_int(n_clients, "n_clients", minimum=1)
        d = as_int(dim, "dim", minimum=1)
        spread = as_float(heterogeneity, "heterogeneity", nonnegative=True)
        sigma = as_float(noise, "noise", nonnegative=True)
        reg = as_float(reg, "reg", nonnegative=True)
        rng = make_rng(seed)
        counts = random_counts(rows_per_client, n, rng)
        total = int(counts.sum())
        if reg == 0 and total < d:
            raise ValueError(
                f"rows_per_client: {total} rows in all for dim = {d} make the problem singular; "
                f"ask for at least {d} rows in all (rows_per_client * n_clients), or reg > 0"
            )
        truth = rng.standard_normal(d) + spread * rng.standard_normal((n, d))
        rows = rng.standard_normal((total, d))
        if support is not None:
            keep = as_int(support, "support", minimum=0)
            if keep > d:
                raise ValueError(f"support must be at most dim = {d}, got {support!r}")
            mask = np.zeros(d)
            mask[np.random.default_rng(rng.integers(2**63)).permutation(d)[:keep]] = 1.0
            truth = truth * mask
        owner = np.repeat(np.arange(n), counts)
        rhs = np.einsum("rd,rd->r", rows, truth[owner]) + sigma * rng.standard_normal(total)
        return cls.from_stacked(rows, rhs, counts, reg, form=form)
