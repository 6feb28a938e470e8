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
from functools import partial

import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from .layout import Layout

__all__ = [
    "BlockTarget",
    "BlockTerm",
    "BlockwiseForm",
    "Workspace",
    "apply_blockwise_numpy",
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
        matrix: the ``(rows_T, rows_S)`` CSR matrix of a "mix" term, else None.
        coef: a number, or an array with one value per row of the target (not "mix").
    """

    kind: str
    source: str | None
    rows: slice | np.ndarray | None
    matrix: sp.csr_array | None
    coef: float | np.ndarray


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
        subset: the form rewrites the same rows A (block-local, sorted) of every target,
            not whole blocks: an activated round's active nodes. Its "mix" matrices are
            the rows A of W (``(|A|, rows_S)``), its "block" terms read rows A of their
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

    for op in deferred:
        kind = op[0]
        names = (op[1], op[2] if kind == "apply" else op[3] if kind == "combine" else op[1])
        for name in names:
            if not layout.contiguous(name) or layout.first_node(name) != 0:
                return None
        if kind == "apply":
            _, target, source, operator, scale = op
            if operator.rows.size == operator.size or not same(operator.rows):
                return None
            values = operator.values
            if values.shape != (operator.rows.size, layout.block(source).rows):
                return None
            terms.setdefault(target, []).append(
                BlockTerm("mix", source, layout.slice(source), values, float(scale))
            )
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
    return BlockwiseForm(targets, clients, consecutive, order, subset=True)


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


try:  # SciPy's own kernel behind ``csr @ dense``, which adds into an array it is given
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover (a SciPy that moved it: products go through @)
    _csr_matvecs = None


def _product_into(matrix, values: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = matrix @ values`` without a temporary where SciPy's kernel can take
    the arrays as they are (the same kernel and order of additions as ``@``: the same
    bits), else through ``@``."""
    if (
        _csr_matvecs is not None
        and matrix.format == "csr"
        and values.ndim == 2
        and values.shape[1] > 1
        and matrix.dtype == values.dtype == out.dtype
        and matrix.indices.dtype == matrix.indptr.dtype
        and values.flags.c_contiguous
        and out.flags.c_contiguous
    ):
        out[...] = 0.0
        m, n = matrix.shape
        _csr_matvecs(
            m, n, values.shape[1], matrix.indptr, matrix.indices, matrix.data,
            values.ravel(), out.ravel(),
        )  # fmt: skip
    else:
        out[...] = matrix @ values


class Workspace:
    """Arrays that a backend keeps for the whole-block path from round to round: each
    target block's accumulator and one temporary (its products, scaled terms), so that
    a round allocates nothing and SciPy's products write into them (:func:`_product_into`,
    the same bits as ``@``). Kept for one state at a time (a new state clears them)."""

    def __init__(self) -> None:
        self._arrays: dict = {}
        self._state: int | None = None

    def scratch(self, z: np.ndarray, block: str, rows: int):
        """``role -> array`` for target ``block`` of ``rows`` rows of ``z``: "acc" or
        "tmp", float64 of shape ``(rows, z.shape[1])``, the same arrays every round."""
        if self._state != id(z):
            self._arrays.clear()
            self._state = id(z)
        # a partial of a module function, not a closure: a closure is a new function
        # every round, which a run-time type checker's import hook wraps every round
        return partial(_scratch_array, self._arrays, block, (rows, z.shape[1]))


def _scratch_array(arrays: dict, block: str, shape: tuple, role: str) -> np.ndarray:
    """The workspace's float64 array ``role`` of ``block``, made when first asked or when
    the shape changed."""
    found = arrays.get((block, role))
    if found is None or found.shape != shape:
        found = arrays[block, role] = np.empty(shape)
    return found


def apply_blockwise_numpy(
    z: np.ndarray,
    form: BlockwiseForm,
    gradients,
    product=None,
    handed=None,
    workspace=None,
    fused=None,
) -> bool:
    """Apply ``form`` to the NumPy state ``z`` in place (``gradients``: shape (c, d), the
    gradients of ``form.clients``, or None); False if a new entry is not finite (the
    non-finite rows are written all the same). ``product(term, z)`` computes a "mix"
    term's ``term.matrix @ z[term.rows]`` (by default exactly that; the distributed
    backend's shards multiply their rows of the matrix with their rows and the halo).

    Each target is computed as: the products of its "mix" terms into a fresh array, the
    other terms but its last added in place, and the last one added with the result
    written straight into the target's slice of ``z`` (no separate copy). A target is
    written at once where no target computed after it reads it (:attr:`BlockwiseForm.
    order`); the others are kept in buffers and written when every target is computed.

    ``handed``: a dict that carries the rows of :attr:`BlockwiseForm.hand_off` from this
    phase to the next (:attr:`BlockwiseForm.take`; see :func:`chained`), keyed by the
    state's identity as well (runs that share a backend do not share what they hand).

    ``workspace``: a :class:`Workspace` whose arrays take the place of the fresh arrays
    (float64 states with the default products): the same operations in the same order,
    into arrays kept from round to round.

    ``fused``: ``(kinds, start) -> kernel or None``, compiled kernels that add a target's
    terms other than its products in one pass and check them (see
    :mod:`stochmix.engine.codegen.combine_kernel`; used with a workspace): the same
    operations in the same order, so the same bits."""
    scratch = None
    if workspace is not None and product is None and z.dtype == np.float64:
        scratch = workspace.scratch
    product = _product if product is None else product
    finite = True
    if form.take is not None:
        (target, _, check), values = form.order[0], handed.pop((id(z), form.take))
        out = z[target.rows]
        _product_into(target.terms[0].matrix, values, out)
        return not check or bool(np.isfinite(out.sum()))
    later = []
    for target, direct, check in form.order:
        rows = target.rows
        size = rows.stop - rows.start if isinstance(rows, slice) else rows.size
        own = None if scratch is None else scratch(z, target.block, size)
        if own is not None and fused is not None:
            out = z[rows] if direct and target.block != form.hand_off else None
            done = _combine_fused(target.terms, z, gradients, out, own, fused)
            if done is not None:
                new, ok = done
                if target.block == form.hand_off:
                    handed[id(z), target.block] = new
                elif not direct:
                    later.append((target, new, False))
                finite = finite and (not check or ok)
                continue
        if target.block == form.hand_off:
            new = _combine(target.terms, rows, z, gradients, None, product, own)
            handed[id(z), target.block] = new
            finite = finite and (not check or bool(np.isfinite(new.sum())))
            continue
        if direct:
            out = z[rows]
            _combine(target.terms, rows, z, gradients, out, product, own)
            if check:
                finite = finite and bool(np.isfinite(out.sum()))
        else:
            new = _combine(target.terms, rows, z, gradients, None, product, own)
            later.append((target, new, check))
    for target, new, check in later:
        if isinstance(target.rows, slice):
            out = z[target.rows]
            out[...] = new
        else:  # rows of a subset: written by index
            z[target.rows] = new
            out = new
        if check:
            finite = finite and bool(np.isfinite(out.sum()))
    return finite


def _product(term: BlockTerm, z):
    """A "mix" term's product ``term.matrix @ z[term.rows]`` (before its scale)."""
    return term.matrix @ z[term.rows]


def _values(term: BlockTerm, z, gradients):
    return gradients if term.kind == "grad" else z[term.rows]


def _mixed(term: BlockTerm, z, product_of, scratch, role: str):
    """A "mix" term's product, scaled: into ``scratch(role)`` where there is one."""
    if scratch is None:
        product = product_of(term, z)
    else:
        product = scratch(role)
        _product_into(term.matrix, z[term.rows], product)
    if term.coef != 1.0:
        product *= term.coef
    return product


def _combine(
    terms: tuple, rows: slice | np.ndarray, z, gradients, out, product_of=_product, scratch=None
):
    """The sum of ``terms``, written into ``out`` (a view of ``z``) or, when ``out`` is
    None, into a fresh array (or one of ``scratch``, see :class:`Workspace`) that is
    returned. ``terms`` lists "mix" terms first (the form's order), so that every read of
    the target's old rows by a product happens before ``out`` is written; at most one
    other term reads the target, and it is the last (read and written element by
    element)."""
    if not terms:
        if out is None:
            size = rows.stop - rows.start if isinstance(rows, slice) else rows.size
            return np.zeros((size, z.shape[1]), dtype=z.dtype)
        out[...] = 0.0
        return out
    acc = None
    for term in terms[:-1]:
        if term.kind == "mix":
            product = _mixed(term, z, product_of, scratch, "acc" if acc is None else "tmp")
            if acc is None:
                acc = product
            else:
                acc += product
        else:
            acc = _scaled_add(acc, _values(term, z, gradients), term.coef, scratch)
    last = terms[-1]
    if last.kind == "mix":
        product = _mixed(last, z, product_of, scratch, "acc" if acc is None else "tmp")
        if acc is None:
            if out is None:
                return product
            out[...] = product
            return out
        if out is None:
            acc += product
            return acc
        return np.add(acc, product, out=out)  # acc += product, written into out
    values, coef = _values(last, z, gradients), last.coef
    own = False  # values is an array of ours (coef times the term's values)
    if isinstance(coef, np.ndarray):
        values = np.multiply(coef[:, None], values, out=None if scratch is None else scratch("tmp"))
        own = True
    elif coef == -1.0:
        if acc is None:
            if out is None and scratch is not None:
                return np.negative(values, out=scratch("acc"))
            return np.negative(values, out=out)
        return np.subtract(acc, values, out=acc if out is None else out)
    elif coef != 1.0:
        values = np.multiply(coef, values, out=None if scratch is None else scratch("tmp"))
        own = True
    if acc is None:
        if out is None:
            if scratch is None:
                return np.array(values, dtype=np.result_type(values, np.float64))
            if own:
                return values
            acc = scratch("acc")
            np.copyto(acc, values)
            return acc
        out[...] = values
        return out
    return np.add(acc, values, out=acc if out is None else out)


def _combine_fused(terms: tuple, z, gradients, out, scratch, fused):
    """:func:`_combine` with its terms but the products added by one compiled kernel
    (``fused``), which also checks what it writes: ``(array, finite)``, or None where no
    kernel applies (a float32 state, a term of another shape, nothing but products).
    ``out``: a view of ``z`` to write, or None (into ``scratch("acc")``)."""
    mixes = [t for t in terms if t.kind == "mix"]
    others = terms[len(mixes) :]
    if not others or z.dtype != np.float64 or any(t.kind == "mix" for t in others):
        return None
    kinds: list[int] = []
    scalars: list[float] = []
    sources: list[np.ndarray] = []
    per_row: list[tuple[int, np.ndarray]] = []
    for term in others:
        values = _values(term, z, gradients)
        if not (
            isinstance(values, np.ndarray)
            and values.dtype == np.float64
            and values.ndim == 2
            and values.flags.c_contiguous
        ):
            return None
        coef = term.coef
        if isinstance(coef, np.ndarray):
            kinds.append(3)
            per_row.append((len(sources), coef))
            scalars.append(0.0)
        elif coef == 1.0 or coef == -1.0:
            kinds.append(0 if coef == 1.0 else 1)
            scalars.append(0.0)
        else:
            kinds.append(2)
            scalars.append(float(coef))
        sources.append(values)
    kernel = fused(tuple(kinds), bool(mixes))
    if kernel is None:
        return None
    m = sources[0].shape[0]
    if out is None:  # (a product starts in scratch("acc") too: read and written entry by entry)
        out = scratch("acc")
    start: tuple = ()
    if mixes:
        acc = None
        for term in mixes:
            product = _mixed(term, z, _product, scratch, "acc" if acc is None else "tmp")
            if acc is None:
                acc = product
            else:
                acc += product
        start = (acc,)
    rows_array = np.zeros((len(kinds), m)) if per_row else np.empty((len(kinds), 0))
    for t, coef in per_row:
        rows_array[t] = coef
    ok = kernel(out, *start, *sources, np.asarray(scalars), rows_array)
    return out, bool(ok)


def _scaled_add(acc, values, coef, scratch=None):
    """``acc + coef * values``, in place when ``acc`` is an array (a fresh array, or
    ``scratch("acc")``, when ``acc`` is None; never ``values`` itself)."""
    fresh = None if scratch is None else scratch("acc") if acc is None else scratch("tmp")
    if isinstance(coef, np.ndarray):
        coef = coef[:, None]
    elif coef == 1.0:
        if acc is None:
            if fresh is not None:
                np.copyto(fresh, values)
                return fresh
            return np.array(values, dtype=np.result_type(values, np.float64))
        acc += values
        return acc
    elif coef == -1.0:
        if acc is None:
            if fresh is not None:
                return np.negative(values, out=fresh)
            return np.negative(values, dtype=np.result_type(values, np.float64))
        acc -= values
        return acc
    if acc is None:
        if fresh is not None:
            return np.multiply(coef, values, out=fresh)
        return np.multiply(coef, values, dtype=np.result_type(values, np.float64))
    if fresh is not None:
        acc += np.multiply(coef, values, out=fresh)
    else:
        acc += coef * values
    return acc
