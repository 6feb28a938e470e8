"""What the federated methods with local training share: their local-step counts (one K,
K_i per client, or drawn per round; see :mod:`.local_steps`) and the phases that pull the
server model and train on it."""

from __future__ import annotations

import warnings

import numpy as np

from ..engine import Phase, RunContext
from ..engine.model.equations import Equations, grad
from ..engine.model.trips import TripCounts
from .local_steps import LocalSteps, as_local_steps

__all__ = [
    "LocalTraining",
    "pull_and_train",
    "repeated",
    "repetitions",
    "step_groups",
    "tagged",
]


def step_groups(participants: np.ndarray, steps) -> list[tuple[np.ndarray, int]]:
    """The participants grouped by their local steps: ``[(G, k), ...]`` with G the sorted
    participants that take k steps, k increasing (one group for an int ``steps``).

    .. deprecated:: 0.1.0
        Write the repetitions instead (:func:`repetitions`, :func:`tagged`): the engine
        runs them as one run over every participant (per-node trip counts), where one
        group per step count is one run each."""
    warnings.warn(
        "step_groups is deprecated: write the local steps as repetitions over the nested "
        "sets {K_i >= j} (stochmix.algorithms.local_training.repetitions and tagged), "
        "which the engine runs as one run",
        DeprecationWarning,
        stacklevel=2,
    )
    return _step_groups(participants, steps)


def _step_groups(participants: np.ndarray, steps) -> list[tuple[np.ndarray, int]]:
    if isinstance(steps, (int, np.integer)):
        return [(participants, int(steps))]
    counts = np.asarray(steps)
    present = np.flatnonzero(np.bincount(counts))  # the counts that occur, increasing
    return [(participants[counts == k], int(k)) for k in present]


def repetitions(participants: np.ndarray, local_steps) -> tuple[TripCounts | None, list]:
    """The round's local work as repetitions: ``(trips, [(j, G_j), ...])`` with ``G_j``
    the participants that take a j-th step, ``j = 1 .. max K``: all of them for an int K
    (``trips`` None), else ``{i in S : K_i >= j}`` with ``trips`` the round's
    :class:`~stochmix.engine.model.trips.TripCounts` (tag each repetition's phases with
    :func:`tagged`)."""
    if isinstance(local_steps, (int, np.integer)):
        return None, [(j, participants) for j in range(1, int(local_steps) + 1)]
    trips = TripCounts(participants, np.asarray(local_steps))
    return trips, [(j, trips.members(j)) for j in range(1, trips.most + 1)]


def tagged(phase: Phase, trips: TripCounts | None, j: int) -> Phase:
    """``phase``, tagged as the j-th repetition of ``trips`` (when there are trips)."""
    if trips is not None:
        phase.trips = (trips, j)
    return phase


def repeated(eq: Equations, participants: np.ndarray, local_steps, step,
             label: str = "local step") -> list[tuple[int, np.ndarray, Phase]]:  # fmt: skip
    """``[(j, G_j, phase_j), ...]``: the phase ``step(G)`` writes with ``eq``'s handles for
    each repetition of :func:`repetitions` (built once and repeated for an int K, built
    over each ``G_j`` and :func:`tagged` for uneven steps)."""
    trips, reps = repetitions(participants, local_steps)
    out: list[tuple[int, np.ndarray, Phase]] = []
    phase = None
    for j, G in reps:
        if trips is not None or phase is None:
            step(G)
            phase = tagged(eq.build(label), trips, j)
        out.append((j, G, phase))
    return out


def train(eq: Equations, participants: np.ndarray, local_steps, step, label: str = "local step",
          block: str = "x") -> list[Phase]:  # fmt: skip
    """The phases of local training: the pull ``x[S] = x.server``, then the phase that
    ``step(G)`` writes with ``eq``'s handles, applied K times over ``G = S`` (an int K), or
    for ``j = 1 .. max K_i`` over ``G = {i in S : K_i >= j}`` (uneven ``local_steps``: one
    count per participant, in their order). Clients train independently, so this is each
    client's K_i steps; the repetitions are tagged with the round's
    :class:`~stochmix.engine.model.trips.TripCounts`, and the engine runs them all as one
    run over S (see :mod:`stochmix.engine.model.trips`)."""
    x = eq.block(block)
    x[participants] = x.server
    pull = eq.build("assign")
    return [pull, *(phase for _, _, phase in repeated(eq, participants, local_steps, step, label))]


