r"""The expression algebra of the equations (:mod:`stochmix.engine.model.equations`):
block rows, gradients, their linear combinations and their reductions.

**One index space.** ``x[S]`` selects the rows of the *clients* ``S`` (integers in
``[0, N)``, an int array or a single int) in every block, whether the block has a server
row (``x``: N + 1 rows, client i at row i + 1) or not (``h``: N rows, ``first_node=1``,
client i at row i); ``x.server`` is the server's row (node 0). Client i is node
``i + client_node`` (1 in federated layouts, the default; 0 in decentralized ones, which
have no server), and a block's row r is node ``r + first_node``, so a block of one row
and ``first_node=0`` (an anchor, a running sum) is read and written as ``a.server``.

**Expressions** are linear combinations of

* row selections: ``x[S]`` (one row per client of S), ``x.server`` or ``x[i]`` (one row);
* ``grad(S)``: the gradient of each client of S at its point (the method's
  :meth:`~stochmix.engine.model.method.Method.points`, the model rows by default);

with numbers (``eta * x[S]``, ``x[S] / n``), per-client coefficients (an array ``w`` of
shape ``(|S|,)``: ``w * x[S]``), sums, differences and negation. An expression is either
*per client* (it holds at least one term over S: one value per client; single rows in it
are broadcast to every client) or *one row*. The reductions ``total``, ``mean`` and
``dot`` turn a per-client expression into one row: ``total(e) = sum_{i in S} e_i``,
``mean(e) = total(e) / |S|``, ``dot(w, e) = sum_{i in S} w_i e_i``. ``grad`` and the
reductions are functions of :mod:`stochmix.engine.model.functions`.

An :class:`Expression` only records its terms (:mod:`stochmix.engine.model.terms`). The
block handles (:class:`BlockRows`) hand what is assigned to their rows (``x[S] = e``,
``x[S] += e``) to the phase writer,
:class:`~stochmix.engine.model.equations.Equations`, which checks the equation and lowers
it to :class:`~stochmix.engine.model.phase.PhaseBuilder` calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from ...mixing.rowsparse import RowSparse
from .layout import Layout
from .phase_cache import PhaseCache
from .round_scalars import RoundScalar, scaled
from .terms import EVERY, _Every, _Term, _term, _with

__all__ = ["BlockRows", "Expression", "Selection"]


def _is_number(value) -> bool:
    kind = type(value)
    if kind is float or kind is int:
        return True
    return np.ndim(value) == 0 and isinstance(value, (int, float, np.integer, np.floating))


def _unit(num) -> bool:
    """Whether a term's coefficient is the plain number 1 (times which a round scalar stays
    itself: :class:`~stochmix.engine.model.round_scalars.RoundScalar`)."""
    return type(num) is float and num == 1.0


def _same_clients(a, b) -> bool:
    if a is EVERY or b is EVERY:
        return True  # checked against the target when the equation is written
    return a is b or (a.shape == b.shape and np.array_equal(a, b))


def show(clients) -> str:
    if clients is EVERY:
        return repr(clients)
    return np.array2string(clients, threshold=8)


class Expression:
    """A linear combination of block rows and gradients; see the module docstring.

    Attributes:
        terms: the terms in the order they were written.
        clients: the clients S of a per-client expression (int64, shape (s,)), or None
            for an expression of one row.
    """

    __array_ufunc__ = None  # ``w * x[S]`` with a NumPy array w comes here, not to NumPy

    def __init__(self, terms: tuple, clients: np.ndarray | _Every | None):
        self.terms = terms
        self.clients = clients

    # -- linear algebra ------------------------------------------------------------------

    def _scaled(self, factor, what: str = "coefficient") -> Expression:
        if _is_number(factor):
            if isinstance(factor, RoundScalar):  # its rule kept
                return Expression(
                    tuple(_with(t, num=factor if _unit(t.num) else scaled(t.num, factor))
                          for t in self.terms),
                    self.clients,
                )  # fmt: skip
            factor = float(factor)
            return Expression(tuple(_with(t, num=t.num * factor) for t in self.terms), self.clients)
        if isinstance(factor, Expression):
            raise TypeError(
                "an expression can only be multiplied by numbers or per-client arrays "
                "(the phase must stay linear in the state)"
            )
        arr = np.asanyarray(factor)  # (a RoundArray keeps its rule)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"{what} must be a number or a float array, got {factor!r}")
        if self.clients is None:
            raise ValueError(
                f"{what} of shape {arr.shape} needs a per-client expression (x[S], grad(S)); "
                "this one is a single row: use a number"
            )
        if isinstance(self.clients, _Every):
            raise ValueError(
                f"{what} of shape {arr.shape} with grad() and no clients: name them, "
                "grad(S), so that the weights line up with S"
            )
        if arr.shape != self.clients.shape:
            raise ValueError(
                f"{what} must have shape {self.clients.shape}, one entry per client of the "
                f"expression, got shape {arr.shape}"
            )
        arr = arr.astype(np.float64, copy=False)
        return Expression(tuple(_with(t, num=t.num * arr) for t in self.terms), self.clients)

    def __mul__(self, factor) -> Expression:
        return self._scaled(factor)

    __rmul__ = __mul__

    def __truediv__(self, divisor) -> Expression:
        if not _is_number(divisor):
            raise TypeError(f"an expression can only be divided by a number, got {divisor!r}")
        if not isinstance(divisor, RoundScalar):  # (a round scalar keeps its rule)
            divisor = float(divisor)
        return Expression(
            tuple(_with(t, den=scaled(t.den, divisor)) for t in self.terms), self.clients
        )

    def __neg__(self) -> Expression:
        return self._scaled(-1.0)

    def __pos__(self) -> Expression:
        return self

    def __add__(self, other) -> Expression:
        if not isinstance(other, Expression):
            return NotImplemented
        clients = self.clients if other.clients is None else other.clients
        if clients is EVERY and self.clients is not None:
            clients = self.clients
        if self.clients is not None and other.clients is not None:
            if not _same_clients(self.clients, other.clients):
                raise ValueError(
                    f"per-client expressions over different clients cannot be added: "
                    f"{show(self.clients)} and {show(other.clients)}"
                )
        elif clients is not None and any(t.summed for t in (*self.terms, *other.terms)):
            raise ValueError(
                "a reduction (total, mean, dot) is one row and cannot be added to a "
                "per-client expression in the same phase"
            )
        return Expression(self.terms + other.terms, clients)

    def __sub__(self, other) -> Expression:
        if not isinstance(other, Expression):
            return NotImplemented
        return self + (-other)

    # -- reductions ----------------------------------------------------------------------

    def _reduce(self, name: str, divide: bool) -> Expression:
        if self.clients is None:
            raise ValueError(f"{name}() needs a per-client expression (x[S], grad(S)), got one row")
        if self.clients is EVERY:
            raise ValueError(
                f"{name}() of grad() with no clients: name them, {name}(grad(S)), so that "
                "the reduction knows |S|"
            )
        if any(t.samples is not None for t in self.terms):
            raise ValueError(
                f"{name}() of sampled gradients: write them to a block first (a phase's "
                "reductions take full gradients)"
            )
        s = self.clients.size
        if divide and s == 0:
            raise ValueError(f"{name}() over no client is undefined (the clients are empty)")
        terms = []
        for t in self.terms:
            if t.over is not None:  # one value per client: a weighted sum of rows
                terms.append(_with(t, summed=True, den=t.den * s if divide else t.den))
            elif np.ndim(t.num) == 0:  # a single row broadcast to every client
                terms.append(t if divide else _with(t, num=t.num * s))
            else:  # a single row with a per-client coefficient
                num = np.sum(t.num)  # (a round array's sum: a round scalar with its rule)
                num = num if isinstance(num, RoundScalar) else float(num)
                terms.append(_with(t, num=num, den=t.den * s if divide else t.den))
        return Expression(tuple(terms), None)

    def sum(self) -> Expression:
        """``sum_{i in S} e_i``, one row (same as ``total``)."""
        return self._reduce("total", False)

    def mean(self) -> Expression:
        """``(1/|S|) sum_{i in S} e_i``, one row (same as ``mean``)."""
        return self._reduce("mean", True)

    def __rmatmul__(self, op) -> Expression:
        """``W @ e``: the mixing operator ``W`` applied to every whole block of ``e``
        (``W @ (y - g)`` is ``W @ y - W @ g``)."""
        op = _operator(op)
        terms = []
        for t in self.terms:
            if t.block is None or t.op is not None or t.summed or not t.whole:
                what = (
                    "gradients"
                    if t.block is None
                    else "a mixed block"
                    if t.op is not None
                    else "a reduction"
                    if t.summed
                    else f"rows of {t.block!r}"
                )
                raise TypeError(
                    f"W @ (...) applies a mixing matrix to whole blocks (W @ x, W @ (x - "
                    f"lr * y)); this expression holds {what}: mix in one phase and add "
                    "the rest in another (every equation of a phase reads the state before it)"
                )
            terms.append(_mixed(t, op))
        return Expression(tuple(terms), _mixed_clients(self.terms[0], op))

    def __matmul__(self, other):
        raise TypeError(
            f"{self!r} @ ...: a mixing matrix multiplies block rows from the left (W @ x)"
        )

    def __repr__(self) -> str:
        what = (
            "one row"
            if self.clients is None
            else ("every client" if self.clients is EVERY else f"{self.clients.size} clients")
        )
        parts = []
        for t in self.terms:
            name = "grad" if t.block is None else t.block
            where = "row" if t.over is None else ("sum" if t.summed else "S")
            if t.op is not None:
                name, where = f"W @ {name}", ":"
            parts.append(f"{name}[{where}]")
        return f"Expression({' + '.join(parts)}; {what})"

    def __setitem__(self, key, value):
        raise TypeError(
            "only a block's rows can be assigned (x[S] = ..., x.server = ...), "
            f"not the rows of an expression: {self!r}"
        )


class Selection(Expression):
    """Rows of one block, as an expression and as the target of an equation.

    ``x[S] += e`` is ``x[S] = <x[S] kept> + e``: Python calls ``x[S].__iadd__(e)``, whose
    result :class:`BlockRows` records as an equation.
    """

    clients: np.ndarray | None  # a selection names its clients (never EVERY)

    def __init__(
        self, handle: BlockRows, rows, clients: np.ndarray | None, text: str, whole=False,
        view=False,
    ):  # fmt: skip
        term = _term(handle.name, rows, 1.0, clients, whole, view)
        super().__init__((term,), clients)
        self.handle = handle
        self.rows = rows
        self.text = text
        self.whole = whole  # every row of the block (x[:])
        self.view = view  # rows picked by index (x.at[...])

    # ``x[S] += e`` returns an _Update, which Python hands to ``BlockRows.__setitem__``
    # to record. Typed Any: a checker would otherwise want ``x[S] += e`` to give a
    # Selection back (the type of ``x[S]``), and refuse every update written this way.
    def __iadd__(self, other) -> Any:
        if not isinstance(other, Expression):
            raise TypeError(f"{self.text} += ... needs an expression, got {other!r}")
        return self.handle._eq._pending_update(_Update(self, other))

    def __isub__(self, other) -> Any:
        if not isinstance(other, Expression):
            raise TypeError(f"{self.text} -= ... needs an expression, got {other!r}")
        return self.handle._eq._pending_update(_Update(self, -other))

    def __repr__(self) -> str:
        return f"Selection({self.text})"


@dataclass(frozen=True, eq=False)
class _Update:
    """What ``target += expr`` hands to the block handle's assignment."""

    target: Selection
    expr: Expression


