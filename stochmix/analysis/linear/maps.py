"""Affine maps ``v -> T v + t`` of vectorised states (:class:`AffineMap`): composition and
powers, fixed points (dense SVD or sparse LU / GMRES, on the slice of a starting state when
``I - T`` is singular) and the spectral radius, with or without the fixed directions.

Settings: ``DENSE_LIMIT`` (largest map analysed densely), ``RANK_RTOL``, ``UNIT_ATOL``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jaxtyping import Float

from ..._validate import _show, as_bool, as_int, as_real_array, is_scalar
from ...mixing.checks import check_matrix

__all__ = [
    "AffineMap",
    "DENSE_LIMIT",
    "RANK_RTOL",
    "SingularMapError",
    "UNIT_ATOL",
]

#: Maps of at most this size are analysed with dense linear algebra.
DENSE_LIMIT = 2000
#: Singular values of I - T below ``RANK_RTOL`` times the largest count as zero.
RANK_RTOL = 1e-10
#: On the sparse path, eigenvalues this close to 1 count as fixed directions.
UNIT_ATOL = 1e-8


class SingularMapError(np.linalg.LinAlgError, ValueError):
    """``I - T`` is singular, so the affine map has no unique fixed point."""


class AffineMap:
    """``v -> T v + t`` on vectorised states ``v = vec(Z)`` (row-major, ``Z`` of shape
    ``state_shape``).

    Unpacks as a pair: ``T, t = affine_map``. ``a.compose(b)`` (also ``a @ b``) is "``a``
    after ``b``": ``v -> a(b(v))``.

    Attributes:
        linear: ``T``, a SciPy CSR array (n, n).
        offset: ``t``, shape (n,).
        state_shape: (m, d), or None.
    """

    def __init__(self, linear, offset, state_shape: tuple[int, int] | None = None):
        if not sp.issparse(linear):
            linear = as_real_array(linear, "linear")
        check_matrix(linear, "linear", square=True)
        self.linear = sp.csr_array(linear, dtype=np.float64)
        if not np.isfinite(self.linear.data).all():
            raise ValueError("linear must be finite (it holds NaN or inf)")
        n = self.linear.shape[0]
        self.offset = as_real_array(offset, "offset").reshape(-1)
        if self.offset.shape != (n,):
            raise ValueError(
                f"offset must hold {n} entries to match linear, got {np.shape(offset)}"
            )
        if state_shape is not None:
            if is_scalar(state_shape):
                raise TypeError(f"state_shape must be a pair (m, d), got {_show(state_shape)}")
            if len(state_shape) != 2:
                raise ValueError(f"state_shape must be a pair (m, d), got {_show(state_shape)}")
            m, d = (as_int(v, "state_shape", minimum=0) for v in state_shape)
            state_shape = (m, d)
            if state_shape[0] * state_shape[1] != n:
                raise ValueError(f"state_shape {state_shape} does not hold {n} entries")
        self.state_shape = state_shape

    @classmethod
    def identity(cls, size: int, state_shape: tuple[int, int] | None = None) -> AffineMap:
        """The identity map on vectors of length ``size``."""
        size = as_int(size, "size", minimum=0)
        return cls(sp.identity(size, format="csr"), np.zeros(size), state_shape)

    @property
    def size(self) -> int:
        """n, the length of the vectors the map acts on."""
        return self.linear.shape[0]

    @property
    def T(self) -> sp.csr_array:  # noqa: N802  (the mathematical name)
        return self.linear

    @property
    def t(self) -> np.ndarray:
        return self.offset

    def __iter__(self):
        yield self.linear
        yield self.offset

    def __call__(self, z: Float[np.ndarray, "..."]) -> Float[np.ndarray, "..."]:
        """``T vec(z) + t``, returned in the shape of ``z`` ((n,) or (m, d))."""
        z = as_real_array(z, "z", finite=False)
        if z.size != self.size:
            raise ValueError(f"z must hold {self.size} entries, got shape {z.shape}")
        return (self.linear @ z.reshape(-1) + self.offset).reshape(z.shape)

    def compose(self, other: AffineMap) -> AffineMap:
        """``self`` after ``other``: ``v -> T_s (T_o v + t_o) + t_s``."""
        if not isinstance(other, AffineMap):
            raise TypeError(f"other must be an AffineMap, got {_show(other)}")
        if other.size != self.size:
            raise ValueError(
                f"other must act on vectors of length {self.size} like this map, got "
                f"length {other.size}"
            )
        return AffineMap(
            self.linear @ other.linear,
            self.linear @ other.offset + self.offset,
            self.state_shape or other.state_shape,
        )

    __matmul__ = compose

    def power(self, k: int) -> AffineMap:
        """The map applied ``k`` times."""
        k = as_int(k, "k", minimum=0)
        out, base = AffineMap.identity(self.size, self.state_shape), self
        while k:
            if k & 1:
                out = base.compose(out)
            k >>= 1
            if k:
                base = base.compose(base)
        return out

    # ------------------------------------------------------------------- fixed points
    def _dense_svd(self):
        a = np.eye(self.size) - self.linear.toarray()
        u, s, vt = scipy.linalg.svd(a)
        tol = RANK_RTOL * max(float(s[0]) if s.size else 0.0, 1.0)
        return a, u, s, vt, int((s > tol).sum())

    def unit_multiplicity(self) -> int:
        """dim ker(I - T): how many independent fixed directions (eigenvalue 1) T has.

        Dense (SVD of I - T, relative tolerance ``RANK_RTOL``) for maps of size at most
        ``DENSE_LIMIT``; above it, the number of sparse eigenvalues within ``UNIT_ATOL`` of 1.
        """
        if self.size <= DENSE_LIMIT:
            return self.size - self._dense_svd()[4]
        vals = self._top_eigenvalues(exclude_unit=False, extra=16)
        return int((np.abs(vals - 1.0) <= UNIT_ATOL).sum())

    def fixed_point(self, start: Float[np.ndarray, "..."] | None = None) -> Float[np.ndarray, " n"]:
        """The ``v`` with ``v = T v + t``.

        When ``I - T`` is invertible the fixed point is unique and ``start`` is ignored.
        When it is singular (T has eigenvalue 1: a conserved quantity, or rows the map never
        changes) the fixed points form an affine family; with ``start`` this returns the one
        that iterating the map from ``start`` converges to, the fixed point ``v`` with
        ``v - start`` in the range of ``I - T`` (every conserved quantity keeps its value at
        ``start``), assuming eigenvalue 1 is semisimple.

        Small maps (size <= ``DENSE_LIMIT``) use a dense SVD of ``I - T``; large ones a sparse
        LU factorisation (a pivot below 1e-13 times the largest counts as singular) and, when
        singular with a ``start``, GMRES started from ``start`` (its Krylov space lies in the
        range of ``I - T``, so it stays on the right slice).

        Raises:
            SingularMapError: ``I - T`` is singular and no ``start`` was given (for a
                least-squares / minimum-norm point instead, solve
                ``scipy.sparse.linalg.lsqr(I - T, t)``), or the system has no solution at
                all (the map drifts along a fixed direction).
        """
        n, t = self.size, self.offset
        z0 = None
        if start is not None:
            z0 = as_real_array(start, "start").reshape(-1)
            if z0.shape != (n,):
                raise ValueError(f"start must hold {n} entries, got {np.shape(start)}")
        if n <= DENSE_LIMIT:
            a, u, s, vt, rank = self._dense_svd()
            if rank == n:
                return scipy.linalg.solve(a, t)
            self._singular(z0, n - rank)
            r0 = t - a @ z0
            scale = np.linalg.norm(t) + np.linalg.norm(a @ z0) + np.finfo(float).tiny
            if np.linalg.norm(u[:, rank:].T @ r0) > 1e-8 * scale:
                raise SingularMapError(
                    "the affine map has no fixed point on the slice of start: its offset has "
                    "a component along a fixed direction of T, so the iterates drift"
                )
            q = u[:, :rank]
            w = scipy.linalg.lstsq(a @ q, r0)[0]
            v = z0 + q @ w
        else:
            a = (sp.identity(n, format="csc") - self.linear).tocsc()
            try:
                lu = spla.splu(a)
                pivots = np.abs(lu.U.diagonal())
                if pivots.min() > 1e-13 * pivots.max():
                    return lu.solve(t)
            except RuntimeError:  # exactly singular factor
                pass
            self._singular(z0, None)
            v = _gmres(a, t, z0)
            scale = np.linalg.norm(t) + np.linalg.norm(a @ z0) + np.finfo(float).tiny
        resid = np.linalg.norm(v - self.linear @ v - t)
        if not resid <= 1e-8 * scale:
            raise SingularMapError(
                f"could not find a fixed point on the slice of start (residual {resid:.3g}): "
                "eigenvalue 1 of T is probably not semisimple, so the iterates drift"
            )
        return v

    @staticmethod
    def _singular(z0, nullity) -> None:
        if z0 is None:
            count = "" if nullity is None else f" ({nullity} fixed directions)"
            raise SingularMapError(
                f"I - T is singular{count}: T has eigenvalue 1 (a conserved quantity such as "
                "FOCUS's or gradient tracking's sum(y) - sum(g), or rows no phase changes such "
                "as a client that never participates), so the fixed point is not unique. Pass "
                "start= (a state) for the fixed point the iteration reaches from it, or solve "
                "scipy.sparse.linalg.lsqr(I - T, t) for a least-squares / minimum-norm point"
            )

    # ---------------------------------------------------------------------- spectrum
    def _top_eigenvalues(self, exclude_unit: bool, extra: int = 8) -> np.ndarray:
        n = self.size
        k = min(n - 2, 6 + extra)
        while True:
            vals = spla.eigs(
                self.linear.astype(np.float64),
                k=k,
                which="LM",
                return_eigenvectors=False,
                maxiter=50 * n,
                tol=1e-12,
            )
            keep = vals[np.abs(vals - 1.0) > UNIT_ATOL] if exclude_unit else vals
            if keep.size or k >= n - 2:
                return keep if exclude_unit else vals
            k = min(n - 2, 2 * k)

    def spectral_radius(self, exclude_unit: bool = False) -> float:
        """max ``|lambda|`` over the eigenvalues of T.

        With ``exclude_unit=True`` the fixed directions are left out: as many eigenvalues
        closest to 1 as ``I - T`` has null directions (``unit_multiplicity``). The result is
        then the spectral radius of T on the range of ``I - T``, the rate at which the
        iterates reach the fixed point on the slice of their start (``fixed_point(start)``).

        Dense eigenvalues for maps of size at most ``DENSE_LIMIT``; above it ARPACK's
        largest-magnitude eigenvalues, dropping those within ``UNIT_ATOL`` of 1.
        """
        exclude_unit = as_bool(exclude_unit, "exclude_unit")
        n = self.size
        if n <= DENSE_LIMIT:
            vals = scipy.linalg.eigvals(self.linear.toarray())
            if exclude_unit:
                drop = n - self._dense_svd()[4]
                if drop:
                    vals = vals[np.argsort(np.abs(vals - 1.0))[drop:]]
            return float(np.abs(vals).max()) if vals.size else 0.0
        vals = self._top_eigenvalues(exclude_unit)
        return float(np.abs(vals).max()) if vals.size else 0.0

    def __repr__(self) -> str:
        return f"AffineMap(size={self.size}, nnz={self.linear.nnz}, state_shape={self.state_shape})"


def _gmres(a, b, x0):
    """GMRES to near machine precision, from ``x0`` (scipy >= 1.12 calls the tolerance
    ``rtol``, older versions ``tol``)."""
    n = a.shape[0]
    kwargs = {"x0": x0, "restart": min(n, 200), "maxiter": 50, "atol": 0.0}
    try:
        v, info = spla.gmres(a, b, rtol=1e-14, **kwargs)
    except TypeError:  # pragma: no cover  (scipy < 1.12)
        v, info = spla.gmres(a, b, tol=1e-14, **kwargs)
    return v
