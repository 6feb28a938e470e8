"""Decentralized methods: no server, peers 0..n-1 mixing over a time-varying graph.

Peer i holds client i's objective (``client_node = 0``). One "round" is one iteration
k, whose mixing matrix is ``graphs.matrix(k, rule)`` from a
:class:`~stochmix.mixing.GraphSequence` (edge j -> i with weight w means W[i, j] = w).
With ``participation.Full(n)`` every peer computes in every iteration; any other process
activates some nodes (or, for gossip processes, some edges) in each iteration, and the
method's whole-block equations hold for the active nodes only, each mixing term pulling
or pushing as the method declares (:attr:`DecentralizedMethod.mixes`; the rules are in
:mod:`stochmix.engine.activated` and :mod:`stochmix.mixing.activation`). The reported
model is the network average; ``consensus`` records the spread around it.

Each method states what its convergence needs of its mixing (:attr:`DecentralizedMethod.needs`:
which rule attribute must give row-, column- or doubly stochastic matrices) and checks
every matrix it builds (once per distinct matrix: periodic sequences are checked over one
period) and that the graphs are strongly connected, over each period for periodic
sequences and at every step otherwise. A violation is a ValueError naming the step, the
rule and what fails; ``check_mixing=False`` turns the checks off, for research on broken
mixing.

Every method writes its iteration in the equation form (:mod:`stochmix.engine.equations`),
the mixing included: ``x[:] = W @ x - lr * y`` is one phase over whole blocks, and
``grad()`` is every node's gradient at its point.

Cost: W_k is taken from the sequence without a copy (``graphs.matrix(k, rule,
copy=False)``) and wrapped once per distinct matrix (:meth:`DecentralizedMethod.mixing`),
so equations written with the same W_k give the same phase object back from the run's
phase cache (:mod:`stochmix.engine.phase_cache`): static and periodic graphs are planned
once per distinct matrix. The mixing phases rewrite whole blocks, so the engine applies
W_k to a block as one sparse product (see :mod:`stochmix.engine.blockwise`). A
non-periodic sequence pays for building (and checking) its matrix, and planning its
phases, each step (its W_k are marked not reusable, so nothing keeps them).
"""

from __future__ import annotations

import copy

import numpy as np
from jaxtyping import Float

from .._arrays import Array, row_sums
from .._validate import as_bool, as_float, choice, show
from ..engine import Block, Equations, Method, RunContext, grad
from ..mixing.activation import edge_matrix
from ..mixing.checks import KINDS, stochasticity_problem
from ..mixing.rowsparse import RowSparse
from ..mixing.sequences import RULES, GraphSequence

__all__ = [
    "DGD",
    "DecentralizedMethod",
    "GradientTracking",
    "PushPull",
    "PushSum",
    "PushSumModels",
]


def _activation_kind(participation) -> str:
    """ "everyone" (every node in every iteration), "edges" (a process that activates
    edges: gossip) or "nodes" (any other process: node activation)."""
    if getattr(participation, "activates", "nodes") == "edges":
        return "edges"
    p = participation.probabilities
    if p is None:  # no closed-form marginals: a recorded trace shows them, else unknown
        masks = getattr(participation, "masks_array", None)
        if masks is None:
            return "unknown"
        return "everyone" if bool(np.all(masks)) else "nodes"
    return "everyone" if bool(np.all(p == 1.0)) else "nodes"


def _step_size(lr: float, decay: float, k: int) -> float:
    return lr / (k + 1) ** decay


def _average(models):
    """The mean of the rows of ``models`` (n, d), NumPy rows summed by
    :func:`~stochmix._arrays.row_sums` (fast for small d; the same result to rounding as
    ``mean(axis=0)``)."""
    if not isinstance(models, np.ndarray):
        return models.mean(axis=0)
    return row_sums(models) / models.shape[0]


