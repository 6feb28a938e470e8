"""The interface every problem offers the engine.

A problem has N clients and a dimension d. Client ``i`` holds a local objective F_i and the
global objective is the plain average

    f(x) = (1/N) sum_i F_i(x).

The engine only ever needs :meth:`Problem.gradients`: the gradients of a batch of clients, each
at its own point. That call is the hot path; every implementation is vectorized over the
requested clients and costs what they cost, not what N costs.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from functools import partial
from typing import ClassVar

import numpy as np
from jaxtyping import Float, Int

from .._arrays import Array, is_numpy, namespace
from .._arrays import like as to_like
from .._declared import Declaration, keep_declarations
from .._validate import as_client_indices
from ._common import CHUNK_ELEMENTS, DERIVED, NUMPY_NAMESPACE, ClientData, float_array
from ._common import fingerprint as fingerprint_of
from .stochastic import Minibatch, Noisy

__all__ = [
    "Problem",
    "SLICE_ELEMENTS",
    "rows_in_closed_form",
]

#: Consecutive clients (a slice, their data read in place) are asked in one call of the
#: formula up to this many array elements of data (``chunk_cost`` per client), in chunks
#: of this size beyond: the formula's temporaries are then bounded as well.
SLICE_ELEMENTS = 1 << 24


#: The point-by-point member behind each name of :meth:`Problem.closed_form_rows`.
_POINTWISE = {"objective": "objective_gap", "gradient_norm": "gradient", "gradient": "gradient"}


def rows_in_closed_form(problem, name: str, models):
    """``problem.closed_form_rows(name, models)`` where it computes what the problem's own
    point-by-point member does (``objective_gap`` for ``"objective"``, ``gradient``
    otherwise): the class that defines ``closed_form_rows`` defines that member too, and
    no instance overrides either; else None (the caller evaluates point by point). So a
    subclass that rewrites ``objective_gap`` or ``gradient`` of a problem with rows of
    its own is measured by its own rewrite."""
    rows = getattr(problem, "closed_form_rows", None)
    member = _POINTWISE.get(name)
    if rows is None or member is None or member in vars(problem):
        return None
    if "closed_form_rows" not in vars(problem):
        mro = type(problem).__mro__
        owner = next((c for c in mro if "closed_form_rows" in vars(c)), None)
        if owner is None or owner is not next((c for c in mro if member in vars(c)), None):
            return None
    return rows(name, models)


def _own(g, x, data: dict):
    """The formula's result ``g`` as the gradients of ``x``'s rows: itself when it is a
    fresh array of ``x``'s shape and dtype (what formulas return), else a copy (a formula
    may return a view of its point or data, which the caller must not get)."""
    if (
        type(g) is np.ndarray
        and g.shape == x.shape
        and g.dtype == x.dtype
        and g.flags.writeable
        and not np.may_share_memory(g, x)
        and not any(np.may_share_memory(g, v) for v in data.values())
    ):
        return g
    out = np.empty_like(x)
    out[...] = g
    return out


class Problem(abc.ABC):
    """A federated objective f(x) = (1/N) sum_i F_i(x) over N clients in dimension d.

    Subclasses implement :meth:`objective` and either :meth:`gradient_formula` (the
    gradients written once against an array namespace, over the client arrays of
    :attr:`data`: the fast paths, NumPy and Torch points) or :meth:`gradients` itself; the
    rest has defaults (``x_star`` and the constants are ``None`` when unknown)::

        class Ridge(Problem):
            def __init__(self, a, b, reg):  # a: (N, m, d), b: (N, m)
                super().__init__(a.shape[0], a.shape[2], data={"a": a, "b": b})
                self.reg = reg

            def gradient_formula(self, xp, data, idx, x):
                a, b = client_rows(xp, data["a"], idx), client_rows(xp, data["b"], idx)
                r = xp.einsum("mkd,md->mk", a, x) - b
                return xp.einsum("mkd,mk->md", a, r) + self.reg * x

            def objective(self, x): ...

    Args:
        n_clients: N, the number of clients.
        dim: d.
        data: the client arrays :meth:`gradient_formula` reads (see :attr:`data`), or
            None (a problem that writes :meth:`gradients` itself; or one that sets
            :attr:`data` later in its ``__init__``).

    Attributes:
        n_clients: N, the number of clients.
        dim: d.
        data: the problem's data, a :class:`~stochmix.problems.ClientData`: a read-only
            mapping ``name -> array`` whose every array holds one entry per client along
            its first axis (shape (N, ...); floating arrays kept as float64). The
            gradients read it through ``data.like(points)``, the same arrays in the
            namespace, device and dtype of the points (copied once, on first use), and
            hand that dict to :meth:`gradient_formula`. Set from ``Problem.__init__``'s
            ``data`` or by assigning a mapping or a ``ClientData`` to it.
        closed_form_metrics: the run metrics among ``"objective"`` (:meth:`objective_gap`)
            and ``"gradient_norm"`` (:meth:`gradient`) this problem evaluates without a
            pass over its clients (in O(d^2) or less). The run loop evaluates the others on
            a schedule (``evaluate_every`` of :func:`stochmix.run`), since each costs a pass
            over all N clients.
        pure_gradients: whether :meth:`gradients` is a pure function of the problem's
            data and of its arguments: no random draws, no state changed, each row
            depending only on its own client and point. The engine may then split a call
            into chunks of clients and run the chunks on several threads (and use
            :meth:`row_gradient`'s compiled kernel); otherwise it asks for all the
            requested clients in one call, in order. True here (the gradients are
            :meth:`gradient_formula`); the stochastic wrappers set it False.
        unchecked_gradients: whether :meth:`gradients_unchecked` and
            :meth:`bind_clients` give what :meth:`gradients` gives (without its checks;
            the engine calls them instead where the gradients are pure). True here.
        client_slices: whether :meth:`gradients_unchecked` also takes a slice of
            consecutive clients (the engine then passes one for a whole block of
            peers, whose data is read in place instead of gathered). True here.
        compiled_gradient: whether :meth:`row_gradient`, where it returns a kernel,
            computes these gradients (the engine asks for it only then). True here.
        compiled_samples: whether :meth:`sampled_row_gradient`, where it returns a
            kernel, computes what ``sampled_gradients`` computes (the engine asks for it
            only then). True here.

    The five flags are capability declarations, read by the engine as they are. Each
    belongs to the methods it was written with (:attr:`DECLARED_WITH`): a subclass that
    defines one of those methods without setting the flag in its own body gets it False
    (``compiled_gradient`` True again where the subclass writes its own
    :meth:`row_gradient`, ``compiled_samples`` where it writes its own
    :meth:`sampled_row_gradient`). So a subclass that overrides :meth:`gradients` is taken as
    impure, with no unchecked, sliced or compiled gradients, unless it declares
    ``pure_gradients = True`` (and the others) itself; one that rewrites
    :meth:`gradient_formula` without rewriting :meth:`row_gradient` keeps the NumPy path.
    """

    closed_form_metrics: frozenset[str] = frozenset()
    pure_gradients: bool = True
    unchecked_gradients: bool = True
    client_slices: bool = True
    compiled_gradient: bool = True
    compiled_samples: bool = True

    #: Each capability flag, the members it describes (a subclass that defines one of them
    #: without setting the flag gets it False) and those that renew it (True again).
    DECLARED_WITH: ClassVar[dict[str, Declaration]] = {
        "pure_gradients": Declaration(("gradients",)),
        "unchecked_gradients": Declaration(("gradients",)),
        "client_slices": Declaration(("gradients", "gradients_unchecked")),
        "compiled_gradient": Declaration(("gradients", "gradient_formula"), ("row_gradient",)),
        "compiled_samples": Declaration(
            ("sampled_gradients", "_sampled_gradient_formula"), ("sampled_row_gradient",)
        ),
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keep_declarations(cls, cls.DECLARED_WITH)

    def __init__(self, n_clients: int, dim: int, data: Mapping | None = None):
        self._n_clients = int(n_clients)
        self._dim = int(dim)
        self._f_star: float | None = None
        if data is not None:
            self.data = data

    # ------------------------------------------------------------------------- data
    @property
    def data(self) -> ClientData:
        """The client arrays the gradients read (see the class docstring)."""
        found = self.__dict__.get("_client_data")
        if found is None:
            raise AttributeError(
                f"{type(self).__name__} has no client data: pass the arrays its "
                "gradient_formula reads as Problem.__init__(n_clients, dim, data={...}), "
                "or assign self.data = {...} in its __init__"
            )
        return found

    @data.setter
    def data(self, arrays: Mapping) -> None:
        if not isinstance(arrays, ClientData):
            if not isinstance(arrays, Mapping):
                raise TypeError(
                    f"data must be a mapping of names to arrays, got {type(arrays).__name__}"
                )
            arrays = ClientData(**arrays)
        for name, array in arrays.items():
            if array.ndim < 1 or array.shape[0] != self.n_clients:
                raise ValueError(
                    f"data[{name!r}] must hold one entry per client along its first axis, "
                    f"shape ({self.n_clients}, ...), got {array.shape}"
                )
        self._client_data = arrays

    # ----------------------------------------------------------------- sizes and constants
    @property
    def n_clients(self) -> int:
        """N, the number of clients."""
        return self._n_clients

    @property
    def dim(self) -> int:
        """d, the dimension of the model."""
        return self._dim

    @property
    def x_star(self) -> Float[np.ndarray, " d"] | None:
        """The minimiser of f, shape (d,), or ``None`` when not known."""
        return None

    @property
    def f_star(self) -> float | None:
        """f(x_star), or ``None`` when x_star is not known."""
        if self._f_star is None and self.x_star is not None:
            self._f_star = self.objective(self.x_star)
        return self._f_star

    @property
    def smoothness(self) -> float | None:
        """An upper bound L on the Lipschitz constant of every grad F_i, or ``None``."""
        return None

    @property
    def strong_convexity(self) -> float | None:
        """mu, the strong-convexity constant of f (not of each F_i), or ``None``."""
        return None

    # ------------------------------------------------------------------------- evaluation
    def gradients(
        self, clients: Int[np.ndarray, " m"], points: Float[Array, "m d"]
    ) -> Float[Array, "m d"]:
        """Row t is grad F_{clients[t]}(points[t]); shape (m, d), in the namespace, device
        and dtype of ``points`` (a NumPy array or a Torch tensor).

        ``clients`` may be any subset of ``range(N)``, in any order, with repeats, or empty.
        The formula is written once (:meth:`gradient_formula`, against an array namespace);
        NumPy inputs are processed in cache-sized chunks of rows.
        """
        idx, x = self._check_batch(clients, points)
        return self.gradients_unchecked(idx, x)

    def gradients_unchecked(self, idx, x):
        """:meth:`gradients` without the argument checks, for the engine's inner loop:
        ``idx`` must be an int64 array of valid clients, or a slice of consecutive clients
        (whose data rows are then read in place, not gathered: the formula gets them with
        ``idx`` None, as from :meth:`bind_clients`), and ``x`` a float array (m, d)."""
        formula = self.gradient_formula
        if isinstance(idx, slice) and is_numpy(x):
            formula, data, cost = self._slice_formula(x.dtype)
            data = {key: value[idx] for key, value in data.items()}
            idx = None
        else:
            data = self.data.like(x)
            if isinstance(idx, slice):
                data = {key: value[idx] for key, value in data.items()}
                idx = None
            cost = None
        xp = NUMPY_NAMESPACE if is_numpy(x) else namespace(x)
        if not is_numpy(x):
            return formula(xp, data, None if idx is None else to_like(idx, x), x)
        cost = max(1, self.chunk_cost() if cost is None else cost)
        if idx is None and x.shape[0] * cost <= SLICE_ELEMENTS:
            # rows read in place: no gathered copy to keep in cache, so one call (chunks of
            # a few thousand rows cost ~1.4x one call of the same work)
            return _own(formula(xp, data, None, x), x, data)
        out = np.empty_like(x)
        step = max(1, (SLICE_ELEMENTS if idx is None else CHUNK_ELEMENTS) // cost)
        for s in range(0, x.shape[0], step):
            rows = slice(s, s + step)
            if idx is None:
                part, clients = {key: value[rows] for key, value in data.items()}, None
            else:
                part, clients = data, idx[rows]
            out[rows] = formula(xp, part, clients, x[rows])
        return out

    def _slice_formula(self, dtype) -> tuple:
        """``(formula, data, cost)`` for gradients of consecutive clients (a slice, such as
        every peer of a decentralized block), NumPy points of ``dtype``: a formula with
        :meth:`gradient_formula`'s signature, the arrays it reads (indexed by client along
        their first axis) and the array elements one client costs. By default
        :meth:`gradient_formula` on the problem's data; a problem may keep data that
        computes the same gradients faster for whole blocks (see
        :class:`~stochmix.problems.LeastSquares`)."""
        return self.gradient_formula, self.data.like(dtype), self.chunk_cost()

    def bind_clients(self, idx, like):
        """A function ``x -> gradients of clients idx at x`` that gathers the clients'
        data once, for callers that ask the same clients again and again (the engine's
        local steps); ``idx`` an int64 array of valid clients, ``like`` an array whose
        namespace, device and dtype the points will have. Consecutive increasing clients
        (every peer of a decentralized block) on NumPy points read their rows in place
        instead: :meth:`gradients_unchecked` on their slice (where :attr:`client_slices`
        holds, as it declares that it takes one)."""
        if is_numpy(like):
            if (
                self.client_slices
                and idx.size > 1
                and int(idx[-1]) - int(idx[0]) == idx.size - 1
                and bool((np.diff(idx) == 1).all())
            ):
                # consecutive clients (every peer of a decentralized block): their rows
                # read in place, as gradients_unchecked reads a slice (no gathered copy)
                first = int(idx[0])
                return partial(self.gradients_unchecked, slice(first, first + idx.size))
            data = self.data.like(like.dtype)
            # valid indices by contract: "clip" skips NumPy's bounds checks (2x faster)
            own = {key: np.take(value, idx, axis=0, mode="clip") for key, value in data.items()}
            return lambda x: self.gradient_formula(NUMPY_NAMESPACE, own, None, x)
        data = self.data.like(like)
        xp = namespace(like)
        index = to_like(idx, like)
        own = {key: xp.take(value, index, axis=0) for key, value in data.items()}
        return lambda x: self.gradient_formula(xp, own, None, x)

    def row_gradient(self, dtype):
        """This problem's gradient for one client at one point, compiled with Numba, for the
        engine's row-wise path (``run(..., compiled=True)``, or ``"auto"`` in long runs);
        None (the default) keeps the problem on the vectorized NumPy path.

        Args:
            dtype: the NumPy dtype of the run's state (float64 or float32).

        Returns:
            None, or a triple ``(kernel, fetch, data)``:

            * ``kernel(data, c, x, out)``: a Numba-compiled function (``numba.njit``; it
              is called from compiled code, so it must be a Numba dispatcher) that writes
              grad F_c(x) into ``out`` and returns nothing. ``data`` is the tuple below,
              ``c`` the client (an integer in ``[0, N)``), ``x`` the point and ``out`` the
              result, both 1-d arrays of length d in ``dtype`` (``out`` never aliases
              ``x`` or ``data``). It must compute what :meth:`gradients` computes for that
              row, to rounding (sums may be added in another order); the engine calls it
              for many clients at once from two threads, so it must not write anywhere but
              ``out``.
            * ``fetch(data, c)``: a Numba-compiled function that starts loading client
              ``c``'s rows of ``data`` into the cache (``stochmix._compiled.prefetch_read``
              on each array, see :func:`stochmix.problems.kernels.fetch_two`) or does
              nothing (:func:`stochmix.problems.kernels.fetch_none`); the engine calls it
              a few clients ahead of ``kernel``.
            * ``data``: a tuple of the arrays (in ``dtype``, indexed by client along their
              first axis) and numbers that ``kernel`` reads; the same objects on every
              call for a given dtype.

        The engine uses the kernel only where :attr:`pure_gradients` and
        :attr:`compiled_gradient` hold: a subclass that rewrites :meth:`gradients` or
        :meth:`gradient_formula` without rewriting this method has ``compiled_gradient``
        False and keeps the NumPy path. See :mod:`stochmix.problems.kernels` for the
        built-in kernels.
        """
        return None

    def sampled_row_gradient(self, dtype):
        """The sampled gradient of one node at one point (what ``sampled_gradients``
        gives for one row, see :class:`~stochmix.protocols.FiniteSumProblem`), compiled
        with Numba, for the row-wise path of runs that take ``grad(samples=...)``; None
        (the default) keeps those runs on the vectorized NumPy path. Asked only where
        :meth:`row_gradient` gives a kernel and :attr:`compiled_samples` holds.

        Args:
            dtype: the NumPy dtype of the run's state (float64 or float32).

        Returns:
            None, or a triple ``(kernel, fetch, data)`` as :meth:`row_gradient`'s, but for
            one round's draw: the engine calls ``kernel(data + (clients, picks, scale), t,
            x, out)`` with ``t`` the node's place in the run, so that its client is
            ``clients[t]`` (int64, shape (s,)), its samples ``picks[t]`` (int64 positions
            among that client's samples, shape (s, b), checked in range) and its factor
            ``scale[t]`` (float64, shape (s,)); ``fetch(data + draw, t)`` likewise. See
            :func:`stochmix.problems.kernels.least_squares_sampled`.
        """
        return None

    def gradient_formula(self, xp, data: dict, idx, x):
        """grad F_idx[t](x[t]) for every t, written with the array namespace ``xp`` on the
        arrays ``data`` (a dict: this problem's :attr:`data` in the namespace, device and
        dtype of ``x``, from ``self.data.like(x)``). ``idx`` is an int64 array of
        clients, or None: ``data`` holds the requested clients' rows already, in order
        (a slice of consecutive clients, or the rows :meth:`bind_clients` gathered);
        formulas read client rows through :func:`stochmix.problems.client_rows`, which
        handles both. Returns an array of ``x``'s shape (m, d), namespace and dtype; it
        may be a new array or ``x``-sized temporaries, never ``x`` itself modified."""
        raise NotImplementedError(f"{type(self).__name__} must define gradient_formula")

    def chunk_cost(self) -> int:
        """Array elements one client's gradient touches (its data and point): the engine
        sizes chunks of clients by it, and the metrics' schedule weighs a pass over the
        clients with it. ``dim`` by default; problems with more data per client say so."""
        return self.dim

    @abc.abstractmethod
    def objective(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) = (1/N) sum_i F_i(x) at one point x of shape (d,)."""

    def objective_gap(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) - f(x_star), or f(x) when x_star is unknown.

        The default subtracts the two values (a pass over the clients, and no better than
        f_star's rounding near the optimum); problems with a closed form override it.
        """
        f_star = self.f_star
        return self.objective(x) - (f_star if f_star is not None else 0.0)

    def closed_form_rows(self, name: str, models: Float[np.ndarray, "b d"]):
        """The metric ``name`` of :attr:`closed_form_metrics` at every row of ``models``
        (shape (B, d), float64) at once: ``"objective"`` gives :meth:`objective_gap` and
        ``"gradient_norm"`` the norm of :meth:`gradient` of each row, shape (B,), to
        rounding (``"gradient"``: the gradients themselves, shape (B, d), float64, which a
        composite problem builds on); None (the default) where the problem has no such
        form, and the caller
        evaluates the rows one at a time. A run that keeps many models at once (the
        compiled batches of :mod:`stochmix.engine.runner.segments`) records them with
        it; ``LeastSquares``, ``Quadratic`` and ``Composite`` over them give it."""
        return None

    def gradient(self, x: Float[np.ndarray, " d"]) -> Float[np.ndarray, " d"]:
        """grad f(x) = (1/N) sum_i grad F_i(x), shape (d,), dtype of ``x``.

        The default averages :meth:`gradients` over all clients (O(N d) memory); subclasses
        with a closed form override it.
        """
        x = self._check_point(x)
        everyone = np.arange(self.n_clients, dtype=np.int64)
        points = np.broadcast_to(x, (self.n_clients, self.dim))
        return np.mean(self.gradients(everyone, np.ascontiguousarray(points)), axis=0)

    def minibatch(self, batch_size: int, seed=None):
        """This problem with minibatch gradients of ``batch_size`` samples per client."""
        return Minibatch(self, batch_size, seed)

    def noisy(self, sigma: float, seed=None):
        """This problem with Gaussian noise of scale ``sigma`` added to every gradient."""
        return Noisy(self, sigma, seed)

    def client_objectives(self, points: Float[np.ndarray, "n d"]) -> Float[np.ndarray, " n"]:
        """F_i(points[i]) for every client i; ``points`` has shape (N, d)."""
        raise NotImplementedError(f"{type(self).__name__} does not provide client_objectives")

    def stacked(self) -> dict:
        """The problem's data in one documented form, a dict of fresh copies (changing
        them changes nothing here). Each problem family says what it gives:

        * :class:`~stochmix.problems.LeastSquares`: ``features`` (R, d), every client's
          A_i stacked client after client, ``targets`` (R,), the b_i likewise, ``counts``
          (N,) the n_i, and ``reg``: the arguments of ``LeastSquares.from_stacked``;
        * :class:`~stochmix.problems.Logistic`: ``features`` (R, d) (without the
          intercept column), ``labels`` (R,) int64, ``counts`` (N,), and ``reg``,
          ``n_classes``, ``intercept``, ``softmax``, ``allow_no_minimiser``: the
          arguments of ``Logistic.from_stacked``;
        * :class:`~stochmix.problems.Quadratic`: ``centers`` (N, d) the z_i and
          ``hessians`` ((N, d) diagonals or (N, d, d)), the constructor's arguments;
        * :class:`~stochmix.problems.TorchModel`: ``features`` (R, ...), ``targets``
          (R, ...), ``counts`` (N,) and ``reg``;
        * :class:`~stochmix.problems.Composite`: its smooth part's dict plus
          ``regularizer`` (the :class:`~stochmix.problems.Regularizer`); minibatch and
          noisy problems: the dict of the problem they wrap;
        * any other problem (this default): the client arrays its gradients read
          (:attr:`data`, one entry per client along the first axis), by name.

        Rows are in client order: client i's rows are
        ``features[offsets[i]:offsets[i + 1]]`` with ``offsets`` the running sum of
        ``counts`` from 0.
        """
        return {name: np.array(value) for name, value in self.data.items()}

    # ------------------------------------------------------------------------- identity
    #: Attributes computed on first use from the data (they change without the problem
    #: changing), left out of :meth:`fingerprint`.
    _derived = DERIVED

    def fingerprint(self) -> str:
        """A digest of everything that determines this problem's gradients: its class,
        sizes, data arrays and parameters (every array and number it holds but those it
        derives on first use). Two problems with the same fingerprint give the same
        gradients; a checkpoint is resumed only by a problem with its fingerprint."""
        return fingerprint_of(self, self._derived)

    # ------------------------------------------------------------------------- checks
    def _check_point(self, x, name: str = "x") -> np.ndarray:
        arr = float_array(x, name)
        if arr.shape != (self.dim,):
            raise ValueError(f"{name} must have shape ({self.dim},), got {arr.shape}")
        return arr

    def _check_batch(self, clients, points) -> tuple:
        idx = as_client_indices(clients, self.n_clients, "clients")
        if is_numpy(points) or not hasattr(points, "device"):
            pts = float_array(points, "points")
        else:
            pts = points
            if not pts.dtype.is_floating_point:
                raise TypeError(f"points must hold floating numbers, got dtype {pts.dtype}")
        if pts.shape != (idx.shape[0], self.dim):
            raise ValueError(
                f"points must have shape (len(clients), dim) = ({idx.shape[0]}, {self.dim}), "
                f"got {pts.shape}"
            )
        return idx, pts

    def _check_all_points(self, points) -> np.ndarray:
        pts = float_array(points, "points")
        if pts.shape != (self.n_clients, self.dim):
            raise ValueError(
                f"points must have shape (n_clients, dim) = ({self.n_clients}, {self.dim}), "
                f"got {pts.shape}"
            )
        return pts

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_clients={self.n_clients}, dim={self.dim})"
