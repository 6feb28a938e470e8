"""Templates of activated rounds: a whole-block phase on the active nodes' rows, with the
active nodes abstracted out.

Under node activation a decentralized iteration is a phase on the rows A of its blocks
(:attr:`~stochmix.engine.model.blockwise.BlockwiseForm.subset`): ``T[A] <- s (W[A] @ S) +
c S[A] + c' G(A)``. Its structure (which blocks, which matrices, which numbers) is the same
in every iteration at the same place of the graph sequence; only A changes. A
:class:`SubsetRecipe` keeps that structure with the form's index arrays written as A
shifted by each block's first row, so that a
:class:`~stochmix.engine.plan.template.RoundTemplate` makes the phase for a new A by
substitution: the round's equations are not written again, nothing is sliced (the
products read the rows A of W where they lie), and the instance is checked against a
full build like any template (:meth:`SubsetRecipe.same`).

A push from the active nodes (:attr:`BlockwiseForm.pushes`: the columns A of a whole
matrix) is kept the same way, its senders and source rows A shifted.

An instance's traffic is counted from A: one gradient per active node where the form takes
gradients; per matrix, the nonzero entries off the diagonal of its rows A (one message
each, counted once per matrix, as :func:`~stochmix.engine.model.traffic.phase_traffic`
counts an operator applied to several blocks), and of a push the entries off the
diagonal of its columns A; the floats of each row sent, by block.
"""

from __future__ import annotations

import numpy as np

from ...mixing.rowsparse import rows_entries
from ..model.blockwise import BlockTarget, BlockTerm, BlockwiseForm
from ..model.phase import Phase
from ..model.traffic import row_cross, samples_of
from .template_values import as_array, shift_of, template_coefficient

__all__ = ["SubsetRecipe", "form_triplets"]


