"""The round planner: what a round runs, built from the method's phases or reused.

Planning a round (:func:`~stochmix.engine.plan.round_plan.plan_round`) costs far more than a
small round takes to run, and most rounds repeat an earlier round's structure. The
planner reuses plans two ways:

* **the plan cache**, keyed by :meth:`~stochmix.engine.model.method.Method.phase_key`: a
  round whose key came before gets that round's plan. A plan whose key holds the
  participants themselves is kept only once its key has come *twice*, so random
  participation, whose sets rarely repeat, costs a hash per round and no memory, and
  such rounds of more than :data:`CACHE_MAX_PARTICIPANTS` participants are always built;
  a key that names a position (a decentralized method's step in its period) is kept the
  first time, at any size;
* **round templates**, keyed by :meth:`~stochmix.engine.model.method.Method.template_key`:
  the plan with its participants abstracted out (:mod:`stochmix.engine.plan.template`), checked
  against a full build on the key's second round.

Either way the plan is the one a full build gives, so a run's numbers never depend on
what the planner kept. What the planner finds slow (a phase on the general path, a
``template_key`` it cannot use) goes into its :attr:`RoundPlanner.notes` (see
:mod:`stochmix.engine.plan.slowpath`).
"""

from __future__ import annotations

import numpy as np

from ..model.inherited_keys import MethodKeys
from ..model.method import Method, RunContext
from ..model.rowmap import RowMap
from ..model.traffic import CountedProblem, round_traffic
from .capabilities import Capabilities, capabilities
from .round_plan import general_path, plan_round
from .slowpath import SlowPaths
from .template import RoundTemplate

__all__ = [
    "CACHE_MAX_PARTICIPANTS",
    "CACHE_SEEN",
    "CACHE_SIZE",
    "NOT_TEMPLATED",
    "RoundPlanner",
    "TEMPLATES",
    "record_overrides",
]

CACHE_SIZE = 1024  # rounds' plans kept for reuse (see Method.phase_key)
CACHE_MAX_PARTICIPANTS = 4096  # larger rounds are rebuilt: rarely repeated, costly to keep
CACHE_SEEN = 1 << 16  # keys remembered (as hashes) to spot the ones that come back
TEMPLATES = 256  # round templates kept (see Method.template_key)
NOT_TEMPLATED = "not templated (its template_key is not used)"


