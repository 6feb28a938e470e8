"""The rounds of a run under a participation process, as compact affine steps that
:func:`~stochmix.analysis.linear.lyapunov_rate` applies and scans.

A round's phases are built as :func:`stochmix.run` builds them: from
``method.round_phases``, reusing earlier rounds with the same ``phase_key``, and, where the
method declares a ``template_key``, by substituting the participants into the first round
with that key and as many participants instead of building the phases again (the engine's
round templates, :mod:`stochmix.engine.plan.template`; here on the rows, columns and clients of
each phase, whose lengths follow the number of participants). As
the engine does, the claim is checked: the second round of each key is built in full and
compared with the substitution, entry by entry, and a key that fails is never substituted
again. A substitution that would move a row the template reads as a fixed row (the row of
a client outside the template's participants who joins this round) falls back to a full
build.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...engine import Phase
from ...engine.model.inherited_keys import MethodKeys
from ...engine.model.round_scalars import RoundArray, RoundScalar
from .conserved import phase_block
from .operators import refuse_sampled, run_context


def _ruled(phases: list[Phase]) -> tuple:
    """The coefficients of a round's phases that carry rules of the round or its
    participants (round scalars: FedAvg's 1/|S|; round arrays: FedStale's 1 / (N p_i))."""
    found = []
    for phase in phases:
        form = getattr(phase, "local", None)
        if form is not None:
            found += [c for c in form.coefficients if isinstance(c, RoundScalar | RoundArray)]
    return tuple(found)


def _unchanged(values: tuple, r: int, participants: np.ndarray) -> bool:
    """Whether every rule gives, for round r and ``participants``, the value it holds:
    substituting the participants into a round's matrices keeps its numbers, where the
    engine's templates bind each round's."""
    for value in values:
        if isinstance(value, RoundArray) and value.rule is None:
            return False  # values that follow no rule: the round is built in full
        now = value.at(r, participants)
        if isinstance(value, RoundArray):
            if not np.array_equal(now, value.view(np.ndarray)):
                return False
        elif now != float(value):
            return False
    return True


class StepForm:
    """What the rounds that are the same up to who participates share: one phase's
    compressed rows of ``M`` (k, u) over the columns it reads, its rows of ``B`` (k, c),
    and (on first use) its block for the conserved-quantity scan."""

    __slots__ = ("mix", "inject", "phase", "_block")

    def __init__(self, mix: sp.csr_array, inject: sp.csr_array | None, phase: Phase):
        self.mix, self.inject, self.phase = mix, inject, phase
        self._block: tuple[np.ndarray, np.ndarray] | None = None

    def block(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~stochmix.analysis.linear.conserved.phase_block` of the phase."""
        if self._block is None:
            self._block = phase_block(self.phase)
        return self._block


class Step:
    """One phase of one round: ``Z[rows] <- mix @ Z[cols] + inject @ G(Z[points])`` with
    ``G`` the gradients of ``clients`` (rows, cols, clients and points absolute: state rows
    and client indices)."""

    __slots__ = ("form", "rows", "cols", "clients", "points")

    def __init__(self, form, rows, cols, clients, points):
        self.form, self.rows, self.cols = form, rows, cols
        self.clients, self.points = clients, points

    @property
    def entries(self) -> int:
        """Numbers it holds (for a memory budget)."""
        return self.rows.size + self.cols.size + 2 * self.clients.size

    def apply(self, z: np.ndarray, aff, offset_columns: slice | None = None) -> None:
        """Apply the step to ``z`` (m, w) in place, with gradients ``H_c x`` (the linear
        part) on every column and ``- c_c`` added on the columns ``offset_columns``."""
        new = self.form.mix @ z[self.cols]
        if self.form.inject is not None:
            at = z[self.points]
            grads = aff.apply_columns(self.clients, at)
            if offset_columns is not None:
                grads[:, offset_columns] -= aff.linear[self.clients]
            new += self.form.inject @ grads
        z[self.rows] = new

    def triplets(self) -> tuple:
        """The step's entries in absolute indices, sorted, for comparing two steps."""
        out: list[tuple | None] = []
        for mat, cols in ((self.form.mix, self.cols), (self.form.inject, self.clients)):
            if mat is None:
                out.append(None)
                continue
            coo = mat.tocoo()
            r, c, v = self.rows[coo.row], cols[coo.col], coo.data
            keep = v != 0
            order = np.lexsort((c[keep], r[keep]))
            out.append((r[keep][order], c[keep][order], v[keep][order]))
        return tuple(out)