def pull_and_train(
    participants: np.ndarray, ctx: RunContext, lr: float, local_steps, block: str = "x"
) -> list[Phase]:
    r"""``x_i <- x_0`` (the pull, ``x <- A_S x``) then ``K_i`` local steps ``x_i <- x_i - lr
    grad F_i(x_i)``, i in S (``local_steps``: an int K, the same for all, or the K_i of the
    participants, in their order; see :func:`step_groups`)."""
    eq = Equations(ctx)
    x = eq.block(block)

    def step(G):
        x[G] -= lr * grad(G)

    return train(eq, participants, local_steps, step, block=block)


class LocalTraining:
    """Mixin of the federated methods whose participants train locally: their
    ``local_steps`` (an int, an array of one int per client or a
    :class:`~stochmix.algorithms.local_steps.LocalSteps` rule) and the counts of each
    round. A round record with ``steps`` (a clock's deadline: the steps each client
    completed) overrules the rule for that round."""

    local_steps: int | LocalSteps
    #: whether the method's server reads a round record's ``received`` set (lost uploads)
    reads_uploads: bool = True

    def _set_local_steps(self, value) -> None:
        self.local_steps = as_local_steps(value)

    @property
    def uneven_steps(self) -> bool:
        """Whether participants may take different numbers of local steps."""
        return not isinstance(self.local_steps, int)

    def round_steps(self, r: int, participants: np.ndarray, ctx: RunContext):
        """The local steps of round ``r``'s participants: an int when they are all the same
        (the uniform form of the phases), else an int64 array in the participants' order."""
        record = ctx.activation
        given = getattr(record, "steps", None)
        if given is not None and np.array_equal(getattr(record, "nodes", ()), participants):
            steps = given
        elif isinstance(self.local_steps, int):
            return self.local_steps
        else:
            steps = self.local_steps.counts(r, participants, ctx.seed)
        if steps.size and (steps == steps[0]).all():
            return int(steps[0])
        return steps

    def uploads(self, participants: np.ndarray, ctx: RunContext, steps=None):
        """The participants whose uploads reach the server this round, and their local
        steps: all of them, unless the round's record says some uploads were lost after
        the local work (``received``, e.g. :class:`~stochmix.participation.UplinkDrops`):
        the server then sees those clients as non-participants, while their own rows
        (FOCUS's trackers, SCAFFOLD's and FedDyn's local states) keep the work done."""
        record = ctx.activation
        received = getattr(record, "received", None)
        if received is None or not np.array_equal(getattr(record, "nodes", ()), participants):
            return participants, steps
        if steps is not None and not isinstance(steps, (int, np.integer)):
            steps = np.asarray(steps)[np.isin(participants, received)]
        return received, steps

    def sent(self, received: np.ndarray, ctx: RunContext) -> list:
        """The phases that turn the received participants' uploads into what the server
        reads: none, unless the method runs inside a
        :class:`~stochmix.algorithms.CompressedUplink` (``ctx.uplink``)."""
        uplink = getattr(ctx, "uplink", None)
        return [] if uplink is None or received.size == 0 else uplink(received)

    def steps_key(self, key):
        """A phase key that still holds with these local steps (None when the counts
        change from round to round)."""
        rule = self.local_steps
        return key if isinstance(rule, int) or not rule.random else None

    #: whether the method's local training is :func:`train`'s (its repetitions over
    #: nested sets of participants, tagged with the round's trip counts); False for
    #: methods that write one group of participants per step count (:func:`step_groups`)
    trains_by_trips: bool = True

    def round_trips(self, r: int, participants: np.ndarray, ctx: RunContext):
        """With uneven local steps trained by :func:`train`, the round's
        :class:`~stochmix.engine.model.trips.TripCounts`; else None."""
        if isinstance(self.local_steps, int) or not self.trains_by_trips:
            return None
        steps = self.round_steps(r, participants, ctx)
        if isinstance(steps, (int, np.integer)):
            return None
        return TripCounts(participants, steps)

    def template_groups(self, r: int, participants: np.ndarray, ctx: RunContext):
        """With uneven local steps, the sets of participants the round's runs cover
        besides all of them, and a key for their shape: the nested sets ``{K_i >= j}``,
        j >= 2 (training by :func:`train`), or the groups by step count and the counts
        present (see :func:`step_groups`); None with an int K."""
        if isinstance(self.local_steps, int):
            return None
        steps = self.round_steps(r, participants, ctx)
        if self.trains_by_trips:
            if isinstance(steps, (int, np.integer)):
                return ("even", int(steps)), ()
            trips = TripCounts(participants, steps)
            return ("nested", trips.most), tuple(trips.members(j) for j in range(2, trips.most + 1))
        groups = _step_groups(participants, steps)
        return tuple(k for _, k in groups), tuple(G for G, _ in groups)

    def check_participation(self, participation) -> None:
        if not isinstance(self.local_steps, int):
            n = getattr(participation, "n_clients", None)
            if n is not None:
                self.local_steps.check_clients(int(n))
