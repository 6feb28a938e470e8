"""What every decentralized method shares: the graph sequence, checked and activated
mixing, and the network-average output (:class:`DecentralizedMethod`).

Peer i holds client i's objective (``client_node = 0``). One "round" is one iteration
k, whose mixing matrix is ``graphs.matrix(k, rule)`` from a
:class:`~stochmix.mixing.GraphSequence` (edge j -> i with weight w means W[i, j] = w).
With ``participation.Full(n)`` every peer computes in every iteration; any other process
activates some nodes (or, for gossip processes, some edges) in each iteration, and the
method's whole-block equations hold for the active nodes only, each mixing term pulling
or pushing as the method declares (:attr:`DecentralizedMethod.mixes`; the rules are in
:mod:`stochmix.engine.model.activated` and :mod:`stochmix.mixing.activation`). The reported
model is the network average; ``consensus`` records the spread around it.

Each method states what its convergence needs of its mixing (:attr:`DecentralizedMethod.needs`:
which rule attribute must give row-, column- or doubly stochastic matrices) and checks
every matrix it builds (once per distinct matrix: periodic sequences are checked over one
period) and that the graphs are strongly connected, over each period for periodic
sequences and at every step otherwise. A violation is a ValueError naming the step, the
rule and what fails; ``check_mixing=False`` turns the checks off, for research on broken
mixing.

Every method writes its iteration in the equation form (:mod:`stochmix.engine.model.equations`),
the mixing included: ``x[:] = W @ x - lr * y`` is one phase over whole blocks, and
``grad()`` is every node's gradient at its point.

Cost: W_k is taken from the sequence without a copy (``graphs.matrix(k, rule,
copy=False)``) and wrapped once per distinct matrix (:meth:`DecentralizedMethod.mixing`),
so equations written with the same W_k give the same phase object back from the run's
phase cache (:mod:`stochmix.engine.model.phase_cache`): static and periodic graphs are planned
once per distinct matrix. The mixing phases rewrite whole blocks, so the engine applies
W_k to a block as one sparse product (see :mod:`stochmix.engine.model.blockwise`). A
non-periodic sequence pays for building (and checking) its matrix, and planning its
phases, each step (its W_k are marked not reusable, so nothing keeps them).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from jaxtyping import Float

from .._arrays import Array, row_sums
from .._validate import as_bool, as_float, show
from ..engine import Equations, Method, RunContext
from ..mixing.activation import edge_matrix
from ..mixing.checks import KINDS, stochasticity_problem
from ..mixing.reach import activation_reach_problem
from ..mixing.rowsparse import RowSparse
from ..mixing.sequences import GraphSequence

__all__ = ["DecentralizedMethod", "require_everyone"]


def _activation_kind(participation) -> str:
    """ "everyone" (every node in every iteration), "edges" (a process that activates
    edges: gossip) or "nodes" (any other process: node activation)."""
    if getattr(participation, "activates", "nodes") == "edges":
        return "edges"
    if getattr(participation, "drops_nodes", False):  # thinned by a clock or lost uploads
        return "nodes"
    p = participation.probabilities
    if p is None:  # no closed-form marginals: a recorded trace shows them, else unknown
        masks = getattr(participation, "masks_array", None)
        if masks is None:
            return "unknown"
        return "everyone" if bool(np.all(masks)) else "nodes"
    return "everyone" if bool(np.all(p == 1.0)) else "nodes"


def require_everyone(participation, name: str, reason: str) -> None:
    """Refuse, with an error naming ``participation``, a process that does not activate
    every node in every round (:func:`_activation_kind` is not "everyone"), for a method
    ``name`` whose recursion needs them all (``reason`` says why)."""
    if _activation_kind(participation) != "everyone":
        raise ValueError(
            f"participation must be Full(n) for {name} ({reason}), got {participation!r}"
        )


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
    #: attributes :meth:`start` derives from the method's own graphs (a tuning read from
    #: W's spectrum, say): an analysis that runs the method's iteration with other matrices
    #: (the per-agent certificates) keeps them as the method's own graphs give them.
    graph_tuned: frozenset = frozenset()

    #: caches a run fills (mixing operators), left out of the fingerprint
    _run_state = Method._run_state | {
        "_mixings", "_edges", "_repeats", "_unchecked", "_activation"
    }

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
        activate it when only some nodes are active (:mod:`stochmix.engine.model.activated`).
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

        def build() -> RowSparse:
            w = self.graphs.matrix(k, rule, copy=False)
            if self.check_mixing:
                self._check(k, rule, w)
            return RowSparse.whole(w)

        return self.operators(k, rule, build)

    def operators(self, k: int, name: str, build):
        """``build()`` for the graph of step k, made once per distinct graph and kept in
        the run's operator cache, as :meth:`mixing` keeps W_k: once per ``(k mod period,
        name)`` for a periodic sequence, once per step otherwise (the cache then holds one
        step, and the RowSparse operators ``build`` gives, alone or in a tuple, are marked
        not ``reusable``: no phase built from them is kept). ``name`` tells apart what one
        step builds (a weight rule for W_k; a method's own operators, such as ADMM's
        Laplacians, under a name of their own)."""
        key = (self._step(k), name)
        found = self._mixings.get(key)
        if found is None:
            found = build()
            if self.graphs.period is None:
                self._mixings.clear()  # a step's operators never come back
                for op in found if isinstance(found, tuple) else (found,):
                    if isinstance(op, RowSparse):
                        op.reusable = False
            self._mixings[key] = found
        return found

    def _check(self, k: int, rule: str, w) -> None:
        period = self.graphs.period
        key = (k % period if period else k, rule)
        if period and key in self._checked:
            return
        guarantees = getattr(self.graphs, "guarantees", None)
        declared = guarantees(rule) if guarantees is not None else frozenset()
        for attribute, kind in self.needs.items():
            if getattr(self, attribute) != rule or kind in declared:
                continue
            if "doubly" in declared and kind in ("row", "column", "rows_sum", "columns_sum"):
                continue
            problem = stochasticity_problem(w, kind, 1e-10)
            if problem is not None:
                raise ValueError(
                    f"{self.name}: W_{k} under {attribute}={rule!r} is not {KINDS[kind]} "
                    f"({problem}); {self.name} needs {KINDS[kind]} mixing there "
                    "(check_mixing=False runs it anyway)"
                )
        if "connected" not in declared:
            self._check_reach(k, w)
        if period:
            self._checked.add(key)

    def _check_reach(self, k: int, w) -> None:
        """Information reaches every node: the graph of step k (matrix or pattern ``w``)
        is strongly connected, or for a periodic sequence the union over each period."""
        period = self.graphs.period
        if not period:
            self._check_connected(k, 1, w)
        elif k % period == period - 1 and ("union", k % period) not in self._checked:
            self._check_connected(k - period + 1, period, w)
            self._checked.add(("union", k % period))

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
    #: take part (no coefficient changes with k): then their plans are reused, small
    #: gossip rounds may run in compiled segments (:meth:`segment_key`; not those of
    #: push-sum methods) and the rounds of every node of a small graph in compiled
    #: batches. The built-in methods with a constant step say so.
    rounds_repeat = False
    #: The declaration the keys read (:mod:`stochmix.engine.model.inherited_keys`): a
    #: subclass that overrides round hooks has its iterations keyed only where it states
    #: ``rounds_repeat`` itself.
    key_declarations = ("rounds_repeat",)

    def segment_key(self, r: int):
        """``r == 0`` (the first iteration may differ: trackers start, EXTRA's first step)
        where :attr:`rounds_repeat` holds, the step does not decay, and gradients are
        taken at, and nodes report, what the class declares (the model rows, the rows of
        :attr:`reported_block`, their ratios to :attr:`ratio_block`'s: no ``points`` or
        ``node_models`` of its own); None otherwise. (Push-sum methods give a key, yet
        their gossip ticks are built in full: see :mod:`stochmix.engine.runner.segments`.)"""
        return self._iteration_key(r)

    def _iteration_key(self, r: int):
        """What :meth:`segment_key` gives by default, which :meth:`phase_key` and
        :meth:`template_key` read: a method whose rounds never run in compiled segments
        (a prox, a row map) returns None from ``segment_key`` and keeps its plans reused."""
        # (asked afresh: what it reads may change between runs, CHOCO's compressor)
        plain = _declared_models(type(self))
        repeats = self.rounds_repeat and not getattr(self, "decay", 0.0) and plain
        return (r == 0) if repeats else None

    def phase_key(self, r: int, participants: np.ndarray):
        """``(first iteration?, k mod period)`` when every node is active in every
        iteration (``Full(n)``), the iterations repeat (:meth:`segment_key`) and the graph
        sequence is periodic: such iterations build the same phases (the same W_k, the
        same operators), so the engine plans each position of the period once; None
        otherwise (node or edge activation, a decaying step, an aperiodic sequence)."""
        first = self._iteration_key(r)
        period = self.graphs.period
        if first is None or not period or self.__dict__.get("_activation") != "everyone":
            return None
        return ("every node", first, r % period, participants.size)

    def template_key(self, r: int, participants: np.ndarray):
        """``("active nodes", first iteration?, k mod period)`` under node activation
        when the iterations repeat (:meth:`segment_key`) and the graph sequence is
        periodic: such iterations build the same phases up to which nodes are active (the
        same W_k, rows A of it), so the engine plans each position of the period once and
        then substitutes each iteration's active nodes (:mod:`stochmix.engine.plan.
        subset_template`), checked against full builds as every template is; None
        otherwise (an iteration in which every node is active; edge activation, a
        decaying step, an aperiodic sequence)."""
        first = self._iteration_key(r)
        period = self.graphs.period
        if first is None or not period or self.__dict__.get("_activation") != "nodes":
            return None
        if participants.size == self.graphs.n_nodes:  # every node: whole blocks, built
            return None
        return ("active nodes", first, r % period)

    def round_equations(self, participants: np.ndarray, ctx: RunContext) -> Equations:
        """The equations of this iteration, activated for its active nodes.

        Each ``round_phases`` calls this first, then writes its iteration over whole
        blocks into the returned equations (``eq.blocks(...)``, ``x[:] = W @ x - a *
        grad()``, ``eq.build(label)``). With every node active (``Full(n)``) they are the
        plain equations; otherwise they hold for the active nodes only, each mixing
        operator activated by its direction (:mod:`stochmix.engine.model.activated`): the
        inactive nodes keep every row, but for what active nodes push to them. In a
        round of edge activation (``ctx.activation.edges``), :meth:`mixing` gives the
        activated edges' matrix.

        Args:
            participants (np.ndarray): int64 array of shape (m,), the round's active
                nodes (sorted node indices in ``[0, n)``).
            ctx (RunContext): the run's context; ``ctx.n_clients`` is the number of
                nodes n, ``ctx.activation`` the round's activation record (or None).

        Returns:
            Equations: fresh :class:`~stochmix.engine.model.equations.Equations` of this run
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

    def check_everyone(self, participants: np.ndarray, ctx: RunContext) -> np.ndarray:
        """Deprecated (0.1.0's hook, kept for methods written against it until the next
        release): the round's ``participants``, refusing a round where some node is not
        active, as in 0.1.0 (a method written against it builds its phases over every
        node). Write :meth:`round_equations` instead: the round's :class:`Equations`,
        activated for the active nodes."""
        warnings.warn(
            f"{type(self).__name__}.check_everyone is deprecated (it goes in the next "
            "release): call self.round_equations(participants, ctx), which returns the "
            "round's Equations and supports node activation",
            DeprecationWarning,
            stacklevel=2,
        )
        if participants.size != ctx.n_clients:
            raise ValueError(
                f"{self.name} runs every node in every iteration (check_everyone); use "
                f"participation Full(n) (got {participants.size} of {ctx.n_clients} nodes)"
            )
        return participants

    def check_participation(self, participation) -> None:
        """Refuse, before any work, an activation that breaks what :attr:`needs` asks of
        the mixing: node activation keeps row-stochastic pulls (``D W + I - D``) and
        column-stochastic pushes (``W D + I - D``), never a doubly stochastic matrix
        (edge activation, gossip, keeps it); and an activation whose rounds cannot reach
        every node (:func:`~stochmix.mixing.reach.activation_reach_problem`: a disconnected
        gossip graph, a node never active). ``check_mixing=False`` allows both."""
        kind = _activation_kind(participation)
        self._activation = kind  # (phase_key: plans are reused when every node is active)
        self._unchecked = kind == "unknown"  # checked at the first partial round instead
        problem = activation_reach_problem(participation, self.graphs)
        if problem is not None and self.check_mixing:
            raise ValueError(
                f"participation: {participation!r}: {problem}; information cannot reach "
                f"every node under {self.name} (check_mixing=False runs it anyway)"
            )
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

    #: The block whose rows the nodes report (:meth:`node_models`, :meth:`output`,
    #: :meth:`consensus_error`) where it is not :attr:`model_block`, the block where
    #: gradients are taken: Mudag, Acc-DNGD, APAPC and K-GT report ``"x"`` and take their
    #: gradients at an extrapolated or local point. None: the model block. A method that
    #: declares it (instead of overriding :meth:`node_models`) keeps its rounds eligible for
    #: the compiled batches of :mod:`stochmix.engine.runner.segments`.
    reported_block: str | None = None
    #: The block that divides the model rows entry by entry where nodes take their
    #: gradients at, and report, ``model / ratio`` row by row (push-sum's weights ``"w"``:
    #: :class:`PushSumModels`, which declares it); None: the rows themselves. The compiled
    #: batches of rounds of every node compute those points and reports from the
    #: declaration.
    ratio_block: str | None = None

    def node_models(self, z, ctx: RunContext):
        """The model each node reports, shape (n, dim): the rows of
        :attr:`reported_block` (the model block where None)."""
        return z[ctx.layout.slice(self.reported_block or self.model_block)]

    # Method declares a plain class attribute, which subclasses set in their bodies; here it
    # follows the reported block. Nothing assigns it on an instance, the one thing a
    # property would refuse.
    @property
    def checked_by_output(self) -> tuple[str, ...]:  # type: ignore[override]
        """The reported block: the network average sums every row of it (as ``x / w``
        for push-sum), so a NaN or Inf there shows in the reported model."""
        return (self.reported_block or self.model_block,)

    def output(self, z, ctx: RunContext):
        """The network average of the node models, shape (dim,)."""
        return _average(self.node_models(z, ctx))

    @property
    def consensus_of_rows(self) -> bool:
        """Whether :meth:`consensus_error` is the mean squared distance of the rows of
        :attr:`reported_block` (divided by :attr:`ratio_block`'s) from their average
        (neither it nor :meth:`node_models` is overridden): the compiled batches of rounds
        compute it so, every round (:mod:`stochmix.engine.runner.segments`)."""
        plain = type(self).consensus_error is DecentralizedMethod.consensus_error
        plain = plain and _declared_models(type(self))
        return plain and not {"consensus_error", "node_models"} & vars(self).keys()

    def consensus_error(self, z, ctx: RunContext) -> float:
        models = self.node_models(z, ctx)
        return float(((models - models.mean(axis=0)) ** 2).sum(axis=1).mean())


class PushSumModels:
    """Push-sum de-biasing, for methods with a weight block ``w`` beside the numerators
    ``x``: gradients are taken at, and nodes report, ``x / w`` row by row (declared as
    :attr:`~DecentralizedMethod.ratio_block`)."""

    ratio_block: str | None = "w"

    def points(self, z, ctx: RunContext, clients: np.ndarray):
        lay = ctx.layout
        return z[lay.rows("x", clients)] / z[lay.rows("w", clients)]

    def node_models(self, z, ctx: RunContext) -> Float[Array, "n d"]:
        return z[ctx.layout.slice("x")] / z[ctx.layout.slice("w")]


def _declared_models(cls) -> bool:
    """Whether a class takes its gradients at and reports what its declarations say: the
    model rows (no ``points`` of its own), the rows of :attr:`~DecentralizedMethod.
    reported_block`, or their ratios to :attr:`~DecentralizedMethod.ratio_block`'s rows
    (:class:`PushSumModels`'s, where the class declares ``ratio_block = "w"`` with them)."""
    if cls.points is Method.points and cls.node_models is DecentralizedMethod.node_models:
        return cls.ratio_block is None
    ratio = cls.points is PushSumModels.points and cls.node_models is PushSumModels.node_models
    return ratio and cls.ratio_block == "w" and cls.model_block == "x"
