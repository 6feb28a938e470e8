"""Decentralized methods: no server, peers 0..n-1 mixing over a time-varying graph.

Peer i holds client i's objective (``model_offset = 0``). One "round" is one iteration
k, whose mixing matrix is ``graphs.matrix(k, rule)`` from a
:class:`~stochmix.mixing.GraphSequence` (edge j -> i with weight w means W[i, j] = w).
Every peer computes in every iteration, so run them with ``participation.Full(n)``.
The reported model is the network average; ``consensus`` records the spread around it.

Each method states what its convergence needs of its mixing (:attr:`DecentralizedMethod.needs`:
which rule attribute must give row-, column- or doubly stochastic matrices) and checks
every matrix it builds (once per distinct matrix: periodic sequences are checked over one
period) and that the graphs are strongly connected, over each period for periodic
sequences and at every step otherwise. A violation is a ValueError naming the step, the
rule and what fails; ``check_mixing=False`` turns the checks off, for research on broken
mixing.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from .._arrays import Array
from .._validate import _show, as_bool, as_float, choice
from ..engine import Block, Method, RunContext
from ..mixing.checks import KINDS, stochasticity_problem
from ..mixing.rowsparse import RowSparse
from ..mixing.sequences import RULES, GraphSequence


def _step_size(lr: float, decay: float, k: int) -> float:
    return lr / (k + 1) ** decay


class DecentralizedMethod(Method):
    """Shared parts: the graph sequence, W_k as a row-sparse operator, the checks of what
    the mixing must satisfy, and the outputs.

    A subclass states :attr:`needs`: for each attribute naming a weight rule, the kind of
    stochastic matrix its convergence needs ("row", "column" or "doubly"); :meth:`mixing`
    builds W_k under a rule and checks it against that need.
    """

    model_offset = 0
    #: rule attribute -> "row" | "column" | "doubly": what each rule's matrices must be.
    needs: dict = {}

    def __init__(self, lr, graphs: GraphSequence, decay=0.0, check_mixing=True):
        self.lr = as_float(lr, "lr", positive=True)
        if not isinstance(graphs, GraphSequence):
            raise TypeError(
                f"graphs must be a GraphSequence, got {type(graphs).__name__}: {_show(graphs)}"
            )
        self.graphs = graphs
        self.decay = as_float(decay, "decay", nonnegative=True)
        self.check_mixing = as_bool(check_mixing, "check_mixing")
        self._checked: set = set()

    def start(self, ctx: RunContext) -> None:
        if self.graphs.n_nodes != ctx.n_clients:
            raise ValueError(
                f"graphs has {self.graphs.n_nodes} nodes but the problem has "
                f"{ctx.n_clients} clients"
            )
        self._checked = set()

    def mixing(self, k: int, rule: str) -> RowSparse:
        """W_k under ``rule``, as an operator on every node; checked (see :attr:`needs`)
        the first time each distinct matrix is built."""
        w = self.graphs.matrix(k, rule)
        if self.check_mixing:
            self._check(k, rule, w)
        return RowSparse(w.shape[0], np.arange(w.shape[0]), w.tocsr())

    def _check(self, k: int, rule: str, w) -> None:
        period = self.graphs.period
        key = (k % period if period else k, rule)
        if period and key in self._checked:
            return
        for attribute, kind in self.needs.items():
            if getattr(self, attribute) != rule:
                continue
            problem = stochasticity_problem(w, kind, 1e-10)
            if problem is not None:
                raise ValueError(
                    f"{self.name}: W_{k} under {attribute}={rule!r} is not {KINDS[kind]} "
                    f"({problem}); {self.name} needs {KINDS[kind]} mixing there "
                    "(check_mixing=False runs it anyway)"
                )
        if not period:
            self._check_connected(k, 1, w)
        elif k % period == period - 1 and ("union", k % period) not in self._checked:
            self._check_connected(k - period + 1, period, w)
            self._checked.add(("union", k % period))
        if period:
            self._checked.add(key)

    def _check_connected(self, start: int, length: int, last) -> None:
        """The union of the graphs of steps start..start+length-1 is strongly connected."""
        union = abs(last)
        for j in range(start, start + length - 1):
            union = union + self.graphs.adjacency(j)
        from scipy.sparse.csgraph import connected_components  # imported when first needed

        count, _ = connected_components(union, directed=True, connection="strong")
        if count > 1:
            span = f"step {start}" if length == 1 else f"steps {start}..{start + length - 1}"
            raise ValueError(
                f"{self.name}: the graph of {span} is not strongly connected ({count} "
                "strongly connected components): information cannot reach every node "
                "(check_mixing=False runs it anyway)"
            )

    def check_everyone(self, participants: np.ndarray, ctx: RunContext) -> np.ndarray:
        if participants.size != ctx.n_clients:
            raise ValueError(
                f"{self.name} runs every node in every iteration; use participation Full(n) "
                f"(got {participants.size} of {ctx.n_clients} nodes)"
            )
        return participants

    def node_models(self, z, ctx: RunContext):
        """The model each node reports, shape (n, dim)."""
        return z[ctx.layout.slice(self.model_block)]

    def output(self, z, ctx: RunContext):
        return self.node_models(z, ctx).mean(axis=0)

    def consensus_error(self, z, ctx: RunContext) -> float:
        models = self.node_models(z, ctx)
        return float(((models - models.mean(axis=0)) ** 2).sum(axis=1).mean())


class DGD(DecentralizedMethod):
    r"""Decentralized gradient descent, adapt then combine:
    :math:`x \leftarrow W_k (x - a_k \nabla F(x))`, a_k = lr / (k+1)^decay.

    With a fixed step it stalls in an O(lr) neighbourhood of x_star; ``decay`` > 0 gives
    diminishing steps.
    """

    name = "DGD"
    #: row-stochastic W keeps a consensus a fixed point; doubly stochastic W (metropolis)
    #: is needed for the *unweighted* average's optimum
    needs = {"rule": "row"}

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", decay=0.0, check_mixing=True):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        nodes = self.check_everyone(participants, ctx)
        step = _step_size(self.lr, self.decay, r)
        adapt = ctx.phase("local step").keep("x", nodes).gradient("x", nodes, nodes, -step)
        combine = ctx.phase("combine").apply("x", "x", self.mixing(r, self.rule))
        return [adapt.build(), combine.build()]


class _Tracking(DecentralizedMethod):
    """Blocks x, tracker y and gradient memory g; y and g start at grad F(x0)."""

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("y", n_clients), Block("g", n_clients)]

    @staticmethod
    def refresh(ctx: RunContext, nodes: np.ndarray, label: str, keep: bool = True):
        """y <- y + grad F(x) - g (without the first y when ``keep`` is False);
        g <- grad F(x). Returns the builder, so more terms can be added."""
        builder = ctx.phase(label)
        if keep:
            builder.keep("y", nodes)
        return (
            builder.combine("y", nodes, "g", nodes, -1.0)
            .gradient("y", nodes, nodes, 1.0)
            .gradient("g", nodes, nodes, 1.0)
        )


class GradientTracking(_Tracking):
    r"""Gradient tracking (DIGing) on a time-varying graph, W_k doubly stochastic:

    .. math::

        x^{k+1} = W_k x^k - \alpha y^k,\qquad
        y^{k+1} = W_k y^k + \nabla F(x^{k+1}) - \nabla F(x^k),

    with y^0 = grad F(x^0). Converges linearly to x_star with a fixed step.
    """

    name = "GradientTracking"
    needs = {"rule": "doubly"}

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        nodes = self.check_everyone(participants, ctx)
        w = self.mixing(r, self.rule)
        phases = [self.refresh(ctx, nodes, "initial gradients").build()] if r == 0 else []
        move = (
            ctx.phase("mix and descend")
            .apply("x", "x", w)
            .combine("x", nodes, "y", nodes, -self.lr)
        )
        track = self.refresh(ctx, nodes, "track", keep=False).apply("y", "y", w)
        return phases + [move.build(), track.build()]


class PushPull(_Tracking):
    r"""Push-pull on a directed time-varying graph (R_k row-, C_k column-stochastic):

    .. math::

        x^{k+1} = R_k (x^k - \alpha y^k),\qquad
        y^{k+1} = C_k \big(y^k + \nabla F(x^{k+1}) - \nabla F(x^k)\big),

    with y^0 = grad F(x^0). The sum of y tracks the sum of the gradients, and the
    iterates reach x_star at a linear rate with a fixed step.
    """

    name = "PushPull"
    needs = {"row_rule": "row", "column_rule": "column"}

    def __init__(
        self, lr, graphs: GraphSequence, row_rule="row", column_rule="column", check_mixing=True
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.row_rule = choice(row_rule, "row_rule", RULES)
        self.column_rule = choice(column_rule, "column_rule", RULES)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        nodes = self.check_everyone(participants, ctx)
        pull = self.mixing(r, self.row_rule)
        phases = [self.refresh(ctx, nodes, "initial gradients").build()] if r == 0 else []
        move = ctx.phase("pull").apply("x", "x", pull).apply("x", "y", pull, -self.lr)
        push = ctx.phase("push").apply("y", "y", self.mixing(r, self.column_rule))
        return phases + [move.build(), self.refresh(ctx, nodes, "track").build(), push.build()]


class PushSum(DecentralizedMethod):
    r"""Subgradient-push (Nedić & Olshevsky 2014) with a weight block ``w`` (ones at the
    start; every column of a row holds the same weight). Iteration k, with C_k
    column-stochastic and a_k = lr / (k+1)^decay:

    .. math::

        u = C_k x,\quad w \leftarrow C_k w,\quad z = u / w,\quad
        x \leftarrow u - a_k \nabla F(z)

    Nodes report the de-biased z. The state keeps the pushed numerator u, so round k
    is "descend with a_{k-1} at z = u / w (from round 1 on), then push with C_k", and z
    after round k is read off the state. A fixed step leaves an O(lr) error.
    """

    name = "PushSum"
    needs = {"rule": "column"}

    def __init__(self, lr, graphs: GraphSequence, decay=0.0, rule="column", check_mixing=True):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("w", n_clients, "ones")]

    def points(self, z, ctx: RunContext, clients: np.ndarray):
        lay = ctx.layout
        return z[lay.rows("x", clients)] / z[lay.rows("w", clients)]

    def node_models(self, z, ctx: RunContext) -> Float[Array, "n d"]:
        return z[ctx.layout.slice("x")] / z[ctx.layout.slice("w")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        nodes = self.check_everyone(participants, ctx)
        phases = []
        if r > 0:
            step = _step_size(self.lr, self.decay, r - 1)
            descend = ctx.phase("descend").keep("x", nodes).gradient("x", nodes, nodes, -step)
            phases.append(descend.build())
        c = self.mixing(r, self.rule)
        return phases + [ctx.phase("push").apply("x", "x", c).apply("w", "w", c).build()]