class DecentralizedMethod(Method):
    """Shared parts: the graph sequence, W_k as a row-sparse operator, the checks of what
    the mixing must satisfy, and the outputs.

    A subclass states :attr:`needs`: for each attribute naming a weight rule, the kind of
    stochastic matrix its convergence needs ("row", "column" or "doubly"); :meth:`mixing`
    builds W_k under a rule and checks it against that need.
    """

    client_node = 0
    reports_node_average = True  # output and consensus_error: of node_models, below
    #: rule attribute -> "row" | "column" | "doubly": what each rule's matrices must be.
    needs: dict = {}

    #: caches a run fills (mixing operators), left out of the fingerprint
    _run_state = Method._run_state | {"_mixings", "_edges", "_repeats", "_unchecked"}

    def __init__(self, lr, graphs: GraphSequence, decay=0.0, check_mixing=True):
        self.lr = as_float(lr, "lr", positive=True)
        if not isinstance(graphs, GraphSequence):
            raise TypeError(
                f"graphs must be a GraphSequence, got {type(graphs).__name__}: {show(graphs)}"
            )
        self.graphs = graphs
        self.decay = as_float(decay, "decay", nonnegative=True)
        self.check_mixing = as_bool(check_mixing, "check_mixing")
        self._checked: set = set()
        self._mixings: dict = {}  # (k mod period, rule[, direction]) -> RowSparse
        self._edges: tuple | None = None  # (edges, nodes, mixing) of an edge-activated round
        self._unchecked = False  # a process whose activation is known only round by round

    def start(self, ctx: RunContext) -> None:
        if self.graphs.n_nodes != ctx.n_clients:
            raise ValueError(
                f"graphs has {self.graphs.n_nodes} nodes but the problem has "
                f"{ctx.n_clients} clients"
            )
        self._checked = set()
        self._mixings = {}
        self._edges = None

    def _step(self, k: int):
        """What identifies the graph of step k: ``k mod period``, or k itself."""
        period = self.graphs.period
        return k % period if period else k

    @property
    def mixes(self) -> dict:
        """Rule attribute -> how its mixing is activated when only some nodes are active:
        "pull" (``D W + I - D``) for a row- or doubly stochastic need, "push" (``W D + I -
        D``) for a column-stochastic one (see :mod:`stochmix.mixing.activation`)."""
        return {
            attribute: "push" if kind == "column" else "pull"
            for attribute, kind in self.needs.items()
        }

    def direction(self, rule: str) -> str:
        """How ``mixing(k, rule)`` is activated: that of the first rule attribute of
        :attr:`needs` set to ``rule`` (see :attr:`mixes`), "pull" if none is."""
        for attribute, direction in self.mixes.items():
            if getattr(self, attribute, None) == rule:
                return direction
        return "pull"

    def mixing(self, k: int, rule: str, direction: str | None = None) -> RowSparse:
        """W_k under ``rule``, as an operator on every node (the sequence's own read-only
        matrix, not a copy); checked (see :attr:`needs`) and wrapped once per distinct
        matrix: once per ``(k mod period, rule)`` for a periodic sequence, once per step
        otherwise (then marked not ``reusable``: no phase built from it is kept).

        ``W @ x`` in an equation applies it to the whole block ``x``. ``direction``
        ("pull" or "push"; by default :meth:`direction` of ``rule``) is how the equations
        activate it when only some nodes are active (:mod:`stochmix.engine.activated`).
        In a round of edge activation (gossip), the operator is the activated edges'
        matrix instead (:func:`~stochmix.mixing.activation.edge_matrix`: pairwise
        averaging, or W_k on those edges when the process says ``mixing="weights"``)."""
        direction = self.direction(rule) if direction is None else direction
        if self._edges is not None:
            edges, nodes, weights = self._edges
            base = self._whole(k, rule) if weights == "weights" else None
            op = edge_matrix(self.graphs.n_nodes, edges, nodes, base)
            op.mixes = direction
            return op
        key = (self._step(k), rule, direction)
        found = self._mixings.get(key)
        if found is None:
            found = copy.copy(self._whole(k, rule))
            found.mixes = direction
            self._mixings[key] = found
        return found

    def _whole(self, k: int, rule: str) -> RowSparse:
        """W_k under ``rule`` as a RowSparse over every node, checked once (see
        :meth:`mixing`)."""
        key = (self._step(k), rule)
        op = self._mixings.get(key)
        if op is None:
            w = self.graphs.matrix(k, rule, copy=False)
            if self.check_mixing:
                self._check(k, rule, w)
            op = RowSparse.whole(w)
            if self.graphs.period is None:
                self._mixings.clear()  # a step's matrix never comes back
                op.reusable = False
            self._mixings[key] = op
        return op

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

    #: Whether the iterations after the first build the same phases up to which nodes
    #: take part (no coefficient changes with k): then small gossip rounds may run in
    #: compiled segments (:meth:`segment_key`). The built-in methods say so.
    rounds_repeat = False

    def segment_key(self, r: int):
        """``r == 0`` (the first iteration may differ: trackers start, EXTRA's first step)
        where :attr:`rounds_repeat` holds, the step does not decay, and gradients are
        taken at, and nodes report, the model rows; None otherwise."""
        repeats = self.__dict__.get("_repeats")
        if repeats is None:
            plain = type(self).points is Method.points
            plain = plain and type(self).node_models is DecentralizedMethod.node_models
            repeats = self.rounds_repeat and not getattr(self, "decay", 0.0) and plain
            self.__dict__["_repeats"] = repeats
        return (r == 0) if repeats else None

    def round_equations(self, participants: np.ndarray, ctx: RunContext) -> Equations:
        """The equations of this iteration, activated for its active nodes.

        Each ``round_phases`` calls this first, then writes its iteration over whole
        blocks into the returned equations (``eq.blocks(...)``, ``x[:] = W @ x - a *
        grad()``, ``eq.build(label)``). With every node active (``Full(n)``) they are the
        plain equations; otherwise they hold for the active nodes only, each mixing
        operator activated by its direction (:mod:`stochmix.engine.activated`): the
        inactive nodes keep every row, but for what active nodes push to them. In a
        round of edge activation (``ctx.activation.edges``), :meth:`mixing` gives the
        activated edges' matrix.

        Args:
            participants (np.ndarray): int64 array of shape (m,), the round's active
                nodes (sorted node indices in ``[0, n)``).
            ctx (RunContext): the run's context; ``ctx.n_clients`` is the number of
                nodes n, ``ctx.activation`` the round's activation record (or None).

        Returns:
            Equations: fresh :class:`~stochmix.engine.equations.Equations` of this run
            (``self.equations(ctx)``), nodes numbered from row 0 (``client_node = 0``),
            activated when m < n.
        """
        activation = getattr(ctx, "activation", None)
        edges = None if activation is None else activation.edges
        self._edges = None if edges is None else (edges, participants, ctx.edge_mixing)
        eq = self.equations(ctx)
        if participants.size != ctx.n_clients:
            if self._unchecked and edges is None and self.check_mixing:
                self._refuse_node_activation("a process without known marginals")
            eq.activate(participants)
        return eq

    def check_everyone(self, participants: np.ndarray, ctx: RunContext) -> Equations:
        """The former name of :meth:`round_equations` (it no longer refuses partial
        participation); kept for methods written against it."""
        return self.round_equations(participants, ctx)

    def check_participation(self, participation) -> None:
        """Refuse, before any work, an activation that breaks what :attr:`needs` asks of
        the mixing: node activation keeps row-stochastic pulls (``D W + I - D``) and
        column-stochastic pushes (``W D + I - D``), never a doubly stochastic matrix
        (edge activation, gossip, keeps it). ``check_mixing=False`` allows it."""
        kind = _activation_kind(participation)
        self._unchecked = kind == "unknown"  # checked at the first partial round instead
        if kind != "nodes" or not self.check_mixing:
            return
        self._refuse_node_activation(participation)

    def _refuse_node_activation(self, participation) -> None:
        who = participation if isinstance(participation, str) else repr(participation)
        keeps = {"pull": "row", "push": "column"}
        for attribute, need in self.needs.items():
            direction = self.mixes.get(attribute, "pull")
            if need != keeps[direction]:
                raise ValueError(
                    f"participation: {self.name} needs {KINDS[need]} mixing "
                    f"({attribute}={getattr(self, attribute)!r}), but node activation by "
                    f"{who} makes its {direction} matrix D W + I - D "
                    f"{'row' if direction == 'pull' else 'column'}-stochastic only; use "
                    "edge activation (RandomEdge, RandomMatching, OnePeerPermutation), "
                    "which keeps it doubly stochastic, Full(n), or check_mixing=False"
                )

    def node_models(self, z, ctx: RunContext):
        """The model each node reports, shape (n, dim)."""
        return z[ctx.layout.slice(self.model_block)]

    # Method declares a plain class attribute, which subclasses set in their bodies; here it
    # follows model_block. Nothing assigns it on an instance, the one thing a property
    # would refuse.
    @property
    def checked_by_output(self) -> tuple[str, ...]:  # type: ignore[override]
        """The model block: the network average sums every row of it (as ``x / w`` for
        push-sum), so a NaN or Inf there shows in the reported model."""
        return (self.model_block,)

    def output(self, z, ctx: RunContext):
        """The network average of the node models, shape (dim,)."""
        return _average(self.node_models(z, ctx))

    def consensus_error(self, z, ctx: RunContext) -> float:
        models = self.node_models(z, ctx)
        return float(((models - models.mean(axis=0)) ** 2).sum(axis=1).mean())