@runtime_checkable
class _Writer(Protocol):
    """What the block handles need of the phase writer they report to
    (:class:`~stochmix.engine.model.equations.Equations`, which builds on this module)."""

    layout: Layout
    n_clients: int
    client_node: int
    cache: PhaseCache

    def _clients(self, clients) -> np.ndarray: ...

    def _rows(self, clients: np.ndarray, shift: int) -> np.ndarray: ...

    def _pending_update(self, update: _Update) -> _Update: ...

    def _equation(self, target: Selection, value) -> None: ...


class BlockRows:
    """A block of the state seen in client indices: ``x[S]``, ``x[i]``, ``x.server``.

    Made by :meth:`~stochmix.engine.model.equations.Equations.blocks`; reading a selection
    gives an :class:`Expression`, assigning to it writes an equation of the phase.
    """

    # set once with object.__setattr__ (the handle refuses attribute assignment)
    _eq: _Writer
    name: str
    _shift: int  # row of client i is i + _shift
    _size: int  # rows of the block
    _first: int  # node of row 0

    def __init__(self, eq: _Writer, name: str):
        block = eq.layout.block(name)  # ValueError naming the known blocks
        object.__setattr__(self, "_eq", eq)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_shift", eq.client_node - block.first_node)
        object.__setattr__(self, "_size", block.rows)
        object.__setattr__(self, "_first", block.first_node)

    def _select(self, clients) -> Selection:
        eq = self._eq
        if isinstance(clients, slice):
            if clients.start is None and clients.stop is None and clients.step is None:
                found = self.__dict__.get("_all")  # x[:] asked again in the same phase
                if found is not None:
                    return found
            if clients != slice(None):
                raise TypeError(
                    f"{self.name}[...] takes client indices or [:] (every row of the block), "
                    f"got the slice {clients}"
                )
            rows, over = eq.cache.whole(self._size, self._shift)
            found = Selection(self, rows, over, f"{self.name}[:]", whole=True)
            object.__setattr__(self, "_all", found)
            return found
        if isinstance(clients, Expression):
            raise TypeError(f"{self.name}[...] takes client indices, got an expression")
        if isinstance(clients, (int, np.integer)) and not isinstance(clients, bool):
            i = int(clients)
            if not 0 <= i < eq.n_clients:
                raise ValueError(
                    f"client index {i} is out of range for block {self.name!r}: clients are "
                    f"0..{eq.n_clients - 1}"
                )
            row = self._row(i + self._shift, f"client {i}")
            return Selection(self, row, None, f"{self.name}[{i}]")
        clients = eq._clients(clients)
        holds_all = self._shift >= 0 and eq.n_clients - 1 + self._shift < self._size
        if clients.size and not holds_all:
            for i in (int(clients.min()), int(clients.max())):
                self._row(i + self._shift, f"client {i}")
        return Selection(self, eq._rows(clients, self._shift), clients, f"{self.name}[S]")

    def _row(self, row: int, who: str) -> int:
        if not 0 <= row < self._size:
            raise ValueError(
                f"block {self.name!r} has no row for {who}: it has {self._size} rows, row r "
                f"being node r + {self._first} and client i node i + {self._eq.client_node}"
            )
        return row

    def __getitem__(
        self, clients: int | np.integer | Int[np.ndarray, " s"] | list | slice
    ) -> Selection:
        return self._select(clients)

    # a handle in an expression is the whole block: ``W @ x - lr * y`` is ``W @ x[:] - lr *
    # y[:]``
    __array_ufunc__ = None

    def __rmatmul__(self, op) -> Expression:
        return self[:].__rmatmul__(op)

    def __matmul__(self, other):
        return self[:].__matmul__(other)

    def __mul__(self, factor) -> Expression:
        return self[:] * factor

    __rmul__ = __mul__

    def __truediv__(self, divisor) -> Expression:
        return self[:] / divisor

    def __neg__(self) -> Expression:
        return -self[:]

    def __add__(self, other) -> Expression:
        return self[:] + _whole(other)

    def __radd__(self, other) -> Expression:
        return _whole(other) + self[:]

    def __sub__(self, other) -> Expression:
        return self[:] - _whole(other)

    def __rsub__(self, other) -> Expression:
        return _whole(other) - self[:]

    def __setitem__(self, clients, value) -> None:
        self._eq._equation(self._select(clients), value)

    @property
    def at(self) -> _Indexed:
        """Rows picked by index, one per client: ``x.at[rows]`` is row ``rows[i]`` of the
        block for every client i (``rows`` of shape (N,)), ``x.at[S, rows]`` row
        ``rows[k]`` for client ``S[k]``. Rows are block-local (a table of per-sample rows:
        node i's entry j at row ``offset_i + j``); they are read and written as the
        clients' own rows, so ``vn[:] = g - table.at[drawn] + average`` and
        ``table.at[drawn] = g[:]`` are per-client equations. Written rows must be distinct.
        The indices are bound when the round runs (a phase that reads by index is node-
        local, but no round template carries it)."""
        return _Indexed(self)

    @property
    def server(self) -> Selection:
        """The server's row (node 0)."""
        eq = self._eq
        if eq.client_node == 0:
            raise ValueError(
                f"block {self.name!r} has no server row: this layout numbers clients from node "
                "0 (client_node=0)"
            )
        if self._first != 0:
            raise ValueError(
                f"block {self.name!r} has no server row: its row 0 is node {self._first} "
                f"(first_node={self._first})"
            )
        return Selection(self, 0, None, f"{self.name}.server")

    @server.setter
    def server(self, value) -> None:
        self._eq._equation(self.server, value)

    def __setattr__(self, key, value):
        if key == "server":
            BlockRows.server.fset(self, value)
            return
        raise AttributeError(f"block rows take x[S] = ... or x.server = ..., not x.{key} = ...")

    def __repr__(self) -> str:
        return f"BlockRows({self.name!r})"


