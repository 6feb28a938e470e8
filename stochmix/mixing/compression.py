"""Compression operators for what nodes transmit, vectorized over rows.

A compressor maps rows ``x`` of shape (k, d) to compressed rows of the same shape, each row
compressed on its own, with its random draws from a given NumPy generator (one call draws
for every row at once, so a per-node loop reproduces the draws by taking row i of the same
draw). They satisfy CHOCO-SGD's contraction property

    E ||Q(x) - x||^2 <= (1 - delta) ||x||^2,   0 < delta <= 1,

with :attr:`Compressor.delta` (for ``rand_k`` with ``unbiased=True`` and unscaled QSGD
the operator is unbiased instead and ``delta`` is None: not a contraction).

* :class:`TopK`: keep the k entries of largest magnitude (no randomness), delta = k/d.
* :class:`RandK`: keep k entries drawn uniformly without replacement (ranks of
  ``rng.random((rows, d))``: the k smallest draws of each row), delta = k/d; scaled by d/k
  with ``unbiased=True``.
* :class:`QSGD`: stochastic quantization to ``levels`` = s levels (Alistarh et al.):
  ``sign(x) ||x|| xi / s`` with ``xi = floor(s|x|/||x|| + u)``, u uniform (one draw per
  entry), divided by ``tau = 1 + min(d/s^2, sqrt(d)/s)`` when ``rescale`` (the default, as
  CHOCO-SGD uses it: then delta = 1/tau).
* :class:`NoCompression`: the identity, delta = 1.

:func:`compressor` reads a spec string: ``"none"``, ``"top_k:K"``, ``"rand_k:K"``,
``"rand_k_unbiased:K"``, ``"qsgd:S"`` or ``"qsgd_unscaled:S"``.

References:
    - A. Koloskova, S. U. Stich and M. Jaggi (2019), "Decentralized stochastic optimization and
      gossip algorithms with compressed communication", ICML 2019, PMLR 97 (CHOCO-SGD; the
      operators and their delta).
    - D. Alistarh, D. Grubic, J. Li, R. Tomioka and M. Vojnovic (2017), "QSGD:
      communication-efficient SGD via gradient quantization and encoding", NeurIPS 2017.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validate import _show, as_bool, as_int

__all__ = [
    "Compressor",
    "NoCompression",
    "QSGD",
    "RandK",
    "TopK",
    "compressor",
]


class Compressor:
    """Base of the compressors: ``compressor(x, rng) -> Q(x)``, x of shape (k, d)."""

    name = "compressor"
    #: whether Q(x) is a function of x alone (no draws): a map of it gives the same rows
    #: every round it gets the same input, so a method may reuse its plans
    deterministic = False

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def delta(self, d: int) -> float | None:
        """The contraction constant in dimension d (None: not a contraction)."""
        raise NotImplementedError

    def floats(self, d: int) -> int:
        """The floats a compressed row of dimension d costs on the wire (d uncompressed;
        a sparsifier sends its k values and k indices, 2k; QSGD its norm and, packed
        into 64-bit words, a sign and ceil(log2(s + 1)) bits per entry)."""
        return d


@dataclass(frozen=True)
class NoCompression(Compressor):
    """The identity."""

    name = "none"
    deterministic = True

    def __call__(self, x, rng):
        return np.array(x, dtype=np.float64)

    def delta(self, d: int) -> float:
        return 1.0


def _check_k(k: int, d: int) -> int:
    if k > d:
        raise ValueError(f"k = {k} exceeds the dimension d = {d}")
    return k


def _keep(x: np.ndarray, index: np.ndarray, scale: float = 1.0) -> np.ndarray:
    out = np.zeros_like(x, dtype=np.float64)
    rows = np.arange(x.shape[0])[:, None]
    out[rows, index] = scale * x[rows, index]
    return out


@dataclass(frozen=True)
class TopK(Compressor):
    """The k entries of largest magnitude of each row (others zero); of entries tied at
    the k-th largest magnitude, those of the lowest indices (so the compiled batches,
    which scan a row in order, keep the same ones); a NaN entry is never kept."""

    k: int

    name = "top_k"
    deterministic = True

    def __post_init__(self):
        object.__setattr__(self, "k", as_int(self.k, "k", minimum=1))

    def __call__(self, x, rng=None):
        x = np.asarray(x, dtype=np.float64)
        d = x.shape[1]
        k = _check_k(self.k, d)
        if k == d:
            return x.copy()
        # a NaN entry is never kept (below every magnitude; the compiled batches skip it
        # alike), so a row of fewer than k numbers keeps them all
        magnitude = np.where(np.isnan(x), -1.0, np.abs(x))
        kth = np.partition(magnitude, d - k, axis=1)[:, d - k : d - k + 1]
        above = magnitude > kth
        tied = (magnitude == kth) & (magnitude >= 0.0)
        # the ties the entries strictly above leave room for, lowest indices first
        room = k - above.sum(axis=1, keepdims=True)
        keep = above | (tied & (np.cumsum(tied, axis=1) <= room))
        return np.where(keep, x, 0.0)

    def floats(self, d: int) -> int:
        return min(d, 2 * self.k)

    def delta(self, d: int) -> float:
        return min(self.k, d) / d


@dataclass(frozen=True)
class RandK(Compressor):
    """k entries of each row drawn uniformly without replacement: the k smallest of
    ``rng.random(x.shape)`` in each row; times d/k when ``unbiased``."""

    k: int
    unbiased: bool = False

    name = "rand_k"

    def __post_init__(self):
        object.__setattr__(self, "k", as_int(self.k, "k", minimum=1))
        object.__setattr__(self, "unbiased", as_bool(self.unbiased, "unbiased"))

    def __call__(self, x, rng):
        x = np.asarray(x, dtype=np.float64)
        d = x.shape[1]
        k = _check_k(self.k, d)
        draws = rng.random(x.shape)
        index = np.argpartition(draws, k - 1, axis=1)[:, :k] if k < d else slice(None)
        if k == d:
            return x * (d / k if self.unbiased else 1.0)
        return _keep(x, index, d / k if self.unbiased else 1.0)

    def floats(self, d: int) -> int:
        return min(d, 2 * self.k)

    def delta(self, d: int) -> float | None:
        return None if self.unbiased else min(self.k, d) / d


@dataclass(frozen=True)
class QSGD(Compressor):
    """Stochastic quantization of each row to s = ``levels`` levels of its norm, divided
    by tau = 1 + min(d/s^2, sqrt(d)/s) when ``rescale``; one uniform draw per entry."""

    levels: int
    rescale: bool = True

    name = "qsgd"

    def __post_init__(self):
        object.__setattr__(self, "levels", as_int(self.levels, "levels", minimum=1))
        object.__setattr__(self, "rescale", as_bool(self.rescale, "rescale"))

    def tau(self, d: int) -> float:
        s = self.levels
        return 1.0 + min(d / s**2, np.sqrt(d) / s)

    def __call__(self, x, rng):
        x = np.asarray(x, dtype=np.float64)
        s = self.levels
        u = rng.random(x.shape)
        norm = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
        safe = np.where(norm > 0, norm, 1.0)
        level = np.floor(s * np.abs(x) / safe + u)
        out = np.sign(x) * norm * level / s
        return out / self.tau(x.shape[1]) if self.rescale else out

    def floats(self, d: int) -> int:
        bits = d * (1 + int(np.ceil(np.log2(self.levels + 1))))
        return min(d, 1 + -(-bits // 64))

    def delta(self, d: int) -> float | None:
        return 1.0 / self.tau(d) if self.rescale else None


_KINDS = {
    "top_k": lambda a: TopK(a),
    "rand_k": lambda a: RandK(a),
    "rand_k_unbiased": lambda a: RandK(a, unbiased=True),
    "qsgd": lambda a: QSGD(a),
    "qsgd_unscaled": lambda a: QSGD(a, rescale=False),
}


def compressor(spec) -> Compressor:
    """A :class:`Compressor` from itself or a spec string (see the module docstring)."""
    if isinstance(spec, Compressor):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"compression must be a Compressor or a string, got {_show(spec)}")
    if spec == "none":
        return NoCompression()
    kind, _, arg = spec.partition(":")
    if kind not in _KINDS or not arg.strip().isdigit():
        raise ValueError(
            "compression must be 'none', 'top_k:K', 'rand_k:K', 'rand_k_unbiased:K', "
            f"'qsgd:S' or 'qsgd_unscaled:S', got {spec!r}"
        )
    return _KINDS[kind](int(arg))
