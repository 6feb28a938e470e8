"""L2-regularized logistic regression clients, binary (sigmoid) or multinomial (softmax).

Client i holds n_i samples (a_r, y_r), r in S_i, and its objective is the MEAN loss over its
samples plus the ridge term,

    F_i(x) = (1/n_i) sum_{r in S_i} loss(x; a_r, y_r) + reg/2 ||x||^2,
    f(x)   = (1/N) sum_i F_i(x),

so every client counts the same in f whatever its size (with equal n_i, f is the pooled
empirical risk). The losses:

* binary (labels in {0, 1}, model x of dimension p):
  loss = log(1 + exp(a.x)) - y a.x, grad = a (sigmoid(a.x) - y);
* multinomial (labels in {0..C-1}, model x of dimension p C, the flattened row-major
  (p, C) weight matrix W, W[j, c] = x[j C + c]): loss = logsumexp(a W) - (a W)_y (softmax
  cross-entropy), grad = a (softmax(a W) - e_y)^T, flattened the same way.

p = d features, or d + 1 with ``intercept=True`` (a constant-1 feature appended as the LAST
column, so the intercept is row p-1 of W; it is regularized like the other weights, which keeps
f reg-strongly convex).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from jaxtyping import Float, Int, Real

from .._arrays import Array, namespace, to_numpy
from .._lazy import lazy_module
from .._validate import as_bool, as_float, as_int, as_labels, check_finite, make_rng
from ._clients import check_counts, random_counts, stack_clients
from ._common import NUMPY_NAMESPACE, ClientData, client_rows, float_array
from ._common import sigmoid as _sigmoid
from ._common import sigmoid_np as _sigmoid_np
from ._common import softmax_np as _softmax_np
from .base import Problem

__all__ = [
    "Logistic",
]

la = lazy_module("scipy.linalg")
spla = lazy_module("scipy.sparse.linalg")

# Newton's method stops at ||grad f(x)|| <= _NEWTON_TOL ||grad f(0)||; x_star is trusted to
# _ACCEPT_TOL (a RuntimeWarning says so when the solver could not get there).
_NEWTON_TOL = 1e-14
_ACCEPT_TOL = 1e-12
# Above this model dimension the Newton systems are solved matrix-free by conjugate gradients.
_DENSE_HESSIAN_MAX = 2500
_ROW_CHUNK = 1 << 22  # elements of the (rows, dim) temporaries in the Hessian


class Logistic(Problem):
    """N logistic-regression clients with an L2 term (see the module docstring for F_i).

    Args:
        features: one array (N, n, d) (every client holds n samples) or a sequence of N
            arrays A_i of shape (n_i, d), at least one row each (clients may be ragged).
        labels: (N, n) or a sequence of N vectors y_i of shape (n_i,) of integer class
            labels (integral floats are accepted, booleans are not), in {0, 1} for the
            binary model and in {0..C-1} for the multinomial one.
        reg: the L2 coefficient. ``reg > 0`` makes f reg-strongly convex with a unique
            minimiser; ``reg = 0`` is refused unless ``allow_no_minimiser=True`` (then
            ``x_star`` is None: separable data have no minimiser, and the softmax model is
            never identifiable without the ridge term). ``reg < 0`` is always refused.
        n_classes: C. ``None`` takes max(label) + 1, at least 2. C = 2 gives the binary
            (sigmoid) model unless ``softmax=True``; C > 2 the multinomial model.
        intercept: append a constant-1 feature (p = d + 1); it is regularized too.
        softmax: force the multinomial model (``True``, also for C = 2) or the binary one
            (``False``, needs C = 2); ``None`` (default) decides from C.
        allow_no_minimiser: accept ``reg = 0``.

        ``intercept``, ``softmax`` and ``allow_no_minimiser`` are ``True`` or ``False``
        (``softmax`` also ``None``); other values, truthy or not, are a ``TypeError``.

    Attributes:
        dim: p for the binary model, p C for the multinomial one.

    Constants: ``strong_convexity`` mu = reg (a lower bound; the losses add curvature but
    none that holds uniformly), ``smoothness`` L = max_i ||A_i||_2^2 / (4 n_i) + reg for the
    binary model (sigmoid' <= 1/4) and max_i ||A_i||_2^2 / (2 n_i) + reg for the multinomial
    one (Böhning's bound: the softmax Hessian diag(q) - q q^T <= (1/2)(I - 11^T/C), whose
    norm is 1/2), A_i including the intercept column. Both bound every grad F_i, hence
    grad f.

    ``x_star`` is computed on first use by Newton's method with the exact Hessian (dense for
    dim <= 2500, matrix-free conjugate gradients above) and a backtracking line search, from
    x = 0 to ||grad f(x_star)|| <= 1e-14 ||grad f(0)|| where rounding allows (a
    RuntimeWarning is given above 1e-12); ``solver_info`` reports what it reached.

    Raises:
        ValueError: mismatched shapes, clients without rows, values that are not finite,
            labels out of range or not integral, ``reg < 0``, ``reg = 0`` without
            ``allow_no_minimiser``, ``softmax=False`` with C > 2.
        TypeError: arrays that do not hold real numbers.
    """

    def __init__(
        self,
        features: Real[np.ndarray, "n k d"] | Sequence[np.ndarray],
        labels: Real[np.ndarray, "n k"] | Sequence[np.ndarray],
        reg: float,
        n_classes: int | None = None,
        *,
        intercept: bool = False,
        softmax: bool | None = None,
        allow_no_minimiser: bool = False,
    ):
        rows, y, counts = stack_clients(features, labels, "labels", floats=False)
        self._setup(rows, y, counts, reg, n_classes, intercept, softmax, allow_no_minimiser)

    @classmethod
    def from_stacked(
        cls,
        features: Real[np.ndarray, "r d"],
        labels: Real[np.ndarray, " r"],
        counts: Int[np.ndarray, " n"],
        reg: float,
        n_classes: int | None = None,
        *,
        intercept: bool = False,
        softmax: bool | None = None,
        allow_no_minimiser: bool = False,
    ) -> Logistic:
        """Build from all clients' samples stacked client after client.

        ``features`` (R, d) and ``labels`` (R,) hold client 0's samples, then client 1's,
        ...; ``counts`` (N,) gives n_i >= 1 with sum_i n_i = R. The other arguments are as
        for the constructor.
        """
        a = float_array(features, "features").astype(np.float64)
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
            raise ValueError(
                f"features must have shape (rows, dim) with no zero size, got {a.shape}"
            )
        y = as_labels(labels, "labels", ndim=None, integral_floats=True)
        if y.shape != (a.shape[0],):
            raise ValueError(f"labels must have shape ({a.shape[0]},), got {y.shape}")
        cnt = check_counts(counts, a.shape[0])
        obj = cls.__new__(cls)
        obj._setup(a, y, cnt, reg, n_classes, intercept, softmax, allow_no_minimiser)
        return obj

    def _setup(self, rows, labels, counts, reg, n_classes, intercept, softmax, allow) -> None:
        intercept = as_bool(intercept, "intercept")
        softmax = as_bool(softmax, "softmax", optional=True)
        allow = as_bool(allow, "allow_no_minimiser")
        reg = as_float(reg, "reg")
        if reg < 0:
            raise ValueError(f"reg must be >= 0 (a negative ridge term is not convex), got {reg}")
        if reg == 0 and not allow:
            raise ValueError(
                "reg must be > 0 for a strongly convex logistic problem with a unique minimiser "
                "(separable data have none, the softmax model is not identifiable); pass "
                "allow_no_minimiser=True to accept reg = 0 (x_star is then None)"
            )
        check_finite(rows, "features")
        y = as_labels(labels, "labels", ndim=None, integral_floats=True)
        top = int(y.max())
        if n_classes is None:
            c = max(2, top + 1)
        else:
            c = as_int(n_classes, "n_classes", minimum=2)
            if top >= c:
                raise ValueError(f"labels must lie in [0, {c}) (n_classes={c}), got label {top}")
        if softmax is None:
            softmax = c > 2
        elif not softmax and c > 2:
            raise ValueError(f"softmax=False (the binary model) needs 2 classes, got n_classes={c}")
        self._intercept = bool(intercept)
        if self._intercept:
            rows = np.concatenate([rows, np.ones((rows.shape[0], 1))], axis=1)
        n, p = counts.shape[0], rows.shape[1]
        self._softmax = bool(softmax)
        self._n_classes = c
        self._width = c if self._softmax else 1  # columns of W
        super().__init__(n, p * self._width)
        self._p = p
        self._reg = reg
        self._counts = counts
        self._offsets = np.concatenate([[0], np.cumsum(counts)])
        self._rows = rows
        self._labels = y
        self._owner = np.repeat(np.arange(n), counts)
        # Each sample's weight in f: 1 / (N n_i).
        self._sample_weight = 1.0 / (n * counts[self._owner])
        self._x_star: np.ndarray | None = None
        self._solved = reg == 0  # nothing to solve for: x_star stays None
        self._smoothness: float | None = None
        self.solver_info: dict = {}

        # Padded per-client data for the vectorized gradients: zero rows of weight zero.
        n_max = int(counts.max())
        pos = np.arange(rows.shape[0]) - self._offsets[self._owner]
        padded_a = np.zeros((n, n_max, p))
        padded_a[self._owner, pos] = rows
        weight = np.zeros((n, n_max))
        weight[self._owner, pos] = 1.0 / counts[self._owner]
        target = self._targets(y)
        padded_t = np.zeros((n, n_max, *target.shape[1:]))
        padded_t[self._owner, pos] = target
        self.data = ClientData(a=padded_a, t=padded_t, w=weight)
        self._sample_cache: ClientData | None = None

    def _targets(self, labels: np.ndarray) -> np.ndarray:
        """The float targets of the formulas: y (R,) for binary, one-hot (R, C) for softmax."""
        if not self._softmax:
            return labels.astype(np.float64)
        onehot = np.zeros((labels.shape[0], self._n_classes))
        onehot[np.arange(labels.shape[0]), labels] = 1.0
        return onehot

    # ----------------------------------------------------------------------- properties
    @property
    def reg(self) -> float:
        """The L2 coefficient of every F_i."""
        return self._reg

    @property
    def n_classes(self) -> int:
        """C, the number of classes."""
        return self._n_classes

    @property
    def multinomial(self) -> bool:
        """True for the softmax model (dim = p C), False for the binary one (dim = p)."""
        return self._softmax

    @property
    def intercept(self) -> bool:
        """Whether a constant-1 feature is appended (the last row of W)."""
        return self._intercept

    @property
    def n_features(self) -> int:
        """p: d, plus one with the intercept."""
        return self._p

    @property
    def rows_per_client(self) -> Int[np.ndarray, " n"]:
        """n_i, shape (N,)."""
        return self._counts

    def stacked(self) -> dict[str, Any]:
        """The data as :meth:`from_stacked` takes it (``Logistic.from_stacked(**problem.
        stacked())`` rebuilds the problem): ``features`` (R, d) without the intercept
        column, ``labels`` (R,) int64, ``counts`` (N,), ``reg``, ``n_classes``,
        ``intercept``, ``softmax``, ``allow_no_minimiser``. Fresh copies."""
        out = {"features": self._rows[:, : self._p - self._intercept].copy()}  # no intercept
        out |= {"labels": self._labels.copy(), "counts": self._counts.copy(), "reg": self._reg}
        flags = self._n_classes, self._intercept, self._softmax, self._reg == 0
        names = "n_classes", "intercept", "softmax", "allow_no_minimiser"
        return out | dict(zip(names, flags, strict=True))

    @property
    def x_star(self) -> Float[np.ndarray, " d"] | None:
        """The minimiser of f, shape (dim,) (None with reg = 0); solved on first use."""
        if not self._solved:
            self._x_star = self._solve()
            self._solved = True
        return self._x_star

    @property
    def strong_convexity(self) -> float:
        """mu = reg."""
        return self._reg

    @property
    def smoothness(self) -> float:
        """L = max_i ||A_i||_2^2 / (4 n_i) + reg (binary) or / (2 n_i) + reg (softmax)."""
        if self._smoothness is None:
            a = self.data.like(np.float64)["a"]
            n_max, p = a.shape[1], a.shape[2]
            top = np.empty(self.n_clients)
            step = max(1, _ROW_CHUNK // (n_max * p + min(n_max, p) ** 2))
            for s in range(0, self.n_clients, step):
                blk = a[s : s + step]
                small = blk @ blk.swapaxes(1, 2) if n_max <= p else blk.swapaxes(1, 2) @ blk
                top[s : s + step] = np.linalg.eigvalsh(small)[:, -1]
            factor = 0.5 if self._softmax else 0.25
            self._smoothness = float((factor * top / self._counts).max()) + self._reg
        return self._smoothness

    # ----------------------------------------------------------------------- evaluation
    def gradient_formula(self, xp, data: dict, idx, x):
        """(1/n_c) sum_r a_r (sigmoid(a_r.x_t) - y_r) + reg x_t (or the softmax analogue),
        c = idx[t], over client c's padded rows (padding has weight 0); O(n_max p C) per row."""
        a = client_rows(xp, data["a"], idx)
        t = client_rows(xp, data["t"], idx)
        w = client_rows(xp, data["w"], idx)
        return self._weighted_gradient(xp, a, t, w, x)

    def sampled_gradients(self, clients, points, picks, scale):
        """Row t: ``(scale[t] / n_c) sum_k grad loss_{picks[t, k]}(x_t) + reg x_t``, c =
        ``clients[t]``; with ``scale[t] = n_c / b`` the mean over the b picked samples,
        unbiased for grad F_c (the :class:`~stochmix.protocols.FiniteSumProblem`
        contract)."""
        xp = NUMPY_NAMESPACE if isinstance(points, np.ndarray) else namespace(points)
        return self._sampled_gradient_formula(xp, clients, points, picks, scale)

    def _sampled_gradient_formula(self, xp, idx, x, picks, scale):
        """(scale_t / n_c) sum_{r in picks[t]} grad loss_r(x_t) + reg x_t, c = idx[t]; with
        Minibatch's scale n_c / b this is the mean over the b drawn samples, unbiased for
        grad F_c."""
        data = self._samples.like(x)
        rows = xp.reshape(xp.take(data["offsets"], idx, axis=0)[:, None] + picks, (-1,))
        a = xp.reshape(xp.take(data["rows"], rows, axis=0), (*picks.shape, self._p))
        t = xp.take(data["t"], rows, axis=0)
        t = (
            xp.reshape(t, (*picks.shape, self._n_classes))
            if self._softmax
            else xp.reshape(t, picks.shape)
        )
        factor = scale * xp.take(data["inv_counts"], idx, axis=0)
        w = xp.broadcast_to(factor[:, None], picks.shape)
        return self._weighted_gradient(xp, a, t, w, x)

    def _weighted_gradient(self, xp, a, t, w, x):
        """sum_k w[m, k] grad loss(x[m]; a[m, k], t[m, k]) + reg x[m], shape (m, dim)."""
        m = x.shape[0]
        if self._softmax:
            weights = xp.reshape(x, (m, self._p, self._n_classes))
            logits = xp.einsum("mkd,mdc->mkc", a, weights)
            logits = logits - xp.max(logits, axis=-1, keepdims=True)
            e = xp.exp(logits)
            resid = (e / xp.sum(e, axis=-1, keepdims=True) - t) * w[..., None]
            g = xp.reshape(xp.einsum("mkd,mkc->mdc", a, resid), (m, self.dim))
        else:
            z = xp.einsum("mkd,md->mk", a, x)
            g = xp.einsum("mkd,mk->md", a, (_sigmoid(xp, z) - t) * w)
        if self._reg:
            g = g + self._reg * x
        return g

    def row_gradient(self, dtype):
        from . import kernels

        data = self.data.like(dtype)
        kernel = kernels.logistic_softmax if self._softmax else kernels.logistic_binary
        return kernel, kernels.fetch_two, (data["a"], data["t"], data["w"], float(self._reg))

    def sampled_row_gradient(self, dtype):
        from . import kernels

        data = self._samples.like(dtype)
        kernel = (
            kernels.logistic_softmax_sampled if self._softmax else kernels.logistic_binary_sampled
        )
        fixed = (data["rows"], data["t"], data["offsets"], data["inv_counts"], float(self._reg))
        return kernel, kernels.fetch_sample, fixed

    @property
    def _samples(self) -> ClientData:
        if self._sample_cache is None:
            self._sample_cache = ClientData(
                rows=self._rows,
                t=self._targets(self._labels),
                offsets=self._offsets[:-1].copy(),
                inv_counts=1.0 / self._counts,
            )
        return self._sample_cache

    def chunk_cost(self) -> int:
        found = self.__dict__.get("_chunk_cost")  # asked every round: kept
        if found is None:
            found = int(self._counts.max()) * (self._p + 2 * self._width) * self._width
            self._chunk_cost = found
        return found

    def _logits(self, x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """a_r W for every sample: (R, C) for softmax, (R,) for binary; float64."""
        rows = self._rows if rows is None else rows
        if self._softmax:
            return rows @ x.reshape(self._p, self._n_classes)
        return rows @ x

    def _losses(self, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Per-sample losses, stable for any logits."""
        if self._softmax:
            top = logits.max(axis=1)
            lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            return lse - logits[np.arange(labels.shape[0]), labels]
        return np.logaddexp(0.0, logits) - labels * logits

    def objective(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) = (1/N) sum_i (1/n_i) sum_{r in S_i} loss_r(x) + reg/2 ||x||^2, in float64."""
        x = self._check_point(x).astype(np.float64, copy=False)
        losses = self._losses(self._logits(x), self._labels)
        return float(losses @ self._sample_weight + 0.5 * self._reg * (x @ x))

    def gradient(self, x: Float[np.ndarray, " d"]) -> Float[np.ndarray, " d"]:
        """grad f(x) = sum_r a_r (q_r(x) - y_r)^T / (N n_{i(r)}) + reg x, O(R p C); dtype of x."""
        x = self._check_point(x)
        return self._full_gradient(x.astype(np.float64, copy=False)).astype(x.dtype, copy=False)

    def _full_gradient(self, x: np.ndarray) -> np.ndarray:
        logits = self._logits(x)
        if self._softmax:
            q = _softmax_np(logits)
            q[np.arange(q.shape[0]), self._labels] -= 1.0
            g = (self._rows.T @ (q * self._sample_weight[:, None])).reshape(-1)
        else:
            g = self._rows.T @ ((_sigmoid_np(logits) - self._labels) * self._sample_weight)
        return g + self._reg * x

    def client_objectives(self, points: Float[np.ndarray, "n d"]) -> Float[np.ndarray, " n"]:
        """F_i(points[i]) for every client i, shape (N,)."""
        pts = self._check_all_points(points)
        p64 = pts.astype(np.float64, copy=False)
        own = p64[self._owner]
        if self._softmax:
            logits = np.einsum("rd,rdc->rc", self._rows, own.reshape(-1, self._p, self._n_classes))
        else:
            logits = np.einsum("rd,rd->r", self._rows, own)
        losses = self._losses(logits, self._labels)
        val = np.bincount(self._owner, weights=losses, minlength=self.n_clients) / self._counts
        val += 0.5 * self._reg * np.einsum("nd,nd->n", p64, p64)
        return val.astype(pts.dtype, copy=False)

    # ----------------------------------------------------------------------- prediction
    def _augment(self, features) -> np.ndarray:
        a = float_array(features, "features").astype(np.float64, copy=False)
        d = self._p - self._intercept
        if a.ndim != 2 or a.shape[1] != d:
            raise ValueError(f"features must have shape (n, {d}), got {a.shape}")
        if self._intercept:
            a = np.concatenate([a, np.ones((a.shape[0], 1))], axis=1)
        return a

    def predict(
        self, x: Float[Array, " d"], features: Real[np.ndarray, "n f"]
    ) -> Int[np.ndarray, " n"]:
        """The predicted class of every row of ``features`` (n, d), shape (n,), int64."""
        x = self._check_point(to_numpy(x) if hasattr(x, "detach") else x)  # a tensor, too
        x = x.astype(np.float64, copy=False)
        logits = self._logits(x, self._augment(features))
        if self._softmax:
            return np.argmax(logits, axis=1).astype(np.int64)
        return (logits > 0).astype(np.int64)

    def accuracy(
        self,
        x: Float[Array, " d"],
        features: Real[np.ndarray, "n f"],
        labels: Real[np.ndarray, " n"],
    ) -> float:
        """The fraction of rows of ``features`` (n, d) whose predicted class is ``labels``."""
        predicted = self.predict(x, features)
        y = as_labels(labels, "labels", ndim=None, integral_floats=True)
        if y.shape != predicted.shape:
            raise ValueError(f"labels must have shape {predicted.shape}, got {y.shape}")
        return float(np.mean(predicted == y))

    # ----------------------------------------------------------------------- the solver
    def _hessian(self, x: np.ndarray) -> np.ndarray:
        """The Hessian of f at x, (dim, dim), float64."""
        dim, p = self.dim, self._p
        h = np.zeros((dim, dim))
        step = max(1, _ROW_CHUNK // max(1, dim))
        for s in range(0, self._rows.shape[0], step):
            a = self._rows[s : s + step]
            v = self._sample_weight[s : s + step]
            logits = self._logits(x, a)
            if not self._softmax:
                sig = _sigmoid_np(logits)
                h += (a * (v * sig * (1.0 - sig))[:, None]).T @ a
                continue
            q = _softmax_np(logits)  # (r, C)
            c = self._n_classes
            h4 = h.reshape(p, c, p, c)
            for k in range(c):  # diag(q) (x) a a^T
                h4[:, k, :, k] += (a * (v * q[:, k])[:, None]).T @ a
            b = (a[:, :, None] * q[:, None, :]).reshape(a.shape[0], dim)  # a (x) q
            h -= (b * v[:, None]).T @ b
        h[np.diag_indices(dim)] += self._reg
        return h

    def _hessian_vector(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """(Hessian of f at x) u, O(R p C)."""
        logits = self._logits(x)
        z = self._logits(u)
        v = self._sample_weight
        if self._softmax:
            q = _softmax_np(logits)
            r = q * z - q * (q * z).sum(axis=1, keepdims=True)
            hv = (self._rows.T @ (r * v[:, None])).reshape(-1)
        else:
            sig = _sigmoid_np(logits)
            hv = self._rows.T @ (v * sig * (1.0 - sig) * z)
        return hv + self._reg * u

    def _solve(self) -> np.ndarray:
        """Damped Newton from 0 with exact Hessians (dense Cholesky or CG)."""
        x = np.zeros(self.dim)
        f, g = self.objective(x), self._full_gradient(x)
        scale = float(np.linalg.norm(g))
        dense = self.dim <= _DENSE_HESSIAN_MAX
        info: dict[str, Any] = {"method": "newton" if dense else "newton-cg", "iterations": 0}
        info["gradient_norm_0"] = scale
        if scale == 0.0:
            self.solver_info = {**info, "relative_gradient_norm": 0.0}
            return x
        gn = scale
        for it in range(200):
            if gn <= _NEWTON_TOL * scale:
                break
            if dense:
                h = self._hessian(x)
                step = -la.solve(h, g, assume_a="pos")
            else:
                op = spla.LinearOperator(
                    (self.dim, self.dim), matvec=lambda u, x=x: self._hessian_vector(x, u)
                )
                rtol = max(1e-15, min(0.1, gn / scale))
                step, _ = spla.cg(op, -g, rtol=rtol, maxiter=20 * self.dim)
            slope = float(g @ step)
            t, accepted = 1.0, False
            while t > 1e-12:
                x_new = x + t * step
                f_new, g_new = self.objective(x_new), self._full_gradient(x_new)
                gn_new = float(np.linalg.norm(g_new))
                # Armijo on f, or (near the optimum, where f is flat to rounding) a smaller
                # gradient.
                if f_new <= f + 1e-4 * t * slope or (f_new <= f + 1e-13 * abs(f) and gn_new < gn):
                    accepted = True
                    break
                t *= 0.5
            if not accepted:
                break
            x, f, g, gn = x_new, f_new, g_new, gn_new
            info["iterations"] = it + 1
        info["relative_gradient_norm"] = gn / scale
        self.solver_info = info
        if gn > _ACCEPT_TOL * scale:
            warnings.warn(
                f"Logistic.x_star: Newton's method stopped at ||grad f|| = {gn:.3g} "
                f"({gn / scale:.3g} relative to ||grad f(0)||), above {_ACCEPT_TOL:g}",
                RuntimeWarning,
                stacklevel=3,
            )
        return x

    # ----------------------------------------------------------------------- generation
    @classmethod
    def random(
        cls,
        n_clients: int,
        dim: int,
        rows_per_client: int | tuple[int, int] = 20,
        *,
        n_classes: int = 2,
        reg: float = 1e-2,
        heterogeneity: float = 1.0,
        scale: float = 1.0,
        intercept: bool = False,
        softmax: bool | None = None,
        seed=None,
    ) -> Logistic:
        """A random heterogeneous instance.

        Features are i.i.d. N(0, 1); client i has its own true weights
        W_i = scale (W_0 + heterogeneity U_i) with W_0, U_i of shape (d, C') standard
        normal (C' = 1 binary, C softmax), and draws each label from the model's
        probabilities, sigmoid(a.w_i) or softmax(a W_i). ``rows_per_client`` is a fixed
        n_i or a pair (low, high) with each n_i uniform on low..high inclusive.
        ``intercept`` and ``softmax`` are passed on to the constructor.
        """
        n = as_int(n_clients, "n_clients", minimum=1)
        d = as_int(dim, "dim", minimum=1)
        c = as_int(n_classes, "n_classes", minimum=2)
        spread = as_float(heterogeneity, "heterogeneity", nonnegative=True)
        size = as_float(scale, "scale", nonnegative=True)
        rng = make_rng(seed)
        counts = random_counts(rows_per_client, n, rng)
        width = 1 if c == 2 else c
        truth = size * (
            rng.standard_normal((d, width)) + spread * rng.standard_normal((n, d, width))
        )
        owner = np.repeat(np.arange(n), counts)
        rows = rng.standard_normal((int(counts.sum()), d))
        logits = np.einsum("rd,rdc->rc", rows, truth[owner])
        if c == 2:
            labels = (rng.random(rows.shape[0]) < _sigmoid_np(logits[:, 0])).astype(np.int64)
        else:  # Gumbel-max: argmax(logits + Gumbel) ~ softmax(logits)
            labels = np.argmax(logits - np.log(-np.log(rng.random(logits.shape))), axis=1)
        return cls.from_stacked(rows, labels, counts, reg, c, intercept=intercept, softmax=softmax)

    def __repr__(self) -> str:
        kind = f"softmax, C={self._n_classes}" if self._softmax else "binary"
        return f"Logistic(n_clients={self.n_clients}, dim={self.dim}, {kind}, reg={self._reg})"