class RoundPlanner:
    """The plans of one run's rounds (see the module docstring).

    Args:
        method: the run's method (its ``round_phases``, ``phase_key``, ``template_key``).
        backend: the run's backend (plans depend on what it can run).
        ctx: the run's context.
        caps: the backend's :func:`~stochmix.engine.plan.capabilities.capabilities` (made
            here when None).
        notes: where the slow paths met are recorded (and warned about, if it says so);
            a quiet :class:`~stochmix.engine.plan.slowpath.SlowPaths` by default.
    """

    def __init__(
        self,
        method: Method,
        backend,
        ctx: RunContext,
        caps: Capabilities | None = None,
        notes: SlowPaths | None = None,
    ):
        self.method, self.backend, self.ctx = method, backend, ctx
        self.keys = MethodKeys(method)  # its keys as the engine takes them
        self.caps = capabilities(backend) if caps is None else caps
        self.notes = SlowPaths(method.name) if notes is None else notes
        self.cache: dict = {}  # phase key -> plan
        self.seen: set = set()  # hashes of phase keys met once
        self.templates: dict = {}  # template key -> RoundTemplate, or False: never
        self.source = ""  # how the last plan came: "template", "cache" or "built"
        #: (gradient evaluations, messages, floats, sample gradients) of the last plan's
        #: linear phases (see traffic.py)
        self.traffic: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._traffics: dict = {}  # phase key -> the traffic of its plan
        self.phases: list | None = None  # the last round's phases, if it was built

    def plan(self, r: int, participants: np.ndarray) -> list:
        """The plan of round ``r`` (sorted int64 ``participants``): from its template when
        the method has a verified one for the round, else cached or built."""
        self.phases = None  # the round's phases, where it is built in full
        key = (
            None
            if record_overrides(self.ctx)
            else self.keys.get("template_key", r, participants)
        )
        bases: tuple = ()
        trips = None
        if key is not None and self.caps.trips:  # a phase repeated by per-node counts
            trips = self.method.round_trips(r, participants, self.ctx)
            if trips is not None:
                key = (key, "trips", trips.most)
        if key is not None and trips is None:  # or rounds over groups of participants
            found = self.method.template_groups(r, participants, self.ctx)
            if found is not None:
                extra, bases = found
                key = (key, extra)
        if key is None or participants.size < 2:
            # one participant's rows are single rows of the state: such rounds are always
            # built in full, so that a run gives the same numbers with or without templates
            return self.cached(r, participants)
        template = self.templates.get(key)
        if template is not None and template is not False and template.trusted(participants):
            plan = template.instantiate(participants, bases, trips, r)
            if plan is not None:
                self.source = "template"
                self.traffic = template.traffic(plan, self.ctx.sample_counts)
                return plan
            plan = self.cached(r, participants)
            template.narrow(plan, participants, bases, trips)  # arrays that fit two ways
            return plan
        plan = self.cached(r, participants)
        if template is None:
            if len(self.templates) >= TEMPLATES:
                self.templates.clear()
            method, dim = self.method, self.ctx.dim
            found = RoundTemplate.attempt(
                plan, participants, bases, self.ctx.sample_counts, trips,
                floats_of=lambda block: method.sent_floats(block, dim), built=self.traffic,
            )  # fmt: skip
            self.templates[key] = found if isinstance(found, RoundTemplate) else False
            if isinstance(found, RoundTemplate):
                found.sizes.add(participants.size)
            whole = hasattr(self.backend, "apply_blockwise")
            # a phase on the general path has said why already (and stops the template)
            subsets = self.caps.row_subsets
            if isinstance(found, tuple) and not any(
                general_path(it, whole, subsets) for it in plan
            ):
                self.notes.add(found[0], NOT_TEMPLATED, found[1])
        elif template is not False and not template.trusted(participants):
            # not checked yet, or not at a round of this size
            template.narrow(plan, participants, bases, trips)
            verified = template.matches(
                plan, participants, bases, self.traffic, self.ctx.sample_counts, trips, r
            )
            template.verified = verified
            if verified:
                template.sizes.add(participants.size)
            else:
                self.templates[key] = False  # the method's rounds differ: never template it
                self.notes.add(
                    "",
                    NOT_TEMPLATED,
                    "two rounds with the same template_key built different plans (not the "
                    "same phases up to who participates)",
                )
        return plan

    def cached(self, r: int, participants: np.ndarray) -> list:
        """The round's plan from the plan cache, or built (and kept if its key came
        twice)."""
        key = None
        if not record_overrides(self.ctx):
            key = self.keys.get("phase_key", r, participants)
        if key is None or (participants.size > CACHE_MAX_PARTICIPANTS and _heavy(key)):
            return self.build(r, participants)
        plan = self.cache.get(key)
        if plan is not None:
            self.source = "cache"
            self.traffic = self._traffics[("phase", key)]
            for item in plan:  # a reused row map draws as this round's own would
                if isinstance(item, RowMap):
                    item.round = r
        else:
            plan = self.build(r, participants)
            fingerprint = hash(key)
            if fingerprint not in self.seen and _heavy(key):
                if len(self.seen) > CACHE_SEEN:
                    self.seen.clear()
                self.seen.add(fingerprint)
            elif len(self.cache) < CACHE_SIZE:
                self.cache[key] = plan
                self._traffics[("phase", key)] = self.traffic
        return plan

    def round_traffic(self) -> tuple[int, int, int, int]:
        """The last round's (gradient evaluations, messages, floats, sample gradients):
        its plan's linear phases and what its row maps asked of the problem (call once
        per round, after it ran)."""
        counted = self.ctx.map_problem
        if not isinstance(counted, CountedProblem):
            return self.traffic
        gradients, samples = counted.take()
        g, m, f, s = self.traffic
        return g + gradients, m, f, s + samples

    def build(self, r: int, participants: np.ndarray) -> list:
        """The round's plan built in full from the method's phases."""
        self.source = "built"
        phases = self.method.round_phases(r, participants, self.ctx)
        self.phases = phases
        self.traffic = round_traffic(phases, self.method, self.ctx.dim, self.ctx.sample_counts)
        return plan_round(phases, self.backend, self.method, self.ctx, self.caps, notes=self.notes)


def _heavy(key) -> bool:
    """Whether a phase key holds the participants themselves (bytes): the plans of large
    rounds keyed by who takes part are rarely met again and costly to keep. A key that
    names a position (a decentralized method's step in its period) is kept at any size."""
    if isinstance(key, bytes | bytearray | np.ndarray):
        return True
    if isinstance(key, tuple):
        return any(_heavy(part) for part in key)
    return False


def record_overrides(ctx: RunContext) -> bool:
    """Whether the round's record carries what a method's keys cannot see (a clock's
    local-step counts, an asynchronous round's launches, the uploads that arrived): such
    rounds are built in full."""
    record = ctx.activation
    return record is not None and any(
        getattr(record, name, None) is not None for name in ("steps", "launched", "received")
    )
