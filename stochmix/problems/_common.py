"""What the problems share: argument checks, gathering client rows, the client data
(:class:`ClientData`, public as :class:`stochmix.problems.ClientData`) and the
fingerprint. Every module of :mod:`stochmix.problems` may import this one; it imports no
other module of the package, so the package's dependencies point one way::

    _common  <-  stochastic  <-  base  <-  quadratic, least_squares, logistic, torch_model
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import numpy as np

from .._arrays import cache_key, is_numpy, namespace
from .._arrays import like as to_like
from .._fingerprint import digest
from .._validate import as_real_array

# Gathers are done in chunks of about this many array elements, so that the temporaries stay
# in cache instead of being written to (and faulted into) fresh memory.
CHUNK_ELEMENTS = 1 << 16

#: The array namespace of NumPy arrays (formulas are written against a namespace ``xp``).
NUMPY_NAMESPACE = namespace(np.empty(0))

#: Attributes a problem computes on first use from its data (they change without the
#: problem changing), left out of its fingerprint.
DERIVED = frozenset(
    {
        "_f_star",
        "_x_star",
        "_solved",
        "_smoothness",
        "_sample_cache",
        "_buffer_copies",
        "_chunk_cost",
        "_hessians",
        "solver_info",
    }
)


def float_array(value, name: str) -> np.ndarray:
    """``value`` as a floating array; integers are promoted to float64, other dtypes refused."""
    return as_real_array(value, name, finite=False, keep_float=True)


def client_rows(xp, array, idx):
    """The rows of ``array`` for clients ``idx`` (all of it, already gathered, if None)."""
    return array if idx is None else xp.take(array, idx, axis=0)


@cache
def _hessian_kernel():
    """:func:`stochmix.problems.kernels.hessian_rows`, or None where Numba cannot be
    imported (importing the kernels imports Numba)."""
    try:
        from .kernels import hessian_rows
    except ImportError:
        return None
    return hessian_rows


def hessian_products(xp, hess, vec, idx, x, after: bool):
    """``H_c x_t - v_c`` (``after``) or ``H_c (x_t - v_c)`` with ``c = idx[t]`` (every row
    of ``hess`` when ``idx`` is None): per-client Hessians ``hess`` (N, d, d) and vectors
    ``vec`` (N, d) at the points ``x`` (m, d). On float64 NumPy arrays with Numba, one
    compiled pass that reads each client's Hessian where it lies
    (:func:`~stochmix.problems.kernels.hessian_rows`); elsewhere ``einsum`` over the
    gathered rows. The two add each row's sum in their own order (about 1e-16 relative
    apart)."""
    kernel = _hessian_kernel() if isinstance(x, np.ndarray) else None
    if (
        kernel is not None
        and isinstance(hess, np.ndarray)
        and isinstance(vec, np.ndarray)
        and hess.dtype == vec.dtype == x.dtype == np.float64
        and x.ndim == 2
    ):
        rows = np.arange(x.shape[0]) if idx is None else np.asarray(idx, dtype=np.int64)
        out = np.empty(x.shape)
        kernel(hess, vec, rows, x, after, out)
        return out
    h = client_rows(xp, hess, idx)
    if after:
        return xp.einsum("mij,mj->mi", h, x) - client_rows(xp, vec, idx)
    return xp.einsum("mij,mj->mi", h, x - client_rows(xp, vec, idx))


def callable_identity(value) -> str:
    """What a problem's function stands for in its fingerprint: a network (a torch module)
    by its printed architecture, a function by its qualified name."""
    if hasattr(value, "named_parameters"):
        return f"module:{value!r}"
    name = getattr(value, "__qualname__", type(value).__qualname__)
    return f"function:{getattr(value, '__module__', '')}.{name}"


def fingerprint(problem, derived=DERIVED) -> str:
    """A digest of everything that determines ``problem``'s gradients: its class, and every
    array, number and object it holds (its :class:`ClientData` by the arrays themselves)
    but the attributes in ``derived`` and random generators."""
    own = {
        key: callable_identity(value) if callable(value) else value
        for key, value in vars(problem).items()
        if key not in derived and not isinstance(value, (ClientData, np.random.Generator))
    }
    data = getattr(problem, "data", None)
    master = data.master if isinstance(data, ClientData) else None
    return digest(type(problem).__module__, type(problem).__qualname__, own, master)


class ClientData(Mapping):
    """A problem's data: named NumPy arrays, with copies in the namespace, device and dtype
    of the points the gradients are asked at, each made once, on first use.

    A read-only mapping ``name -> array`` over the arrays as given (floating ones as
    float64, others, such as integer labels, as they are; each one a read-only view, so
    the data cannot change under the copies made from it), plus :meth:`like`. As the
    store of a :class:`~stochmix.problems.Problem` (``problem.data``) every array holds
    one entry per client along its first axis (shape (N, ...)), and
    ``Problem.gradients`` hands :meth:`~stochmix.problems.Problem.gradient_formula` the
    dict ``problem.data.like(points)``.

    Args:
        arrays: the arrays by name (NumPy arrays or anything ``np.asarray`` takes, of real
            numbers).

    Raises:
        TypeError: an array of complex numbers, objects or strings.
    """

    def __init__(self, **arrays) -> None:
        master = {}
        for name, value in arrays.items():
            array = np.asarray(value)
            if array.dtype.kind == "f":
                array = array.astype(np.float64, copy=False)
            elif array.dtype.kind not in "biu":
                raise TypeError(
                    f"data[{name!r}] must hold real numbers, got an array of dtype {array.dtype}"
                )
            array = array.view()
            array.flags.writeable = False
            master[name] = array
        self.master = master
        self._copies = {("numpy", "float64"): master}
        self._by_dtype: dict = {}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.master[name]

    def __iter__(self):
        return iter(self.master)

    def __len__(self) -> int:
        return len(self.master)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={v.shape}" for k, v in self.master.items())
        return f"ClientData({shapes})"

    def like(self, like=np.float64) -> dict:
        """The arrays suited to ``like`` (a NumPy dtype, or an array / tensor): floating
        arrays in its dtype, every array in its namespace and device; a dict by name."""
        # the engine's inner loop asks with NumPy arrays and dtypes: one dict lookup
        dtype = like.dtype if isinstance(like, np.ndarray) else like
        if isinstance(dtype, np.dtype):
            hit = self._by_dtype.get(dtype)
            if hit is None:
                hit = self._by_dtype[dtype] = self._copies_like(np.empty(0, dtype=dtype))
            return hit
        if isinstance(like, (type, str)):
            like = np.empty(0, dtype=like)
        return self._copies_like(like)

    def _copies_like(self, like) -> dict:
        """The arrays in ``like``'s namespace, device and dtype, made on first use."""
        key = cache_key(like)
        if key not in self._copies:
            copies = {k: to_like(v, like) for k, v in self.master.items()}
            for value in copies.values():
                if is_numpy(value):
                    value.flags.writeable = False
            self._copies[key] = copies
        return self._copies[key]


def sigmoid(xp, z):
    """1 / (1 + exp(-z)) without overflow, in namespace ``xp`` (logistic regression's)."""
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_np(z: np.ndarray) -> np.ndarray:
    return sigmoid(np, z)


def softmax_np(logits: np.ndarray) -> np.ndarray:
    """The softmax of each row of ``logits`` (shifted by its largest entry)."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def metric_rows(name: str, errors: np.ndarray, curved: np.ndarray) -> np.ndarray:
    """A quadratic's closed-form metric at B models at once, from their errors ``x - x_star``
    (B, d) and ``curved``, the mean Hessian times each error (the gradients, (B, d)):
    ``"objective"`` gives the gaps ``1/2 e^T Hbar e`` and ``"gradient_norm"`` the
    gradients' norms, shape (B,); ``"gradient"`` the gradients themselves, (B, d)."""
    if name == "objective":
        return 0.5 * np.einsum("bd,bd->b", errors, curved)
    if name == "gradient_norm":
        return np.linalg.norm(curved, axis=1)
    if name == "gradient":
        return curved
    raise ValueError(f'name must be "objective", "gradient_norm" or "gradient", got {name!r}')
