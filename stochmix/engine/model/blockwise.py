"""Whole-block form of a phase: every rewritten block rewritten in full, mixing included.

A decentralized iteration mixes a whole block with a matrix over every node,
``x <- W x - alpha y``. Its phase rewrites every row of the block, so storing it by
rewritten rows (a ``(k, m)`` CSR of ``M`` built from triplets each round) only repeats
``W`` in another shape. :class:`PhaseBuilder` recognises such a phase instead (an
``apply`` whose operator sets every row of the block, and other terms that cover whole
blocks in order) and records it as a :class:`BlockwiseForm`: for every target block T,

    T <- sum_mix scale * (W @ S) + sum_block coef * S + sum_grad coef * G

where S is a whole source block (rows ``0..rows-1`` of it, in order), W a CSR matrix held
as it came (not copied), and G the gradients of :attr:`BlockwiseForm.clients`, row t of G
for row t of T. Every target's new rows are computed from the old state before any is
written (a phase is simultaneous), then written into the target's slice. Building the
form costs O(terms) and a check per index array; the sparse rows of ``M`` are built only
when something asks for :attr:`Phase.mix` (analysis, backends without
``apply_blockwise``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from .layout import Layout

__all__ = [
    "BlockTarget",
    "BlockTerm",
    "BlockwiseForm",
    "blockwise_form",
    "chained",
]


@dataclass(frozen=True)
class BlockTerm:
    """One term of a target block's new value.

    Attributes:
        kind: "mix" (``coef * (matrix @ S)``), "block" (``coef * S``) or "grad"
            (``coef * G``).
        source: the source block's name (None for "grad").
        rows: the source block's rows of Z (None for "grad"): a slice, or for a "block"
            term of a form on some rows (:attr:`BlockwiseForm.subset`) their index array.
        matrix: the ``(rows_T, rows_S)`` CSR matrix of a "mix" term, else None; in a
            form on some rows, with ``select``, the whole operator's ``(n, rows_S)`` CSR.
        coef: a number, or an array with one value per row of the target (not "mix").
        select: in a form on some rows (:attr:`BlockwiseForm.subset`), the rows of
            ``matrix`` that the product takes: the term is ``coef * (matrix[select] @
            S)``, read where the rows lie (:meth:`rows_matrix` slices them). None: all.
    """

    kind: str
    source: str | None
    rows: slice | np.ndarray | None
    matrix: sp.csr_array | None
    coef: float | np.ndarray
    select: np.ndarray | None = None

    def rows_matrix(self) -> sp.csr_array | None:
        """The matrix the product multiplies by: ``matrix``, or its rows ``select``."""
        if self.select is None or self.matrix is None:
            return self.matrix
        return sp.csr_array(self.matrix[self.select])


@dataclass(frozen=True)
class BlockTarget:
    """A rewritten block: its name, its rows of Z (a slice; an index array in a form on
    some rows) and the terms of its new value (none: the block becomes zero)."""

    block: str
    rows: slice | np.ndarray
    terms: tuple[BlockTerm, ...]


@dataclass(frozen=True)
class BlockwiseForm:
    """A phase that rewrites whole blocks (see the module docstring).

    Attributes:
        targets: the rewritten blocks, in the order the phase first names them.
        clients: the clients whose gradients the "grad" terms add, aligned with the
            target rows (client ``clients[t]`` for row t), or None without gradients.
        consecutive: whether ``clients`` are consecutive increasing integers (their
            points are then a slice of the model block, not a gathered copy).
        order: ``(target, direct, check)``, the order in which targets are computed:
            a direct target is written into the state as soon as it is computed (no
            target computed after it reads it); the others are written at the end.
            ``check``: whether its new rows are summed for the NaN/Inf check (not for a
            copy of gradients that another target adds in full, and so checks; nor, in
            a run's plan, for a block that the run's reported model sums, which the run
            checks after every round: :meth:`Phase.trusting`).
        hand_off: in a run's plan, a block whose new rows are not written into the
            state but handed to the next phase (:func:`chained`), which rewrites it.
        take: in a run's plan, the block that this phase (one product ``T <- W T``)
            takes from the previous phase: ``W`` times the handed rows is written
            straight into the state's rows of T, with no copy through a temporary.
        pushes: in a form on some rows, its activated pushes
            (:class:`~stochmix.engine.model.pushed.PushedColumns`), each ``(target block,
            target's first row of Z, term)`` with a "push" term: ``matrix`` C transposed
            (row j: column j of C), ``select`` the senders A, ``rows`` the source's rows
            A, ``coef`` its scale. The targets' other terms are written first, then each
            push adds ``coef C[i, j] S[j]`` (S as the phase found it) to every row i of
            its target that sender j's column reaches: its target's rows A are among
            :attr:`targets`, and rows past them change too.
        subset: the form rewrites the same rows A (block-local, sorted) of every target,
            not whole blocks: an activated round's active nodes. Its "mix" terms take
            the rows A of W (``(|A|, rows_S)``; where W sets every row, the whole W
            with :attr:`BlockTerm.select` A, read unsliced), its "block" terms read rows A of their
            source, its gradients are those of clients A; every target is computed before
            any is written. Backends apply it where they say they can
            (:attr:`~stochmix.engine.plan.capabilities.Capabilities.row_subsets`).
    """

    targets: tuple[BlockTarget, ...]
    clients: Int[np.ndarray, " c"] | None
    consecutive: bool = False
    order: tuple = ()
    hand_off: str | None = None
    take: str | None = None
    subset: bool = False
    pushes: tuple = ()


def _whole(rows: np.ndarray, n: int, memo: dict) -> bool:
    """Whether ``rows`` is ``0, 1, ..., n-1`` (memoised by the array's identity)."""
    key = id(rows)
    found = memo.get(key)
    if found is None:
        found = memo[key] = (rows, rows.size == n and n > 0 and rows[0] == 0 and _consecutive(rows))
    return bool(found[1])


def _consecutive(rows: np.ndarray) -> bool:
    """Whether ``rows`` are ``a, a+1, ..., a+len-1`` for some a (and not empty)."""
    if rows.size == 0:
        return False
    return bool(rows[-1] - rows[0] == rows.size - 1) and (
        rows.size < 3 or bool((rows[1:] > rows[:-1]).all())
    )


def _coef(coef, n: int):
    """A number stays a number; anything else becomes one value per row."""
    arr = np.asarray(coef, dtype=np.float64)
    if arr.ndim == 0:
        return float(arr)
    return arr if arr.shape == (n,) else np.full(n, arr)


def _as_index(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.int64)
    return rows if rows.ndim == 1 else rows.reshape(-1)


def blockwise_form(layout: Layout, deferred: list) -> BlockwiseForm | None:
    """The whole-block form of a phase given as :class:`PhaseBuilder` 's deferred terms,
    or None when some term touches only part of a block or aligns rows out of order (such
    phases take the general or node-local path, as do phases on a block whose node rows
    the state does not keep)."""
    found = _whole_form(layout, deferred)
    return found if found is not None else _subset_form(layout, deferred)


def _whole_form(layout: Layout, deferred: list) -> BlockwiseForm | None:
    """:func:`blockwise_form` over whole blocks, or None."""
    terms: dict[str, list] = {}
    clients = None
    memo: dict = {}
    for op in deferred:
        kind = op[0]
        if kind == "push":  # (activated: a form on some rows)
            return None
        names = (op[1], op[2] if kind == "apply" else op[3] if kind == "combine" else op[1])
        if not (layout.contiguous(names[0]) and layout.contiguous(names[1])):
            return None
        if kind == "apply":
            _, target, source, operator, scale = op
            if operator.rows.size != operator.size:
                return None
            terms.setdefault(target, []).append(
                BlockTerm("mix", source, layout.slice(source), operator.values, float(scale))
            )
        elif kind == "combine":
            _, target, t_rows, source, s_rows, coef = op
            t, s = _as_index(t_rows), _as_index(s_rows)
            if t.size == 0 or s.size == 0:
                continue  # adds nothing
            n = layout.block(target).rows
            if layout.block(source).rows != n or not (_whole(t, n, memo) and _whole(s, n, memo)):
                return None
            terms.setdefault(target, []).append(
                BlockTerm("block", source, layout.slice(source), None, _coef(coef, n))
            )
        elif kind == "clear":
            _, target, rows = op
            if rows.size == 0:
                continue
            if not _whole(_as_index(rows), layout.block(target).rows, memo):
                return None
            terms.setdefault(target, [])
        else:  # gradient
            _, target, t, c, coef = op
            if t.size == 0 or c.size == 0:
                continue
            n = layout.block(target).rows
            if c.size != n or not _whole(t, n, memo):
                return None
            if clients is None:
                clients = c
            elif c is not clients and not np.array_equal(c, clients):
                return None  # two sets of gradients: the general path
            terms.setdefault(target, []).append(BlockTerm("grad", None, None, None, _coef(coef, n)))
    targets = tuple(
        BlockTarget(name, layout.slice(name), _arranged(name, found))
        for name, found in terms.items()
    )
    consecutive = clients is not None and _consecutive(clients)
    return BlockwiseForm(targets, clients, consecutive, _order(targets))


def _subset_form(layout: Layout, deferred: list) -> BlockwiseForm | None:
    """The form of a phase that rewrites the same rows A of each target block from
    products of the rows A of whole-block operators, rows A of other blocks and the
    gradients of clients A (an activated round's pull phase:
    :mod:`stochmix.engine.model.activated`), or None. Blocks are those of the nodes
    (node i is row i of each, clients the nodes)."""
    rows = None
    terms: dict[str, list] = {}
    clients = None

    def same(found) -> bool:
        nonlocal rows
        if rows is None:
            rows = found
            return found.size > 0
        return found is rows or (found.shape == rows.shape and np.array_equal(found, rows))

    pushes: list = []
    for op in deferred:
        kind = op[0]
        names = (
            op[1], op[2] if kind in ("apply", "push") else op[3] if kind == "combine" else op[1]
        )  # fmt: skip
        for name in names:
            if not layout.contiguous(name) or layout.first_node(name) != 0:
                return None
        if kind == "apply":
            _, target, source, operator, scale = op
            if operator.rows.size == operator.size or not same(operator.rows):
                return None
            if operator.size != layout.block(source).rows:
                return None
            parent = getattr(operator, "parent", None)
            term = (
                BlockTerm("mix", source, layout.slice(source), operator.values, float(scale))
                if parent is None  # rows read where they lie, not sliced
                else BlockTerm(
                    "mix", source, layout.slice(source), parent.values, float(scale),
                    operator.rows,
                )  # fmt: skip
            )
            terms.setdefault(target, []).append(term)
        elif kind == "push":
            _, target, source, pushed, scale = op
            if not same(pushed.senders) or pushed.size != layout.block(source).rows:
                return None
            term = BlockTerm(
                "push", source, layout.rows(source, rows), pushed.columns, float(scale),
                pushed.senders,
            )  # fmt: skip
            pushes.append((target, layout.start(target), term))
            terms.setdefault(target, [])  # (its rows A are rewritten)
        elif kind == "combine":
            _, target, t_rows, source, s_rows, coef = op
            t, s_ = _as_index(t_rows), _as_index(s_rows)
            if t.size == 0 or s_.size == 0:
                continue
            if not (same(t) and (s_ is t or np.array_equal(s_, t))):
                return None
            terms.setdefault(target, []).append(
                BlockTerm("block", source, layout.rows(source, rows), None, _coef(coef, t.size))
            )
        elif kind == "gradient":
            _, target, t, c, coef = op
            if t.size == 0 or c.size == 0:
                continue
            if not (same(_as_index(t)) and rows is not None and np.array_equal(c, rows)):
                return None
            clients = c if clients is None else clients
            terms.setdefault(target, []).append(
                BlockTerm("grad", None, None, None, _coef(coef, c.size))
            )
        else:  # a clear of some rows: the general path
            return None
    if rows is None or not terms or rows.size == layout.block(next(iter(terms))).rows:
        return None
    if any(layout.block(name).rows <= int(rows[-1]) for name in terms):
        return None
    targets = tuple(
        BlockTarget(name, layout.rows(name, rows), _arranged(name, found))
        for name, found in terms.items()
    )
    order = tuple((t, False, check) for t, _, check in _order(targets))
    consecutive = clients is not None and _consecutive(clients)
    return BlockwiseForm(
        targets, clients, consecutive, order, subset=True, pushes=tuple(pushes)
    )


def _arranged(target: str, found: list) -> tuple:
    """A target's terms with the products first, and a term that reads the target itself
    (not a product) last, so that its new value can be written straight into its rows."""
    mixes = [t for t in found if t.kind == "mix"]
    others = [t for t in found if t.kind != "mix" and t.source != target]
    own = [t for t in found if t.kind != "mix" and t.source == target]
    return tuple(mixes + others + own)


def _order(targets: tuple) -> tuple:
    """The targets in computing order, each marked direct when it may be written as soon
    as it is computed: no target still to be computed reads it, and at most one of its
    own terms that is not a product reads it (see :func:`_combine`)."""
    reads = {t.block: {term.source for term in t.terms if term.source} for t in targets}
    remaining = list(targets)
    order = []
    while remaining:
        pick = None
        for t in remaining:
            own = sum(1 for term in t.terms if term.kind != "mix" and term.source == t.block)
            if own <= 1 and not any(t.block in reads[u.block] for u in remaining if u is not t):
                pick = (t, True)
                break
        if pick is None:
            pick = (remaining[0], False)
        remaining.remove(pick[0])
        order.append((*pick, not _checked_elsewhere(pick[0], targets)))
    return tuple(order)


def _adds_gradients(term: BlockTerm) -> bool:
    """Whether ``term`` adds a nonzero finite multiple of every gradient entry (so that
    its target is not finite wherever a gradient entry is not)."""
    return term.kind == "grad" and np.ndim(term.coef) == 0 and 0.0 != abs(float(term.coef)) < np.inf


def _checked_elsewhere(target: BlockTarget, targets: tuple) -> bool:
    """Whether ``target`` is a plain copy of the gradients that another target of the
    phase adds in full: a NaN or Inf in the copy is then one in that target, which is
    checked, so the copy need not be summed again."""
    terms = target.terms
    if len(terms) != 1 or not _adds_gradients(terms[0]):
        return False
    return any(
        other is not target and any(_adds_gradients(term) for term in other.terms)
        for other in targets
    )


def chained(first: BlockwiseForm, second: BlockwiseForm) -> str | None:
    """The block that ``first`` may hand to ``second`` instead of writing it: ``second``
    is ``T <- W T`` alone (one product of the block it rewrites, scale 1, no gradients)
    and ``first`` rewrites T. Applied in turn they compute T's new rows, then write them
    and multiply them by W into a temporary that is copied back; handed over, ``first``
    keeps its T in its own array and ``second`` writes ``W`` times it straight into the
    state (DGD: x <- x - a G(x), then x <- W x). The same numbers."""
    if first.subset or second.subset:  # (rows of a subset are gathered: nothing to hand)
        return None
    if len(second.targets) != 1 or second.clients is not None:
        return None
    if first.hand_off is not None or first.take is not None:  # one hand-off a phase
        return None
    target = second.targets[0]
    if len(target.terms) != 1:
        return None
    term = target.terms[0]
    if term.kind != "mix" or term.source != target.block or term.coef != 1.0:
        return None
    if all(t.block != target.block for t in first.targets):
        return None
    return target.block


def __getattr__(name: str):
    """``apply_blockwise_numpy`` and ``Workspace`` moved to
    :mod:`stochmix.engine.model.whole_block`: the old import keeps working one release,
    with a DeprecationWarning."""
    if name in ("apply_blockwise_numpy", "Workspace"):
        import importlib
        import warnings

        # imported by name when asked (whole_block imports this module's forms)
        whole_block = importlib.import_module(f"{__package__}.whole_block")
        warnings.warn(
            f"stochmix.engine.model.blockwise.{name} moved to "
            f"stochmix.engine.model.whole_block.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(whole_block, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