class DGD(DecentralizedMethod):
    r"""Decentralized gradient descent, a_k = lr / (k+1)^decay, in one of two forms:

    .. math::

        \text{atc:}\quad x^{k+1} = W_k \big(x^k - a_k \nabla F(x^k)\big),\qquad
        \text{cta:}\quad x^{k+1} = W_k x^k - a_k \nabla F(x^k).

    ``form="cta"`` (combine then adapt) is the recursion of Nedić & Ozdaglar (2009);
    ``form="atc"`` (adapt then combine) is the diffusion form of Chen & Sayed (2012).
    **The default is "atc"**: it is what this class has always computed (changing it would
    change the numbers of every existing configuration and result), and its fixed points
    and stability do not depend on the spectrum of W_k the way CTA's do (CTA needs a step
    below (1 + λ_min(W)) / L). Both stall in an O(lr) neighbourhood of x_star with a fixed
    step; ``decay`` > 0 gives diminishing steps. State: one block x of shape (n, d), row i
    is node i's model. ATC is two phases, the local step (node-local) and the combine
    ``x <- W_k x`` (one sparse product); CTA is one whole-block phase.

    Activation (:mod:`stochmix.engine.activated`): W_k pulls, and node activation keeps
    it row-stochastic (``D W + I - D``): DGD runs under any participation process.

    References:
        - A. Nedić and A. Ozdaglar, "Distributed subgradient methods for multi-agent
          optimization", IEEE Transactions on Automatic Control 54(1):48-61, 2009 (CTA).
        - J. Chen and A. H. Sayed, "Diffusion adaptation strategies for distributed optimization
          and learning over networks", IEEE Transactions on Signal Processing 60(8):4289-4305,
          2012 (ATC).
    """

    name = "DGD"
    rounds_repeat = True
    #: row-stochastic W keeps a consensus a fixed point; doubly stochastic W (metropolis)
    #: is needed for the *unweighted* average's optimum
    needs = {"rule": "row"}

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        rule="metropolis",
        decay=0.0,
        check_mixing=True,
        form="atc",
    ):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)
        self.form = choice(form, "form", ("atc", "cta"))

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        (x,) = eq.blocks("x")
        a, w = _step_size(self.lr, self.decay, r), self.mixing(r, self.rule)
        if self.form == "cta":
            x[:] = w @ x - a * grad()
            return [eq.build("combine and descend")]
        x[:] -= a * grad()
        adapt = eq.build("local step")
        x[:] = w @ x
        return [adapt, eq.build("combine")]