class _Indexed:
    """``x.at``: the rows of a block picked by index (see :attr:`BlockRows.at`)."""

    __slots__ = ("handle",)

    def __init__(self, handle: BlockRows):
        self.handle = handle

    def _select(self, key) -> Selection:
        handle = self.handle
        eq, name = handle._eq, handle.name
        if isinstance(key, tuple):
            if len(key) != 2:
                raise TypeError(
                    f"{name}.at[...] takes rows (one per client) or (clients, rows), got "
                    f"{len(key)} indices"
                )
            who = key[0]
            if isinstance(who, slice) and who == slice(None):
                who = eq.cache.whole(eq.n_clients, 0)[1]
            elif isinstance(who, (int, np.integer)) and not isinstance(who, bool):
                who = np.array([int(who)], dtype=np.int64)
            clients, rows = eq._clients(who), key[1]
            if np.ndim(rows) == 0 and clients.size == 1:
                rows = np.atleast_1d(rows)
        else:
            clients, rows = eq.cache.whole(eq.n_clients, 0)[1], key
        arr = np.asarray(rows)
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise TypeError(
                f"{name}.at[...]: rows must be a 1-d integer array, got dtype {arr.dtype} and "
                f"shape {arr.shape}"
            )
        if arr.size != clients.size:
            raise ValueError(
                f"{name}.at[...]: rows must hold one row per client, {clients.size}, got "
                f"{arr.size}"
            )
        # (a copy, read-only: refilling the caller's array later changes no phase)
        arr = arr.astype(np.int64, copy=True)
        arr.flags.writeable = False
        if arr.size and (arr.min() < 0 or arr.max() >= handle._size):
            bad = arr[(arr < 0) | (arr >= handle._size)][0]
            raise ValueError(
                f"{name}.at[...]: row {bad} is out of range: block {name!r} has rows "
                f"0..{handle._size - 1}"
            )
        return Selection(handle, arr, clients, f"{name}.at[...]", view=True)

    def __getitem__(self, key) -> Selection:
        return self._select(key)

    def __setitem__(self, key, value) -> None:
        self.handle._eq._equation(self._select(key), value)

    def __repr__(self) -> str:
        return f"{self.handle!r}.at"


