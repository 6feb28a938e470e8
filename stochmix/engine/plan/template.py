"""Round templates: a planned round with its participants abstracted out.

Most methods build the same phases every round up to *who* participates: the rows a phase
touches are the participants' indices shifted by a constant (``participants + 1`` in a
federated state) and the coefficients are the same numbers (a per-client coefficient
array is templated when all its entries are one number: the uniform weights 1/|S| of a
``dot``, kept as that number and made again, as an array of the round's length, for each
instance: the same values, the same program, the same bits), or follow the round (and
its participants) by a rule the method gives (a
:class:`~stochmix.engine.model.round_scalars.RoundScalar`, bound for each instance's
round: FedAvg's ``1/|S|``, so that its rounds of every size share one template), or are
per-client arrays that follow the participants by a rule (a
:class:`~stochmix.engine.model.round_scalars.RoundArray`, bound for each instance's
participants: FedStale's ``eta / (N p_i)``; only on steps whose nodes are the
participants shifted, in their order). A method says so by returning
a key from :meth:`~stochmix.engine.model.method.Method.template_key`. The engine then plans the
first round with a given key (and at least two participants: with one, a participant's
rows become single rows of the state, which a template cannot move) as usual, keeps the
plan as a :class:`RoundTemplate`, and for later rounds with the same key only substitutes
the new participants: no phases are built and nothing is compiled.

The engine does not take the method's word for it: the second round with a key is also
built in full and compared with the template's instance (same programs, coefficients and
indices), and so is the first round of a size the template was not checked at, until it
has been checked at two sizes (:meth:`RoundTemplate.trusted`: a coefficient that depends
on ``|S|`` without a rule shows there); a key whose rounds differ is never templated
again in that run. An instance
whose new nodes would collide with a row the program reads or writes one at a time falls
back to a full build.

An activated round (node activation: a decentralized method's phases on the active nodes'
rows) is templated the same way, its mixing phases kept as
:class:`~stochmix.engine.plan.subset_template.SubsetRecipe` s (the active nodes are the
participants).
"""

from __future__ import annotations

import numpy as np

from ..model.round_scalars import RoundArray, RoundScalar, bound
from ..model.traffic import samples_of
from .round_plan import LocalStep
from .subset_template import SubsetRecipe
from .template_values import Uniform, as_array, shift_of, template_coefficient

__all__ = [
    "RoundTemplate",
]