class _Tracking(DecentralizedMethod):
    """Blocks x, tracker y and gradient memory g; y and g start at grad F(x0)."""

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("y", n_clients), Block("g", n_clients)]

    @staticmethod
    def refresh(eq: Equations) -> None:
        """The tracker's update without mixing: y <- y + grad F(x) - g, g <- grad F(x)
        (the phase's equations; the caller builds it)."""
        y, g = eq.blocks("y", "g")
        y[:] += grad() - g
        g[:] = grad()

    def start_tracking(self, eq: Equations, r: int) -> list:
        """Round 0's first phase: y^0 = grad F(x^0) and g = grad F(x^0) (y and g start
        at zero) at every node, whatever the activation: the initialisation is not an
        iteration."""
        if r > 0:
            return []
        active, eq.active = eq.active, None
        self.refresh(eq)
        phase = eq.build("initial gradients")
        eq.active = active
        return [phase]


class GradientTracking(_Tracking):
    r"""Gradient tracking on a time-varying graph, W_k doubly stochastic, in one of two
    forms (y^0 = grad F(x^0) in both):

    .. math::

        \text{cta (DIGing):}\quad x^{k+1} = W_k x^k - \alpha y^k,\qquad
        y^{k+1} = W_k y^k + \nabla F(x^{k+1}) - \nabla F(x^k);

        \text{atc (ATC-GT / AugDGM):}\quad x^{k+1} = W_k (x^k - \alpha y^k),\qquad
        y^{k+1} = W_k \big(y^k + \nabla F(x^{k+1}) - \nabla F(x^k)\big).

    **The default is "cta"**, DIGing as Nedić, Olshevsky & Shi (2017) state it on
    time-varying graphs (and what this class has always computed); ``form="atc"`` is Xu et
    al.'s (2015) adapt-then-combine variant, which tolerates larger steps. Both converge
    linearly to x_star with a fixed step. State: blocks x, y and g, each (n, d) (g keeps
    grad F(x^k)). CTA is two whole-block phases, "mix and descend" (x) and "track" (y and
    g, with the n gradients); ATC is "mix and descend" (x from x and y with W_k), "track"
    (node-local) and "mix tracker" (y with W_k).

    Activation (:mod:`stochmix.engine.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    Under node activation with ``check_mixing=False`` the sum of y no longer tracks the
    sum of the gradients (the pulled y loses mass); :class:`PushPull` with both rules
    doubly stochastic (x pulls, y pushes) keeps it.

    References:
        - A. Nedić, A. Olshevsky and W. Shi, "Achieving geometric convergence for distributed
          optimization over time-varying graphs", SIAM Journal on Optimization
          27(4):2597-2633, 2017 (CTA).
        - J. Xu, S. Zhu, Y. C. Soh and L. Xie, "Augmented distributed gradient methods for
          multi-agent optimization under uncoordinated constant stepsizes", IEEE Conference on
          Decision and Control (CDC), 2055-2060, 2015 (ATC).
    """

    name = "GradientTracking"
    rounds_repeat = True
    needs = {"rule": "doubly"}

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True, form="cta"):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)
        self.form = choice(form, "form", ("atc", "cta"))

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = self.start_tracking(eq, r)
        w = self.mixing(r, self.rule)
        if self.form == "atc":
            return [*first, *_pull_track_push(eq, self.lr, w, w)]
        return [*first, *_descend_then_track(eq, self.lr, w, w, "mix and descend")]


