r"""Decentralized proximal-gradient methods for composite problems F_i + r: PG-EXTRA and
NIDS with a prox.

On a :class:`~stochmix.problems.Composite` problem the gradients are the smooth parts'
and r enters through its proximal operator, a nonlinear row map
(:class:`~stochmix.engine.RowMap`) applied to every active node's row at once
(:class:`ProxStep`). On a smooth problem the prox is the identity and is left out:
PG-EXTRA is then :class:`~stochmix.algorithms.EXTRA` and the proximal NIDS is
:class:`~stochmix.algorithms.NIDS`, on the same fast paths.

One round is one iteration k (computing x^{k+1}); the prox step is the gradient step
``lr``. Both converge to the composite minimiser with a fixed step (the smooth parts
convex and L-smooth, W symmetric doubly stochastic), linearly when the smooth part is
strongly convex.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_float, choice
from ..engine import Block, RunContext, grad
from ..engine.model.equations import Selection
from ..engine.model.round_scalars import RoundScalar
from ..mixing.sequences import RULES, GraphSequence
from ..problems.regularizers import prox_kernel
from .decentralized_base import DecentralizedMethod

__all__ = ["PGEXTRA", "ProxNIDS", "ProxStep", "map_rows", "prox_map", "prox_phase", "prox_rows"]


class ProxStep:
    """The row function ``v -> prox_{t r}(v)`` of a regularizer r, every row at once (see
    :meth:`~stochmix.problems.regularizers.Regularizer.prox`); a single source row gives
    its prox to every target row."""

    def __init__(self, regularizer, step: float):
        self.regularizer = regularizer
        self.step = step
        self.name = f"prox of {regularizer!r}"
        #: the prox as an element-wise kernel the compiled programs apply inside a run
        #: (:func:`~stochmix.problems.regularizers.prox_kernel`), or None; a step that is
        #: a :class:`~stochmix.engine.model.round_scalars.RoundScalar` gives round scalars
        #: (a template binds each round's)
        self.row_kernel = prox_kernel(regularizer, float(step))
        if self.row_kernel is not None and isinstance(step, RoundScalar):
            name, coefs = self.row_kernel
            self.row_kernel = name, tuple(
                RoundScalar(c, _KernelScalar(regularizer, step.rule, k))
                for k, c in enumerate(coefs)
            )

    def __call__(self, v, *, info):
        out = self.regularizer.prox(v, self.step)
        rows = np.size(info.rows)
        if out.shape[0] != rows:  # one source row for every target row
            out = np.repeat(out, rows, axis=0)
        return out


class _KernelScalar:
    """Round ``r`` -> scalar ``k`` of the prox kernel of ``regularizer`` with the step
    ``rule(r)``."""

    def __init__(self, regularizer, rule, k: int):
        self.regularizer, self.rule, self.k = regularizer, rule, k

    def __call__(self, r: int) -> float:
        found = prox_kernel(self.regularizer, float(self.rule(r)))
        assert found is not None  # (it was a kernel in the round that built it)
        return found[1][self.k]


def prox_map(ctx: RunContext, target: str, rows, source, step: float, r: int, label="prox"):
    """The phase ``target[rows] <- prox_{step r}(source)`` (``source`` a block name, its
    same rows, or ``(block, rows)``), r the problem's regularizer (``ctx.regularizer``,
    which must be set)."""
    function = ProxStep(ctx.regularizer, step)
    return ctx.map(target, rows, function, source, round=r, label=label)


def map_rows(ctx: RunContext, target: Selection, function, *sources: Selection, round: int,
             label: str = "map"):  # fmt: skip
    """The row map ``target <- function(*sources)`` (:meth:`RunContext.map`) between row
    selections of the equations (``x[S]``, ``x.server``): the selections name the blocks
    and rows, so no method counts server and client rows by hand. A source of one row
    (``x.server``) is read by every target row."""
    specs = [(s.handle.name, s.rows) for s in sources]
    return ctx.map(target.handle.name, target.rows, function, *specs, round=round, label=label)


def prox_rows(ctx: RunContext, target: Selection, source: Selection, step: float, r: int):
    """:func:`prox_map` between row selections: ``target <- prox_{step r}(source)``, e.g.
    ``prox_rows(ctx, x[S], x[S], lr, r)`` or ``prox_rows(ctx, x.server, z.server, t, r)``
    (labelled ``"prox <target block>"``)."""
    function = ProxStep(ctx.regularizer, step)
    return map_rows(ctx, target, function, source, round=r, label=f"prox {target.handle.name}")


def prox_phase(ctx: RunContext, eq, target: str, source: str, step: float, r: int):
    """:func:`prox_map` over the equations' active nodes (every node when all are
    active)."""
    rows = eq.active if eq.active is not None else np.arange(ctx.n_clients)
    return prox_map(ctx, target, rows, source, step, r)


class _Proximal(DecentralizedMethod):
    proximal = True
    needs = {"rule": "doubly"}
    rounds_repeat = True

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)


class PGEXTRA(_Proximal):
    r"""PG-EXTRA, EXTRA with a proximal step, W~ = (I + W)/2:

    .. math::

        x^{1/2} &= W_0 x^0 - \alpha \nabla F(x^0),\qquad
            x^1 = \operatorname{prox}_{\alpha r}(x^{1/2}),\\
        x^{k+1/2} &= W_k x^k + x^{k-1/2} - \tilde W_k x^{k-1}
                     - \alpha\big(\nabla F(x^k) - \nabla F(x^{k-1})\big),\qquad
        x^{k+1} = \operatorname{prox}_{\alpha r}(x^{k+1/2}),

    row i of x^k node i's iterate, grad F the smooth parts' gradients, prox applied row
    by row (the same r at every node: the network minimises (1/n) sum_i f_i + r). The
    step ``lr`` = alpha multiplies the gradients and is the prox step. State: blocks
    ``x`` (the iterate), ``h`` (the half point x^{k-1/2}), ``xp`` (x^{k-1}) and ``g``
    (grad F(x^{k-1})), each (n, d), zero but x at the start; round 0 is the first line
    (every node takes it, whatever the activation), round k >= 1 the second. A round is
    one whole-block phase ("extra step") and the prox (a row map, left out on a smooth
    problem, where PG-EXTRA is EXTRA).

    Activation: as :class:`~stochmix.algorithms.EXTRA` (doubly stochastic mixing: edge
    gossip keeps it, node activation is refused unless ``check_mixing=False``); the prox
    is taken by the active nodes.

    References:
        - W. Shi, Q. Ling, G. Wu and W. Yin, "A proximal gradient algorithm for
          decentralized composite optimization", IEEE Transactions on Signal Processing
          63(22):6013-6023, 2015.
    """

    name = "PG-EXTRA"

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients, "model"),
            Block("h", n_clients),
            Block("xp", n_clients),
            Block("g", n_clients),
        ]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        if r == 0:  # the first step starts the memory: every node takes it
            eq.active, self._edges = None, None
        x, h, xp, g = eq.blocks("x", "h", "xp", "g")
        a, w = self.lr, self.mixing(r, self.rule)
        half = h if ctx.regularizer is not None else x  # smooth: x^{k+1/2} is x^{k+1}
        if r == 0:
            half[:] = w @ x - a * grad()
        elif half is h:
            h[:] = w @ x + h - 0.5 * (w @ xp + xp) - a * (grad() - g)
        else:
            x[:] = w @ x + x - 0.5 * (w @ xp + xp) - a * (grad() - g)
        xp[:] = x
        g[:] = grad()
        phases = [eq.build("first step" if r == 0 else "extra step")]
        prox = prox_phase(ctx, eq, "x", "h", a, r) if half is h else None
        return phases if prox is None else [*phases, prox]


class ProxNIDS(_Proximal):
    r"""NIDS with a proximal step (the composite form of :class:`~stochmix.algorithms.NIDS`),
    W~ = I - c alpha (I - W), c = 1/(2 alpha) by default (W~ = (I + W)/2):

    .. math::

        z^1 &= x^0 - \alpha \nabla F(x^0),\qquad x^1 = \operatorname{prox}_{\alpha r}(z^1),\\
        z^{k+1} &= z^k - x^k + \tilde W_k\big(2 x^k - x^{k-1}
                   - \alpha \nabla F(x^k) + \alpha \nabla F(x^{k-1})\big),\qquad
        x^{k+1} = \operatorname{prox}_{\alpha r}(z^{k+1}).

    The first iteration does not communicate. Steps up to about 2/L whatever the network
    (the paper allows c alpha up to 1 / (1 - lambda_min(W))). ``lr`` = alpha multiplies
    the gradients and is the prox step. State: blocks ``x`` (the iterate), ``z`` (the
    point before the prox), ``psi`` (x^{k-1} - alpha grad F(x^{k-1})) and ``phi`` (the
    combined point), each (n, d). A round is "adapt" (node-local: psi and phi),
    "combine" (z from z, x and W~ phi, one sparse product) and the prox (a row map). On
    a smooth problem z = x and the method is :class:`~stochmix.algorithms.NIDS` (to
    rounding: the same recursion in other variables).

    Activation: as :class:`~stochmix.algorithms.NIDS` (doubly stochastic mixing).

    References:
        - Z. Li, W. Shi and M. Yan, "A decentralized proximal-gradient method with
          network independent step-sizes and separated convergence rates", IEEE
          Transactions on Signal Processing 67(17):4494-4506, 2019.
    """

    name = "NIDS-prox"

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", c=None, check_mixing=True):
        super().__init__(lr, graphs, rule, check_mixing)
        self.c = None if c is None else as_float(c, "c", positive=True)
        self.theta = 0.5 if self.c is None else self.c * self.lr

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients, "model"),
            Block("z", n_clients),
            Block("psi", n_clients),
            Block("phi", n_clients),
        ]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        if r == 0:
            eq.active, self._edges = None, None
        x, z, psi, phi = eq.blocks("x", "z", "psi", "phi")
        a, theta = self.lr, self.theta
        if r == 0:
            psi[:] = x - a * grad()
            z[:] = x - a * grad()
            phases = [eq.build("first step")]
        else:
            psi[:] = x - a * grad()
            phi[:] = 2.0 * x - psi - a * grad()
            adapt = eq.build("adapt")
            w = self.mixing(r, self.rule)
            z[:] += theta * (w @ phi) + (1.0 - theta) * phi - x
            phases = [adapt, eq.build("combine")]
        if ctx.regularizer is None:
            x[:] = z  # the identity prox
            return [*phases, eq.build("no prox")]
        return [*phases, prox_phase(ctx, eq, "x", "z", a, r)]
