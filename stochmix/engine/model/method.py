"""What the engine needs from a method: its blocks and the phases of one round.

A method never touches arrays. It declares its state blocks and, for each round, returns
the list of :class:`~stochmix.engine.model.phase.Phase` objects that the engine applies in order.
Anything that varies from round to round (the participants, aggregation weights, learned
estimates) is turned into plain numbers inside those phases.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np

from ..._declared import Declaration, keep_declarations
from .equations import Equations
from .layout import Block, Layout
from .phase import Phase, PhaseBuilder
from .phase_cache import PhaseCache
from .rowmap import RowMap, seed_sequence

__all__ = [
    "Method",
    "RunContext",
    "model_points",
]


@dataclass
class RunContext:
    """Facts about one run that a method may read while it builds its phases.

    Attributes:
        layout: where the method's blocks sit in the stacked state.
        n_clients: number of clients (or peers) N.
        dim: model dimension d.
        probabilities: the participation process's known marginals p_i, or None.
        memory: per-run scratch space for plain numbers a method keeps between rounds
            (learned participation estimates, counters). Never arrays of the state.
        seed: the run's seed (as :func:`stochmix.run` got it); the random draws of
            nonlinear row maps derive from it (:attr:`seed_sequence`, see
            :mod:`stochmix.engine.model.rowmap`).
        phase_cache: the phases this run's equations built, handed out again when a
            round writes the same equations (:mod:`stochmix.engine.model.phase_cache`).
    """

    layout: Layout
    n_clients: int
    dim: int
    probabilities: np.ndarray | None = None
    zero_rows: object = field(default=None, repr=False, compare=False)  # engine.liveness
    memory: dict = field(default_factory=dict)
    seed: object = None
    phase_cache: PhaseCache = field(default_factory=PhaseCache, repr=False, compare=False)
    #: this round's :class:`~stochmix.participation.Activation` (its active nodes, the
    #: activated edges of a gossip process, the time of a clock's tick), or None
    activation: object = field(default=None, repr=False, compare=False)
    #: the matrix of an edge-activated round: "pairwise" averaging or the method's
    #: "weights" on the activated edges (the process's ``mixing``)
    edge_mixing: str = "pairwise"
    #: while a :class:`~stochmix.algorithms.CompressedUplink` builds its method's round:
    #: ``uplink(received)`` gives the row maps that turn the uploads into what arrives
    uplink: object = field(default=None, repr=False, compare=False)
    #: the problem's regularizer r (a :class:`~stochmix.problems.Composite`'s), or None for
    #: a smooth problem: proximal methods apply its prox (the identity when None)
    regularizer: object = field(default=None, repr=False, compare=False)
    #: the sample gradients a full local gradient of each client costs, shape (N,)
    #: (:func:`~stochmix.engine.model.traffic.sample_counts`), or None: 1 each
    sample_counts: object = field(default=None, repr=False, compare=False)
    #: the problem as row maps see it, counting the gradients they ask for
    #: (:class:`~stochmix.engine.model.traffic.CountedProblem`), or None outside a run
    map_problem: object = field(default=None, repr=False, compare=False)

    def phase(self, label: str = "") -> PhaseBuilder:
        """A fresh :class:`PhaseBuilder` over this run's layout."""
        return PhaseBuilder(self.layout, label)

    @cached_property
    def seed_sequence(self) -> np.random.SeedSequence:
        """The SeedSequence of :attr:`seed` (a fresh random one, fixed for the run, when
        the seed is None): the root of every map's generator."""
        return seed_sequence(self.seed)

    def map(self, target: str, rows, function, *sources, round: int, label: str = "map"):
        """A nonlinear phase ``target[rows] <- function(*sources[rows], info=...)`` (a
        :class:`~stochmix.engine.model.rowmap.RowMap`; see :mod:`stochmix.engine.model.rowmap` for
        the sources, shapes and randomness)."""
        return RowMap(self.layout, target, rows, function, *sources, round=round, label=label)