def _pull_track_push(eq: Equations, lr: float, row, column) -> list:
    """x <- R_k (x - lr y); y <- C_k (y + grad F(x) - g), g <- grad F(x): three phases,
    "pull" and "push" whole-block products, "track" node-local."""
    x, y = eq.blocks("x", "y")
    x[:] = row @ (x - lr * y)
    pull = eq.build("pull")
    _Tracking.refresh(eq)
    track = eq.build("track")
    y[:] = column @ y
    return [pull, track, eq.build("push")]


class PushPull(_Tracking):
    r"""Push-pull on a directed time-varying graph (R_k row-, C_k column-stochastic), in
    one of two forms (y^0 = grad F(x^0) in both):

    .. math::

        \text{atc:}\quad x^{k+1} = R_k (x^k - \alpha y^k),\qquad
        y^{k+1} = C_k \big(y^k + \nabla F(x^{k+1}) - \nabla F(x^k)\big);

        \text{ab:}\quad x^{k+1} = R_k x^k - \alpha y^k,\qquad
        y^{k+1} = C_k y^k + \nabla F(x^{k+1}) - \nabla F(x^k).

    **The default is "atc"**, the push-pull form of Pu et al. as the FOCUS paper writes it
    (what this class has always computed); ``form="ab"`` is the AB algorithm of Xin & Khan
    (2018), mixing before the step and tracking after the push. In both the sum of y
    tracks the sum of the gradients, and the iterates reach x_star at a linear rate with a
    fixed step. State: blocks x, y and g, each (n, d). ATC is "pull" (x from x and y with
    R_k, whole blocks), "track" (node-local) and "push" (y with C_k, whole block); AB is
    "pull" (x <- R_k x - lr y) and "track" (y <- C_k y + grad F(x) - g, g <- grad F(x)),
    both whole-block.

    Activation (:mod:`stochmix.engine.activated`): x pulls with R_k (``D R + I - D``,
    row-stochastic) and y pushes with C_k (``C D + I - D``, column-stochastic), so node
    activation keeps both: the sum of y stays the sum of the latest gradients, and with
    every node active with positive probability the iterates reach x_star (the
    asynchronous push-pull of Tian, Sun and Scutari, 2020; FOCUS on a star graph).

    References:
        - S. Pu, W. Shi, J. Xu and A. Nedić, "Push-pull gradient methods for distributed
          optimization in networks", IEEE Transactions on Automatic Control 66(1):1-16, 2021
          (published online 2020).
        - R. Xin and U. A. Khan, "A linear algorithm for optimization over directed graphs with
          geometric convergence", IEEE Control Systems Letters 2(3):315-320, 2018 (AB).
    """

    name = "PushPull"
    rounds_repeat = True
    needs = {"row_rule": "row", "column_rule": "column"}

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        row_rule="row",
        column_rule="column",
        check_mixing=True,
        form="atc",
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.row_rule = choice(row_rule, "row_rule", RULES)
        self.column_rule = choice(column_rule, "column_rule", RULES)
        self.form = choice(form, "form", ("atc", "ab"))

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = self.start_tracking(eq, r)
        row = self.mixing(r, self.row_rule, "pull")
        column = self.mixing(r, self.column_rule, "push")
        if self.form == "atc":
            return [*first, *_pull_track_push(eq, self.lr, row, column)]
        return [*first, *_descend_then_track(eq, self.lr, row, column, "pull")]