class SubsetRecipe:
    """A planned phase on the active rows A (a whole-block form with ``subset``), its A
    abstracted: see the module docstring. Made by :meth:`attempt`."""

    def __init__(
        self, phase: Phase, form: BlockwiseForm, targets: list, floats: dict, pushes=()
    ):
        self.size, self.label = phase.size, phase.label
        self.row_sparse = phase.row_sparse
        self.order = tuple((targets_index(form, t), now, ok) for t, now, ok in form.order)
        #: per target: (block, row shift, ((kind, source, rows or shift, matrix, coef), ...))
        self.targets = targets
        self.gradients = form.clients is not None
        self.floats = floats  # source block -> floats a row of it costs on the wire
        #: per push: (target block, its first row, source, source rows' shift, matrix, coef)
        self.pushes = tuple(pushes)

    @classmethod
    def attempt(cls, item, participants: np.ndarray, floats_of) -> SubsetRecipe | str:
        """The recipe of a planned phase whose form is on the rows ``participants``, or
        why it is not one (in words). ``floats_of(block)``: the floats a row of ``block``
        costs on the wire (the method's ``sent_floats``)."""
        form = getattr(item, "blockwise", None) if isinstance(item, Phase) else None
        if form is None or not form.subset:
            return "it is not part of a node-local segment"
        if form.clients is not None and shift_of(form.clients, participants) != 0:
            return "its gradients are not the active nodes'"
        targets, floats = [], {}
        for target in form.targets:
            shift = shift_of(target.rows, participants)
            if shift is None:
                return "its rows are not the active nodes shifted by a constant"
            terms = []
            for term in target.terms:
                coef = template_coefficient(term.coef)
                if coef is None:
                    return "it has per-node coefficients of several values"
                if term.kind == "mix":
                    if term.select is None or shift_of(term.select, participants) != 0:
                        return "its products do not read the rows of whole matrices"
                    floats[term.source] = float(floats_of(term.source))
                    terms.append(("mix", term.source, term.rows, term.matrix, coef))
                elif term.kind == "block":
                    k = shift_of(term.rows, participants)
                    if k is None:
                        return "it reads rows that are not the active nodes shifted"
                    terms.append(("block", term.source, k, None, coef))
                else:
                    terms.append(("grad", None, None, None, coef))
            targets.append((target.block, shift, tuple(terms)))
        pushes = []
        for block, base, term in form.pushes:
            k = shift_of(term.rows, participants)
            if shift_of(term.select, participants) != 0 or k is None:
                return "its pushes are not the active nodes' (shifted by a constant)"
            floats[term.source] = float(floats_of(term.source))
            pushes.append((block, base, term.source, k, term.matrix, float(term.coef)))
        return cls(item, form, targets, floats, pushes)

    def form(self, participants: np.ndarray) -> BlockwiseForm:
        """The whole-block form for the active nodes ``participants``."""
        m = participants.size
        shifted: dict = {}

        def rows(k: int) -> np.ndarray:
            found = shifted.get(k)
            if found is None:
                found = shifted[k] = participants + k if k else participants
            return found

        def coef(c):
            return as_array(c, m)

        targets = []
        for block, shift, terms in self.targets:
            made = []
            for kind, source, where, matrix, c in terms:
                if kind == "mix":
                    made.append(BlockTerm("mix", source, where, matrix, c, participants))
                elif kind == "block":
                    made.append(BlockTerm("block", source, rows(where), None, coef(c)))
                else:
                    made.append(BlockTerm("grad", None, None, None, coef(c)))
            targets.append(BlockTarget(block, rows(shift), tuple(made)))
        order = tuple((targets[i], now, ok) for i, now, ok in self.order)
        clients = participants if self.gradients else None
        # (sorted, distinct: consecutive when they span their count)
        consecutive = clients is not None and int(clients[-1] - clients[0]) == m - 1
        pushes = tuple(
            (block, base, BlockTerm("push", source, rows(k), matrix, c, participants))
            for block, base, source, k, matrix, c in self.pushes
        )
        return BlockwiseForm(
            tuple(targets), clients, consecutive, order, subset=True, pushes=pushes
        )

    def instance(self, participants: np.ndarray) -> Phase:
        """The phase for the active nodes ``participants`` (its sparse rows, for analysis
        or a backend that asks, made from the form when first asked)."""
        form = self.form(participants)
        size = self.size
        phase = Phase(
            size,
            lambda: form_triplets(form, size),
            label=self.label,
            blockwise=lambda: form,
        )
        phase.row_sparse = self.row_sparse
        phase.__dict__["blockwise"] = form
        return phase

    def traffic(self, item: Phase, samples) -> tuple[int, int, int, int]:
        """An instance's (gradients, messages, floats, sample gradients)."""
        form = item.blockwise
        assert form is not None  # an instance has its form
        counted: dict = {}
        floats = 0
        for target in form.targets:
            for term in target.terms:
                if term.kind != "mix" or term.select is None:
                    continue
                found = counted.get(id(term.matrix))
                if found is None:  # its rows A: one message per entry off the diagonal
                    rows = row_cross(term.matrix)[term.select]
                    found = counted[id(term.matrix)] = int(rows.sum())
                floats += int(found * self.floats[term.source])
        for _, _, term in form.pushes:  # the senders' columns (rows of C transposed)
            found = counted.get(id(term.matrix))
            if found is None:
                found = counted[id(term.matrix)] = int(row_cross(term.matrix)[term.select].sum())
            floats += int(found * self.floats[term.source])
        messages = sum(counted.values())
        if form.clients is None:
            return 0, messages, floats, 0
        return form.clients.size, messages, floats, samples_of(samples, form.clients)

    @staticmethod
    def same(a: Phase, b) -> bool:
        """Whether a built item ``b`` is the instance ``a``: the same form, index arrays,
        matrices (the same objects) and coefficients."""
        x, y = a.blockwise, getattr(b, "blockwise", None) if isinstance(b, Phase) else None
        if x is None or y is None or not y.subset or a.label != b.label:
            return False
        if (x.hand_off, x.take, x.consecutive) != (y.hand_off, y.take, y.consecutive):
            return False
        if not _same_array(x.clients, y.clients) or len(x.targets) != len(y.targets):
            return False
        if len(x.pushes) != len(y.pushes):
            return False
        for (block, base, u), (other, start, v) in zip(x.pushes, y.pushes, strict=True):
            if (block, base, u.source, u.coef) != (other, start, v.source, v.coef):
                return False
            if u.matrix is not v.matrix or not _same_array(u.select, v.select):
                return False
            if not _same_array(u.rows, v.rows):
                return False
        if [(t.block, now, ok) for t, now, ok in x.order] != [
            (t.block, now, ok) for t, now, ok in y.order
        ]:
            return False
        for s, t in zip(x.targets, y.targets, strict=True):
            if s.block != t.block or not _same_array(s.rows, t.rows):
                return False
            if len(s.terms) != len(t.terms):
                return False
            for u, v in zip(s.terms, t.terms, strict=True):
                if (u.kind, u.source, u.matrix is v.matrix) != (v.kind, v.source, True):
                    return False
                if not (_same_array(u.rows, v.rows) and _same_array(u.select, v.select)):
                    return False
                if not _same_array(u.coef, v.coef):
                    return False
        return True