class Method(ABC):
    """Base class of every algorithm: blocks + the phases of round ``r``.

    Subclasses set ``name`` and implement :meth:`blocks` and :meth:`round_phases`.

    Attributes:
        model_block: block where gradients are taken and the output is read.
        client_node: the node of client 0: row of client i inside ``model_block`` is
            ``i + client_node`` (1 in federated methods, where row 0 is the server; 0 in
            decentralized ones). The one name of this number: :class:`Equations` and the
            state's layout read it (``model_offset``, its former name, still works on a
            subclass, with a DeprecationWarning).
        checked_by_output: blocks every entry of which reaches the reported model
            (:meth:`output`) so that a NaN or Inf there makes the model NaN or Inf: a mean
            of the block's rows, or its rows divided by others. A run checks the model
            after every round, so whole-block phases skip their own check of these blocks
            (:func:`~stochmix.engine.model.whole_block.apply_blockwise_numpy`). None by default.
        reports_node_average: a capability flag: :meth:`output` is the mean of the
            method's ``node_models(z, ctx)`` (one row per node) and
            :meth:`consensus_error` their mean squared distance to it, so that a sharded
            run (:mod:`stochmix.engine.backends.distributed`) may compute both from the node models
            its ranks hold. False by default; the decentralized methods declare it. Like
            every flag of :attr:`DECLARED_WITH`, it belongs to the methods it was written
            with: a subclass that defines :meth:`output` or :meth:`consensus_error`
            without setting it in its own body gets it False.
    """

    name: str = "method"
    #: whether the method handles a composite problem's regularizer (its prox); a run
    #: refuses a composite problem for the others, which would minimise the smooth part only
    proximal: bool = False
    model_block: str = "x"
    client_node: int = 1
    checked_by_output: tuple[str, ...] = ()
    reports_node_average: bool = False

    #: Each capability flag and the members it describes (see :mod:`stochmix._declared`).
    DECLARED_WITH: ClassVar[dict[str, Declaration]] = {
        "reports_node_average": Declaration(("output", "consensus_error")),
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keep_declarations(cls, cls.DECLARED_WITH)
        if "model_offset" in vars(cls):
            warnings.warn(
                f"{cls.__name__}.model_offset is now called client_node",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.client_node = int(vars(cls)["model_offset"])

    @abstractmethod
    def blocks(self, n_clients: int) -> list[Block]:
        """The state blocks, in stacking order."""

    @abstractmethod
    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list[Phase]:
        """The phases of round ``r`` given the sorted indices of its participants."""

    def equations(self, ctx: RunContext, label: str = ""):
        """The :class:`~stochmix.engine.model.equations.Equations` of one of this method's
        phases, clients numbered from node :attr:`client_node`."""
        return Equations(ctx, label, client_node=self.client_node)

    def phase_key(self, r: int, participants: np.ndarray):
        """A hashable key such that rounds with equal keys have identical phases, or None.

        When a method's phases depend only on the participants (and not on the round
        index or on anything learned during the run), returning ``participants.tobytes()``
        lets the engine reuse the phases of earlier rounds with the same participants.
        None (the default) rebuilds every round; a method whose ``round_phases`` updates
        ``ctx.memory`` must return None.
        """
        return None

    def template_key(self, r: int, participants: np.ndarray):
        """A hashable key such that rounds with equal keys build the same phases up to
        who participates, or None (the default: every round is built in full).

        "The same up to who participates" means: every index array a phase holds is the
        participants shifted by a constant (``participants + 1`` for client rows), and
        every coefficient is the same number or follows a rule the coefficient carries (a
        :class:`~stochmix.engine.model.round_scalars.RoundScalar` of the round, or of the
        round and its participants). FOCUS returns ``participants.size > 0``; FedAvg with
        uniform weights returns one key for rounds of every size, its ``1/|S|`` and its
        server's ``1 - eta`` being round scalars that read the participants (a key holding
        ``participants.size`` is the way for numbers that depend on it without a rule). The
        engine then plans a round once per key and only substitutes the participants
        afterwards (see :mod:`stochmix.engine.plan.template`); it checks the claim against a
        full build on the second round of each key, and again on the first round of
        another size before it trusts the key at every size, and stops templating a key
        that breaks it.
        """
        return None

    def template_groups(self, r: int, participants: np.ndarray, ctx: RunContext):
        """Groups of the participants that a round's node-local runs cover, for templates
        whose runs are not all over the participants themselves: ``(key, groups)`` with
        ``groups`` a tuple of sorted subsets of ``participants`` and ``key`` a hashable
        description (rounds with equal ``template_key`` and ``key`` build the same phases up
        to who is in each group), or None (the default). Methods with uneven local steps
        return their step-count groups (see :mod:`stochmix.algorithms.local_steps`); the
        engine then substitutes each round's groups, checks the claim on the second round
        of each key as for any template, and counts each round's traffic per node."""
        return None

    def round_trips(self, r: int, participants: np.ndarray, ctx: RunContext):
        """The per-node trip counts of round ``r``'s repeated phase (a
        :class:`~stochmix.engine.model.trips.TripCounts`), or None (the default): for a
        method whose phases repeat a step a per-node number of times and tag them
        (``phase.trips``), so that a template can make a round's run for new
        participants and counts (it is checked, as any template, on the second round of
        its key). Federated methods with uneven local steps return their round's
        counts."""
        return None

    def segment_key(self, r: int):
        """A hashable key such that the rounds with equal keys build the same phases with
        the round's active nodes in the same places (and the same coefficients), or None
        (the default): no round of the method runs in compiled segments (see
        :mod:`stochmix.engine.runner.segments`, which checks the claim on the second round of
        each key). It is asked for rounds 0 and 1 only: every round after the first
        shares round 1's key; what else a round's phases depend on is its
        :meth:`segment_variants`."""
        return None

    def segment_variants(self, first: int, nodes: np.ndarray):
        """The per-round part of the segment key of rounds ``first``, ``first + 1``, ...,
        ``first + B - 1``, or None (the default: the rounds' phases depend only on
        :meth:`segment_key` and where the edges sit among the nodes).

        A method whose round also depends on a per-round draw that its activation record
        does not show (AD-PSGD's initiator coin, :mod:`stochmix.algorithms.adpsgd`) returns
        one small integer per round: the segmenter
        (:mod:`stochmix.engine.runner.segments`) appends round t's integer to its key, so
        rounds with different variants get different compiled programs, and checks each
        extended key on its second round as any key (a variant that does not tell two
        different rounds apart makes their key fail the check: never segmented). It is
        asked for every round that could run in a segment, in order, a batch at a time.

        Args:
            first (int): the first of the rounds (0-based).
            nodes (np.ndarray): int64 array of shape (B, k), row t the sorted active nodes
                of round ``first + t``.

        Returns:
            np.ndarray | None: int64 array of shape (B,), the rounds' variants; equal
            :meth:`segment_key`, edge positions and variant must mean equal phases up to
            which nodes take part.
        """
        return None

    def sent_floats(self, block: str, dim: int) -> int:
        """The floats a row of ``block`` costs when a node sends it (``dim``, the model
        dimension, by default; a method that sends a compressed copy says less). The
        ``floats`` column of a Result counts with it (:mod:`stochmix.engine.model.traffic`)."""
        return dim

    def check_participation(self, participation) -> None:  # noqa: B027  (optional hook)
        """Called by :func:`stochmix.run` before any work: raise a ValueError naming
        ``participation`` if the method cannot run under it (decentralized methods refuse
        a node activation that breaks what their mixing needs)."""

    def check_problem(self, problem) -> None:
        """Called by :func:`stochmix.run` (and by configurations when they are read) before
        any work: raise a ValueError naming ``problem`` if the method cannot run on it. By
        default a composite problem is refused unless the method is :attr:`proximal`
        (:func:`check_regularizer`)."""
        check_regularizer(self, problem)

    def start(self, ctx: RunContext) -> None:  # noqa: B027  (optional hook)
        """Called once before round 0; may fill ``ctx.memory`` or check ``ctx``."""

    def points(self, z, ctx: RunContext, clients: np.ndarray):
        """Where each requested client's gradient is taken: its model row by default."""
        rows = ctx.layout.rows(self.model_block, clients + self.client_node)
        if isinstance(z, np.ndarray):  # (NumPy's take gathers rows faster than indexing)
            return z.take(rows, axis=0)
        return z[rows]

    def output(self, z, ctx: RunContext):
        """The model the method reports: the server row (row 0 of ``model_block``)."""
        return z[ctx.layout.start(self.model_block)]

    def consensus_error(self, z, ctx: RunContext):
        """Mean squared distance of the nodes' models to their average, where it means
        something (decentralized methods); None otherwise."""
        return None

    #: attributes a run changes (caches of checks), left out of :meth:`fingerprint`
    _run_state: frozenset = frozenset({"_checked"})

    def fingerprint(self) -> str:
        """A digest of the method's class and every parameter it holds (private ones
        included: e.g. FedAU's cutoff; graph sequences by their own fingerprint); a
        checkpoint is resumed only by a method with its fingerprint."""
        from ..._fingerprint import digest

        own = {k: v for k, v in vars(self).items() if k not in self._run_state}
        return digest(type(self).__module__, type(self).__qualname__, own)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def check_regularizer(method: Method, problem) -> None:
    """Refuse, before any work, a composite problem (one with a ``regularizer``) for a
    method that is not :attr:`~Method.proximal`: it would minimise the smooth part alone
    and report distances to the composite minimiser."""
    regularizer = getattr(problem, "regularizer", None)
    if regularizer is None or getattr(method, "proximal", False):
        return
    raise ValueError(
        f"problem has a regularizer ({regularizer!r}) that {method.name} does not handle "
        "(it would minimise the smooth part alone): use a proximal method (PGEXTRA, "
        "ProxNIDS, FedMid, FedDualAvg, ...), problem.with_subgradients() for subgradient "
        "steps, or problem.smooth"
    )


def model_points(method: Method) -> bool:
    """Whether ``method`` takes its gradients at its model rows: no ``points`` of its own,
    on its class or set on the instance. Every path that reads the model rows in place of
    calling :meth:`Method.points` asks this (a hook set on the instance counts as much
    as one on the class)."""
    return type(method).points is Method.points and "points" not in vars(method)