def _descend_then_track(eq: Equations, lr: float, row, column, label: str) -> list:
    """x <- R_k x - lr y; then y <- C_k y + grad F(x) - g, g <- grad F(x) (at the new x):
    two whole-block phases."""
    x, y, g = eq.blocks("x", "y", "g")
    x[:] = row @ x - lr * y
    move = eq.build(label)
    y[:] = column @ y + grad() - g
    g[:] = grad()
    return [move, eq.build("track")]


class PushSumModels:
    """Push-sum de-biasing, for methods with a weight block ``w`` beside the numerators
    ``x``: gradients are taken at, and nodes report, ``x / w`` row by row."""

    def points(self, z, ctx: RunContext, clients: np.ndarray):
        lay = ctx.layout
        return z[lay.rows("x", clients)] / z[lay.rows("w", clients)]

    def node_models(self, z, ctx: RunContext) -> Float[Array, "n d"]:
        return z[ctx.layout.slice("x")] / z[ctx.layout.slice("w")]


class PushSum(PushSumModels, DecentralizedMethod):
    r"""Subgradient-push (Nedić & Olshevsky 2015) with a weight block ``w`` (ones at the
    start; every column of a row holds the same weight). Iteration k, with C_k
    column-stochastic and a_k = lr / (k+1)^decay:

    .. math::

        u = C_k x,\quad w \leftarrow C_k w,\quad z = u / w,\quad
        x \leftarrow u - a_k \nabla F(z)

    Nodes report the de-biased z. The state keeps the pushed numerator u, so round k
    is "descend with a_{k-1} at z = u / w (from round 1 on), then push with C_k", and z
    after round k is read off the state. A fixed step leaves an O(lr) error. State:
    blocks x and w, each (n, d); "push" mixes both with C_k (whole blocks).

    Activation (:mod:`stochmix.engine.activated`): C_k pushes (``C D + I - D`` stays
    column-stochastic): under node activation or Poisson clocks this is asynchronous
    gradient push (Assran and Rabbat, 2021); with lr small, push-sum gossip (Kempe,
    Dobra and Gehrke, 2003).

    References:
        - A. Nedić and A. Olshevsky, "Distributed optimization over time-varying directed
          graphs", IEEE Transactions on Automatic Control 60(3):601-615, 2015.
    """

    name = "PushSum"
    needs = {"rule": "column"}

    def __init__(self, lr, graphs: GraphSequence, decay=0.0, rule="column", check_mixing=True):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("w", n_clients, "ones")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, w = eq.blocks("x", "w")
        phases = []
        if r > 0:
            x[:] -= _step_size(self.lr, self.decay, r - 1) * grad()  # at z = x / w
            phases.append(eq.build("descend"))
        c = self.mixing(r, self.rule)
        x[:] = c @ x
        w[:] = c @ w
        return [*phases, eq.build("push")]