def targets_index(form: BlockwiseForm, target: BlockTarget) -> int:
    """The place of ``target`` in ``form.targets``."""
    return next(i for i, t in enumerate(form.targets) if t is target)


def _same_array(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, slice) or isinstance(b, slice):
        return a == b
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.shape(a) == np.shape(b) and np.array_equal(a, b))
    return a == b


def form_triplets(form: BlockwiseForm, size: int) -> tuple:
    """The sparse rows of a phase with this form on some rows, as
    :class:`~stochmix.engine.model.phase.Phase` keeps them: (targets, sources, coefs,
    gradient targets, clients, gradient coefs, zero rows), rows of Z."""
    t_rows: list = []
    s_rows: list = []
    coefs: list = []
    g_rows: list = []
    g_clients: list = []
    g_coefs: list = []
    for target in form.targets:
        into = np.asarray(target.rows, dtype=np.int64)  # (a form on some rows: an array)
        for term in target.terms:
            coef = np.broadcast_to(np.asarray(term.coef, dtype=float), into.shape)
            if term.kind == "mix":
                rows = term.rows_matrix()
                assert rows is not None and isinstance(term.rows, slice)  # a product's
                t_rows.append(np.repeat(into, np.diff(rows.indptr)))
                s_rows.append(rows.indices.astype(np.int64) + term.rows.start)
                coefs.append(rows.data * term.coef)
            elif term.kind == "block":
                t_rows.append(into)
                s_rows.append(np.asarray(term.rows, dtype=np.int64))
                coefs.append(np.array(coef))
            else:
                g_rows.append(into)
                g_clients.append(form.clients)
                g_coefs.append(np.array(coef))

    zero: list = []
    reached: dict = {}  # target block -> (its first row, the rows its pushes reach)
    for block, base, term in form.pushes:
        columns, senders = term.matrix, term.select
        at, counts = rows_entries(columns, senders)  # each sender's column in turn
        rows = columns.indices[at].astype(np.int64)
        t_rows.append(base + rows)
        s_rows.append(np.repeat(np.asarray(term.rows, dtype=np.int64), counts))
        coefs.append(float(term.coef) * columns.data[at])
        zero.append(base + senders)
        reached.setdefault(block, (base, senders, [], columns.shape[0]))[2].append(rows)
    for base, senders, found, n in reached.values():  # the other rows reached keep theirs
        marked = np.zeros(n, dtype=bool)
        marked[np.concatenate(found)] = True
        marked[senders] = False
        kept = base + np.flatnonzero(marked)
        t_rows.append(kept)
        s_rows.append(kept)
        coefs.append(np.ones(kept.size))

    def joined(parts: list, dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return (
        joined(t_rows, np.int64), joined(s_rows, np.int64), joined(coefs, float),
        joined(g_rows, np.int64), joined(g_clients, np.int64), joined(g_coefs, float),
        joined(zero, np.int64),
    )  # fmt: skip