def _same_coefficients(a: tuple, b: tuple) -> bool:
    """Coefficient values equal entry by entry (numbers, or arrays of equal entries)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (
                isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.array_equal(x, y)
            ):
                return False
        elif x != y:
            return False
    return True


def _aligned(step: LocalStep, participants: np.ndarray) -> bool:
    """Whether a step's per-node arrays line up with the participants: its nodes are
    theirs shifted by a constant, in their order (so an array a rule gives for the
    participants is the step's), and a step with repeated phases is bound by count (its
    per-node arrays given for every node in that order; bound by prefix, they would be in
    the order of the counts)."""
    k = _shift(step.nodes, participants)
    return isinstance(k, int) and (not step.extents or step.counts is not None)


def _label_of_slot(step: LocalStep, slot: int) -> str:
    """The label of the phase of ``step`` whose coefficients hold value number ``slot``."""
    if not step.labels:
        return ""
    for lf, label in zip(step.structure.forms, step.labels, strict=False):
        if slot < len(lf.coefficients):
            return label
        slot -= len(lf.coefficients)
    return ""


def _shift(indices, participants: np.ndarray):
    """``k`` with ``indices == participants + k``, "none" for None, "empty" for no
    indices, or None."""
    if indices is None:
        return "none"
    if indices.size == 0:
        return "empty"
    return shift_of(indices, participants)


#: The most nodes a step of a template may keep as they are (a :class:`_Fixed` array: a
#: server's row kernel, run on the server's node whoever participates).
FIXED_MAX = 16


class _Fixed:
    """A step's node (or client) array kept as it is in every instance: a few nodes that
    are not the participants shifted (the server's)."""

    def __init__(self, indices: np.ndarray):
        self.indices = indices.copy()

    def __eq__(self, other) -> bool:
        return isinstance(other, _Fixed) and np.array_equal(self.indices, other.indices)

    def __hash__(self) -> int:
        return hash(self.indices.tobytes())


def _fixed(found, indices):
    """``found`` (a shift), else the few ``indices`` kept as they are (:class:`_Fixed`), else
    None."""
    if found is not None or indices is None or not 0 < indices.size <= FIXED_MAX:
        return found
    return _Fixed(indices)


#: What :meth:`RoundTemplate._indices` gives for an :class:`_Either` whose fits differ.
_AMBIGUOUS = object()


class _Either(tuple):
    """Several ``(b, k)`` that fit a node array in the rounds seen so far (the
    participants in trip order happened to be sorted, a group happened to hold every
    participant): an instance uses them only where they give the same array, and each
    full build of a later round keeps those that fit it (:meth:`RoundTemplate.narrow`)."""


def _locate(indices, bases: tuple):
    """``(b, k)`` with ``indices == bases[b] + k``, an :class:`_Either` of every such
    pair when more than one base fits, a marker ("none", "empty") as :func:`_shift` gives,
    or None."""
    found = []
    for b, base in enumerate(bases):
        if base.size == 0:
            continue
        k = _shift(indices, base)
        if k is None:
            continue
        if isinstance(k, str):
            return k
        found.append((b, k))
    if not found:
        return None
    return found[0] if len(found) == 1 else _Either(found)


def _per_node(step: LocalStep) -> tuple | None:
    """A step's traffic per node: its gradient evaluations, messages and floats divided
    by its node count (none at all for a step over no nodes) and its gradients per client
    of its ``clients`` (whose sample gradients an instance counts); None where these are
    not whole numbers."""
    traffic, nodes, clients = step.traffic, step.nodes, step.clients
    if traffic is None or nodes is None:
        return None
    gradients = int(traffic[0])
    taken = 0 if clients is None else clients.size
    if gradients and (not taken or gradients % taken):
        return None
    per_client = gradients // taken if gradients else 0
    n = nodes.size
    if n == 0:
        return (0, 0, 0, per_client) if not any(traffic[:3]) else None
    if any(t % n for t in traffic[:3]):
        return None
    return (*(int(t) // n for t in traffic[:3]), per_client)


def _per_level(step: LocalStep) -> tuple | None:
    """A step with limited phases' traffic: ``("levels", unit of the phases at every
    node, units of each extent's phases)``, each as :func:`_per_node` gives (per node of
    the run, per node of the extent); None where these are not whole numbers."""
    total = step.traffic
    if total is None or not step.nodes.size:
        return None
    base = list(total)
    units = []
    for extent, part in zip(step.extents, step.level_traffic, strict=True):
        base = [a - b for a, b in zip(base, part, strict=True)]
        if extent == 0:
            if any(part[:3]):
                return None
            units.append((0, 0, 0, 0))
            continue
        if any(t % extent for t in part[:3]):
            return None
        units.append((*(int(t) // extent for t in part[:3]), int(part[0]) // extent))
    n = step.nodes.size
    if base[0] or any(t % n for t in base[1:3]):  # gradients are the repeated phases'
        return None
    return ("levels", (0, *(int(t) // n for t in base[1:3]), 0), tuple(units))


def _step_traffic(unit: tuple, step: LocalStep, samples) -> tuple[int, int, int, int]:
    """The traffic of an instance's ``step`` from its per-node ``unit``
    (:func:`_per_node` or :func:`_per_level`) and the run's sample counts (1 per gradient
    where None)."""
    if unit[0] == "levels":
        total = list(_step_traffic(unit[1], step, samples))
        clients = step.clients
        for j, (extent, level) in enumerate(zip(step.extents, unit[2], strict=True)):
            taken = 0
            if level[3] and clients is not None:
                uniform = samples is None or (samples.ndim == 1 and samples.strides[0] == 0)
                if step.counts is None or uniform:  # (uniform: only their number is read)
                    taken = samples_of(samples, clients[:extent])
                else:
                    taken = samples_of(samples, clients[step.counts > j])
            part = (level[0] * extent, level[1] * extent, level[2] * extent, level[3] * taken)
            total = [a + b for a, b in zip(total, part, strict=True)]
        return total[0], total[1], total[2], total[3]
    n = step.nodes.size
    clients = step.clients
    taken = 0
    if unit[3] and clients is not None:
        taken = samples_of(samples, clients)
    return unit[0] * n, unit[1] * n, unit[2] * n, unit[3] * taken


_BY_INDEX = (
    "it reads or writes rows picked by index (x.at[...]) or takes sampled gradients "
    "(grad(S, samples=...)), whose indices are bound per round and follow no rule over "
    "the participants"
)
_PRODUCTS = (
    "it computes mixing products (W @ x) inside the segment, whose matrices are bound per "
    "round"
)

_UNEVEN_TRAFFIC = (
    "its gradients, messages or floats are not the same number for every node it runs "
    "on, so a template could not count them for other participants"
)


class RoundTemplate:
    """A plan of :class:`~stochmix.engine.plan.round_plan.LocalStep` s whose nodes and clients
    are the participants shifted by constants (or a few fixed nodes, such as the server's)
    and whose coefficients are numbers, and of phases on the participants' rows
    (:class:`~stochmix.engine.plan.subset_template.SubsetRecipe`: an activated round's)."""

    def __init__(self, steps: list, traffic: list, bases: int = 0):
        self.steps = steps  # (structure, node shift, coefs, client shift, outside, labels)
        self.verified = False
        #: the round sizes (participant counts) it was checked at, against full builds
        self.sizes: set[int] = set()
        #: the number of extra index arrays (groups of the participants) the template's
        #: node arrays may be shifted copies of, besides the participants themselves
        self.bases = bases
        #: per step, its (gradients, messages, floats) per node: an instance's traffic is
        #: these times its steps' node counts (checked against a full build, like the rest)
        self.per_node = traffic

    def trusted(self, participants: np.ndarray) -> bool:
        """Whether an instance for ``participants`` may be used without a full build: the
        template was checked against one, at a round of this size, or at rounds of two
        sizes (a key without |S| is a claim that coefficients depending on |S| follow it
        by rules: checked at a second size before it is trusted at every size)."""
        return self.verified and (participants.size in self.sizes or len(self.sizes) >= 2)

    @classmethod
    def from_plan(cls, plan: list, participants: np.ndarray) -> RoundTemplate | None:
        """The template of a planned round, or None when the plan is not one."""
        found = cls.attempt(plan, participants)
        return found if isinstance(found, RoundTemplate) else None

    @classmethod
    def attempt(
        cls, plan: list, participants: np.ndarray, bases: tuple = (), samples=None, trips=None,
        floats_of=None, built: tuple | None = None,
    ) -> RoundTemplate | tuple[str, str] | None:  # fmt: skip
        """The template of a planned round; or, when the plan is not one, ``(label, why)``:
        the phase that stops it (its label, "" for the round) and why, in words; None for
        rounds of fewer than two participants (never templated, by design).

        ``bases``: groups of the participants (the method's
        :meth:`~stochmix.engine.model.method.Method.template_groups`) whose shifted copies a
        step's nodes may also be; every group needs two members, and the template then
        counts each round's traffic per node. ``samples``: the run's sample counts (see
        :func:`~stochmix.engine.model.traffic.sample_counts`). ``trips``: the round's
        :class:`~stochmix.engine.model.trips.TripCounts`, for plans whose runs repeat a
        phase (bound by count: their nodes are the participants, shifted).
        ``floats_of(block)``: the floats a row of ``block`` costs on the wire (the method's
        ``sent_floats``), for plans with phases on the active nodes' rows (without it such
        plans are not templated); ``built``: the round's traffic, as its full build
        counted it (else the sum of its steps')."""
        if participants.size < 2 or any(b.size < 2 for b in bases):
            return None  # with one participant, node rows become single (absolute) rows
        if bases:
            found = cls._attempt_groups(plan, participants, bases)
        else:
            found = cls._attempt_plain(plan, participants, floats_of)
        if isinstance(found, RoundTemplate):
            if built is None:
                built = tuple(sum(int(item.traffic[j]) for item in plan) for j in range(4))
            if found.traffic(plan, samples) != tuple(built):
                return "", _UNEVEN_TRAFFIC
        return found

    @classmethod
    def _attempt_plain(cls, plan: list, participants: np.ndarray, floats_of=None):
        """:meth:`attempt` without groups: every node and client array is the
        participants shifted."""
        steps: list = []
        per_node: list = []
        for item in plan:
            if not isinstance(item, LocalStep):
                # a phase on the active rows, the general path, a whole block or a row map
                recipe: SubsetRecipe | str = "it is not part of a node-local segment"
                if floats_of is not None:
                    recipe = SubsetRecipe.attempt(item, participants, floats_of)
                if isinstance(recipe, str):
                    return getattr(item, "label", ""), recipe
                steps.append(recipe)
                per_node.append(None)
                continue
            if item.views or item.samples is not None:
                return (item.labels[0] if item.labels else ""), _BY_INDEX
            if item.products:
                return (item.labels[0] if item.labels else ""), _PRODUCTS
            coefs = tuple(template_coefficient(c, rules=True) for c in item.coefs)
            ruled = any(isinstance(c, RoundArray) for c in coefs)
            if ruled and not _aligned(item, participants):
                coefs = tuple(template_coefficient(c) for c in item.coefs)
            missing = [j for j, c in enumerate(coefs) if c is None]
            if missing:  # per-node coefficients that depend on who participates
                label = _label_of_slot(item, missing[0])
                return label, (
                    "it has per-client coefficients (an array) that follow no rule over "
                    "the participants (several values, values without a rule, or a "
                    "repetition's nodes only): a template needs numbers, or arrays bound "
                    "by a rule (RoundArray) over the participants"
                )
            node_shift = _fixed(_shift(item.nodes, participants), item.nodes)
            client_shift = _fixed(_shift(item.clients, participants), item.clients)
            label = item.labels[0] if item.labels else ""
            if node_shift is None or client_shift is None:
                return label, "its rows are not the participants shifted by a constant"
            traffic = _per_level(item) if item.extents else _per_node(item)
            if traffic is None:
                return label, _UNEVEN_TRAFFIC
            steps.append(
                (item.structure, node_shift, coefs, client_shift, item.outside, item.labels)
            )
            per_node.append(traffic)
        return cls(steps, per_node)

    @classmethod
    def _attempt_groups(cls, plan: list, participants: np.ndarray, bases: tuple):
        """:meth:`attempt` with groups: node and client arrays located among
        ``(participants, *bases)``, traffic kept per node."""
        everything = (participants, *bases)
        steps, per_node = [], []
        for item in plan:
            if not isinstance(item, LocalStep):
                return getattr(item, "label", ""), "it is not part of a node-local segment"
            if item.views or item.samples is not None:
                return (item.labels[0] if item.labels else ""), _BY_INDEX
            if item.products:
                return (item.labels[0] if item.labels else ""), _PRODUCTS
            coefs = tuple(template_coefficient(c) for c in item.coefs)
            if None in coefs:
                label = _label_of_slot(item, coefs.index(None))
                return label, (
                    "it has per-client coefficients of several values (an array), which "
                    "depend on who participates: a template needs numbers"
                )
            nodes = _fixed(_locate(item.nodes, everything), item.nodes)
            clients = _fixed(_locate(item.clients, everything), item.clients)
            traffic = _per_level(item) if item.extents else _per_node(item)
            label = item.labels[0] if item.labels else ""
            if nodes is None or clients is None:
                return label, "its rows are not one group of the participants, shifted"
            if traffic is None:
                return label, _UNEVEN_TRAFFIC
            steps.append((item.structure, nodes, coefs, clients, item.outside, item.labels))
            per_node.append(traffic)
        return cls(steps, per_node, len(bases))

    def traffic(self, plan: list, samples=None) -> tuple[int, int, int, int]:
        """The (gradients, messages, floats, sample gradients) of an instance ``plan``:
        each step's traffic per node times its nodes, its sample gradients from its
        clients' ``samples`` (the run's sample counts; 1 per gradient where None)."""
        total = [0, 0, 0, 0]
        for step, unit, recipe in zip(plan, self.per_node, self.steps, strict=True):
            counted = (
                recipe.traffic(step, samples)
                if isinstance(recipe, SubsetRecipe)
                else _step_traffic(unit, step, samples)
            )
            for j, value in enumerate(counted):
                total[j] += value
        return total[0], total[1], total[2], total[3]

    def instantiate(
        self, participants: np.ndarray, bases: tuple = (), trips=None, r: int | None = None
    ) -> list | None:
        """The plan for ``participants`` (and the round's groups ``bases``, for a template
        with groups, and its trip counts ``trips`` for one whose runs repeat a phase) in
        round ``r`` (which binds the coefficients that are
        :class:`~stochmix.engine.model.round_scalars.RoundScalar` s; None keeps their
        values), or None if it would not be right."""
        extents: tuple = ()
        counts = None
        if trips is not None:
            extents, counts = trips.extents, trips.counts
        if participants.size == 0 or len(bases) != self.bases:
            return None
        if any(b.size < 2 for b in bases):
            return None
        everything = (participants, *bases)
        plan: list = []
        shifted: dict = {}
        for step in self.steps:
            if isinstance(step, SubsetRecipe):
                plan.append(step.instance(participants))
                continue
            structure, node_shift, coefs, client_shift, outside, labels = step
            nodes = self._indices(node_shift, everything, shifted)
            clients = self._indices(client_shift, everything, shifted)
            if nodes is _AMBIGUOUS or clients is _AMBIGUOUS:
                return None  # built in full, which tells the fits apart (narrow)
            if nodes.size and any(bool((nodes == node).any()) for node in outside):
                return None
            if any(isinstance(c, RoundArray) for c in coefs):
                if r is None:
                    return None  # the arrays are the planned round's participants'
                coefs = tuple(bound(c, r, participants) for c in coefs)
            elif r is not None and any(isinstance(c, RoundScalar) for c in coefs):
                coefs = tuple(bound(c, r, participants) for c in coefs)
            limited = bool(structure.levels) and max(structure.levels) >= 0
            if limited and len(extents) != max(structure.levels) + 1:
                return None  # another number of repetitions: another structure
            if any(isinstance(c, Uniform) for c in coefs):
                n = nodes.size if nodes is not None and nodes.size else participants.size
                coefs = tuple(as_array(c, n) for c in coefs)
            plan.append(
                LocalStep(
                    structure, nodes, coefs, clients, outside, labels,
                    extents=extents if limited else (),
                    counts=counts if limited else None,
                )
            )  # fmt: skip
        return plan

    def narrow(self, plan: list, participants: np.ndarray, bases: tuple = (), trips=None):
        """Keep, of each node or client array's several fits (:class:`_Either`), those that
        give the arrays of ``plan``, the round built in full for ``participants``."""
        if len(plan) != len(self.steps) or len(bases) != self.bases:
            return
        everything = (participants, *bases)
        cache: dict = {}
        steps: list = []
        for step, built in zip(self.steps, plan, strict=True):
            if isinstance(step, SubsetRecipe):
                steps.append(step)
                continue
            if not isinstance(built, LocalStep):
                return
            structure, nodes, coefs, clients, outside, labels = step
            nodes = self._kept(nodes, built.nodes, everything, cache)
            clients = self._kept(clients, built.clients, everything, cache)
            steps.append((structure, nodes, coefs, clients, outside, labels))
        self.steps = steps

    @staticmethod
    def _kept(shift, built, everything: tuple, cache):
        if not isinstance(shift, _Either) or built is None:
            return shift
        kept = [
            one for one in shift
            if np.array_equal(RoundTemplate._indices(one, everything, cache), built)
        ]  # fmt: skip
        if not kept:
            return shift  # none fits: instances stay refused, each round built in full
        return kept[0] if len(kept) == 1 else _Either(kept)

    @staticmethod
    def _indices(shift, everything: tuple, cache):
        if isinstance(shift, _Either):  # only where every fit gives the same array
            arrays = [RoundTemplate._indices(one, everything, cache) for one in shift]
            if arrays and all(np.array_equal(arrays[0], a) for a in arrays[1:]):
                return arrays[0]
            return _AMBIGUOUS
        if isinstance(shift, _Fixed):
            return shift.indices
        if shift == "none":
            return None
        if shift == "empty":
            return np.zeros(0, dtype=np.int64)
        b, k = shift if isinstance(shift, tuple) else (0, shift)
        if (b, k) not in cache:
            cache[b, k] = everything[b] + k if k else everything[b]
        return cache[b, k]

    def matches(
        self, plan: list, participants: np.ndarray, bases: tuple = (), traffic=None, samples=None,
        trips=None, r: int | None = None,
    ) -> bool:  # fmt: skip
        """Whether a fully built plan (of round ``r``) equals this template's instance (and,
        given the built round's ``traffic``, whether the instance counts the same with the
        run's sample counts ``samples``)."""
        mine = self.instantiate(participants, bases, trips, r)
        if mine is None or len(mine) != len(plan):
            return False
        if traffic is not None and self.traffic(mine, samples) != tuple(traffic):
            return False
        for a, b, step in zip(mine, plan, self.steps, strict=True):
            if isinstance(step, SubsetRecipe):
                if not SubsetRecipe.same(a, b):
                    return False
                continue
            if not isinstance(b, LocalStep) or a.structure != b.structure:
                return False
            if not _same_coefficients(a.coefs, b.coefs) or a.outside != b.outside:
                return False
            if a.extents != b.extents:
                return False
            for x, y in ((a.nodes, b.nodes), (a.clients, b.clients), (a.counts, b.counts)):
                if x is None or y is None:
                    if x is not y:
                        return False
                elif not np.array_equal(x, y):
                    return False
        return True