def _same(a: Step, b: Step) -> bool:
    if a.rows.size != b.rows.size or not np.array_equal(np.sort(a.rows), np.sort(b.rows)):
        return False
    if not np.array_equal(a.clients, b.clients) or not np.array_equal(a.points, b.points):
        return False
    for x, y in zip(a.triplets(), b.triplets(), strict=True):
        if (x is None) != (y is None):
            return False
        if x is not None and not all(np.array_equal(p, q) for p, q in zip(x, y, strict=True)):
            return False
    return True


class _Template:
    """The steps of the first round with a template key, and where each of their indices
    sits among its participants (``-1``: a fixed row or none)."""

    def __init__(
        self, participants: np.ndarray, steps: list[Step], client_of_row: np.ndarray,
        ruled: tuple = (),
    ):  # fmt: skip
        self.participants = participants
        self.steps = steps
        self.ruled = ruled  # coefficients with rules: an instance must keep their values
        self.status = "pending"  # verified on the second round with the key: "ok" / "broken"
        fixed = []
        self.where = []
        for step in steps:
            pos = []
            for rows in (step.rows, step.cols, step.points):
                p, stray = self._positions(client_of_row[rows])
                fixed.append(stray)
                pos.append(p)
            cpos, stray = self._positions(step.clients)
            if (cpos < 0).any():  # a gradient of a client outside the participants
                self.status = "broken"
            self.where.append((*pos, cpos))
        self.fixed_clients = np.unique(np.concatenate(fixed)) if fixed else np.zeros(0, int)

    def _positions(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index among the participants of each client (-1 for a non-client row or a client
        outside them), and the clients outside them (fixed rows of other clients)."""
        pos = np.searchsorted(self.participants, clients)
        pos = np.minimum(pos, max(self.participants.size - 1, 0))
        inside = (clients >= 0) & (self.participants[pos] == clients)
        return np.where(inside, pos, -1), clients[(clients >= 0) & ~inside]

    def instance(self, participants: np.ndarray, r: int) -> list[Step] | None:
        """The steps of round r with ``participants`` in place of the template's, or None
        when one of them is a client whose rows the template reads as fixed rows, or when
        a coefficient's rule gives another value in round r."""
        if participants.size != self.participants.size:
            return None
        if self.ruled and not _unchanged(self.ruled, r, participants):
            return None
        if self.fixed_clients.size and np.isin(participants, self.fixed_clients).any():
            return None
        # a participant's rows move by its client's shift, in every block
        shift = np.append(participants - self.participants, 0)  # shift[-1] = 0: fixed rows
        return [
            Step(
                step.form,
                step.rows + shift[prow],
                step.cols + shift[pcol],
                participants[pcli] if pcli.size else step.clients,
                step.points + shift[ppts],
            )
            for step, (prow, pcol, ppts, pcli) in zip(self.steps, self.where, strict=True)
        ]


class Rounds:
    """The steps of each round of a run from ``participation.masks(seed)``.

    :meth:`steps` gives round r's steps and whether they are new (not reused through
    ``phase_key`` from an earlier round). :meth:`record` builds every round once, feeds a
    conserved-quantity scan, and keeps the steps for a second pass (:meth:`steps` then
    replays them) while they fit in ``budget`` numbers.
    """

    def __init__(self, method, problem, participation, seed):
        self.args = (method, problem, participation, seed)
        self._start()

    def _start(self) -> None:
        """Start from round 0 (again): a fresh context, stream of masks and caches."""
        method, problem, participation, seed = self.args
        self.method = method
        self._keys = MethodKeys(method)  # its keys as runs take them
        self.ctx = ctx = run_context(method, problem, participation.probabilities, seed)
        self.masks = participation.masks(seed)
        self.cache: dict = {}
        self.templates: dict = {}
        self.replay: list | None = None
        self.built = self.substituted = 0
        # client whose row each state row is, in the blocks with a row per client (-1: the
        # server's rows, rows of blocks too short to hold every client)
        lay, n = ctx.layout, ctx.n_clients
        offset = method.client_node + lay.first_node(method.model_block)
        self.client_of_row = np.full(lay.size, -1, dtype=np.int64)
        for b in lay.blocks:
            client = np.arange(b.rows) + b.first_node - offset
            if b.rows >= n:
                ok = (client >= 0) & (client < n)
                self.client_of_row[lay.rows(b.name)[ok]] = client[ok]

    def _convert(self, phases: list[Phase]) -> list[Step]:
        lay, method = self.ctx.layout, self.method
        forms: dict = {}
        steps = []
        for phase in phases:
            if phase.is_identity:
                continue
            form = forms.get(id(phase))
            refuse_sampled(phase)
            mix, rows, clients = phase.mix, phase.rows, phase.clients
            cols = np.unique(mix.indices)
            if form is None:
                compressed = sp.csr_array(
                    (mix.data, np.searchsorted(cols, mix.indices), mix.indptr),
                    shape=(rows.size, cols.size),
                )
                form = forms[id(phase)] = StepForm(compressed, phase.inject, phase)
            if phase.inject is None:
                clients, points = np.zeros(0, np.int64), np.zeros(0, np.int64)
            else:
                points = lay.rows(method.model_block, clients + method.client_node)
            steps.append(Step(form, rows, cols, clients, points))
        return steps

    def steps(self, r: int) -> tuple[list[Step], bool]:
        """Round r's steps, and whether they are new (not reused from an earlier round)."""
        if self.replay is not None:
            return self.replay[r]
        participants = np.flatnonzero(next(self.masks))
        key = self._keys.get("phase_key", r, participants)
        hit = self.cache.get(key) if key is not None else None
        if hit is not None:
            return hit, False
        tkey = None
        if participants.size >= 2:
            tkey = self._keys.get("template_key", r, participants)
        if tkey is not None and (
            self.method.round_trips(r, participants, self.ctx) is not None
            or self.method.template_groups(r, participants, self.ctx) is not None
        ):
            tkey = None  # uneven local steps: the counts by position differ from round to round
        if tkey is not None:  # a phase's arrays have a length per participant: one per size
            tkey = (tkey, participants.size)
        template = self.templates.get(tkey) if tkey is not None else None
        steps = None
        if template is not None and template.status == "ok":
            steps = template.instance(participants, r)
        if steps is None:
            phases = self.method.round_phases(r, participants, self.ctx)
            steps = self._convert(phases)
            self.built += 1
            if template is None and tkey is not None:
                self.templates[tkey] = _Template(
                    participants, steps, self.client_of_row, _ruled(phases)
                )
            elif template is not None and template.status == "pending":
                made = template.instance(participants, r)
                if made is not None:
                    ok = len(made) == len(steps) and all(map(_same, made, steps))
                    template.status = "ok" if ok else "broken"
        else:
            self.substituted += 1
        if key is not None and len(self.cache) < 1024:
            self.cache[key] = steps
        return steps, True

    def record(self, rounds: int, scan=None, budget: int = 4_000_000) -> None:
        """Build rounds ``0 .. rounds - 1``, add each new round's steps to ``scan`` (a
        :class:`~stochmix.analysis.linear.conserved._ConservedScan`; a form repeated
        within a round counts once), and keep them for replay if they hold at most
        ``budget`` numbers; otherwise start over, so that the next pass builds them again."""
        kept: list | None = []
        entries = 0
        for r in range(rounds):
            steps, new = self.steps(r)
            if new and scan is not None:
                seen = set()
                for step in steps:
                    if id(step.form) not in seen:
                        seen.add(id(step.form))
                        scan.add_block(step.rows, *step.form.block())
            if kept is not None:
                kept.append((steps, new))
                entries += sum(s.entries for s in steps) if new else 0
                if entries > budget:
                    kept = None
        if kept is None:
            self._start()
        else:
            self.replay = kept