def _whole(value):
    """A block handle in an expression stands for all its rows."""
    return value[:] if isinstance(value, BlockRows) else value


def _operator(op):
    """``op`` as a :class:`~stochmix.mixing.rowsparse.RowSparse` (a SciPy sparse or NumPy
    square matrix is wrapped, once per use: give a RowSparse to have its phases kept)."""
    if isinstance(op, RowSparse):
        return op
    if sp.issparse(op) or isinstance(op, np.ndarray):
        if op.ndim != 2 or op.shape[0] != op.shape[1]:
            raise ValueError(f"W @ ...: W must be a square matrix, got shape {op.shape}")
        wrapped = RowSparse.whole(sp.csr_array(op))
        wrapped.reusable = False
        return wrapped
    raise TypeError(
        f"W @ ...: W must be a mixing operator (RowSparse, e.g. the method's mixing(k, rule)),"
        f" a SciPy sparse or a NumPy square matrix, got {type(op).__name__}"
    )


def _mixed(t: _Term, op) -> _Term:
    """``op @ t`` for a whole-block term: the rows ``op`` sets, the clients they hold."""
    if op.size != np.size(t.rows):
        raise ValueError(
            f"W @ {t.block}: W is {op.size} x {op.size} but block {t.block!r} has "
            f"{np.size(t.rows)} rows"
        )
    if op.rows.size == np.size(t.rows) or getattr(op, "closed", False):
        # (an activated edges' matrix stands for the whole block: the activated
        # equations restrict it, stochmix.engine.model.activated)
        return _with(t, op=op, whole=False)
    shift = int(t.rows[0] - t.over[0]) if np.size(t.rows) else 0
    return _with(t, op=op, whole=False, rows=op.rows, over=op.rows - shift)


def _mixed_clients(t: _Term, op):
    """The clients of ``op @ t`` (those of :func:`_mixed`'s term)."""
    if op.rows.size == np.size(t.rows) or getattr(op, "closed", False):
        return t.over
    return _mixed(t, op).over
