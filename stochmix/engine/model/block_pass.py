"""A whole-block form applied by compiled passes, one per target block.

A target block T of a :class:`~stochmix.engine.model.blockwise.BlockwiseForm` is

    T[rows] <- sum_u s_u (W_u[rows] @ S_u) + sum_t c_t S_t[rows] + c_g G

over every row of T (a whole block) or the active rows A (a form on some rows, an
activated round). :func:`apply_compiled` computes each target in one pass over its rows
by a kernel of :mod:`stochmix.engine.codegen.combine_kernel` (``rows_kernel``): it reads
each matrix row where it lies in the matrix's CSR arrays (never a slice of W), the other
blocks' rows in place or through their indices, the gradients, and checks what it writes
for NaN and Inf. Each product is summed in the row's CSR order from 0.0 and then scaled,
as SciPy's kernel and the NumPy statements of :mod:`~stochmix.engine.model.whole_block` do:
the same operations in the same order, the same bits.

A phase is simultaneous: every target reads the state as it was. A target is written
into the state as it is computed where no target after it reads its block and none of its
own products does (a row's own entries are read before they are written); the others are
computed into the workspace and written when every target is computed. A block handed to
the next phase (:func:`~stochmix.engine.model.blockwise.chained`) is kept in the
workspace, and the phase that takes it multiplies it straight into the state.
"""

from __future__ import annotations

import numpy as np

from .blockwise import BlockwiseForm

__all__ = ["PREFETCH_BYTES", "WIDTH_MAX", "apply_compiled", "term_kind"]

#: Rows of at most this many entries get kernels with their length compiled in (one
#: kernel per length met; longer rows share kernels that read it).
WIDTH_MAX = 16

#: States of at least this many bytes are read with prefetching (the rows a few nodes
#: ahead asked of the memory early); smaller ones sit in the caches, where the extra
#: loads cost more than they save (measured: 0.53 against 0.62 ms for 10^4 nodes, d = 10;
#: 11.8 against 13.9 ms for 10^5).
PREFETCH_BYTES = 8 << 20

#: A form on some rows (an activated round) computes a target of at least this many rows
#: in two halves on two threads, where the backend gives them (``split``): gradient
#: tracking at n = 10^5 with 10% active, 3.2-3.35 against 4.0-4.6 ms an iteration.
SPLIT_ROWS = 4096


def _float_rows(values) -> bool:
    return (
        isinstance(values, np.ndarray)
        and values.dtype == np.float64
        and values.ndim == 2
        and values.flags.c_contiguous
    )


def term_kind(coef) -> tuple[int, float]:
    """A term's kind for the compiled kernels (:mod:`~stochmix.engine.codegen.
    combine_kernel`) and the number it passes: 0 ``+ s``, 1 ``- s``, 2 ``+ c s`` with the
    number c, 3 ``+ c_i s`` with a coefficient per row (passed apart)."""
    if isinstance(coef, np.ndarray):
        return 3, 0.0
    if coef == 1.0 or coef == -1.0:
        return (0 if coef == 1.0 else 1), 0.0
    return 2, float(coef)


def _read_later(form: BlockwiseForm) -> list[set]:
    """Per target of ``form.order``, the blocks that the targets after it read."""
    reads: list[set] = [set() for _ in form.order]
    seen: set = set()
    for place in range(len(form.order) - 1, -1, -1):
        reads[place] = set(seen)
        seen.update(term.source for term in form.order[place][0].terms if term.source)
    return reads


def _size(rows) -> int:
    return rows.stop - rows.start if isinstance(rows, slice) else rows.size


def _pass(form: BlockwiseForm, z, gradients, rows_kernel, handed, place: int, later: set):
    """The kernel and arguments of one target (``form.order[place]``), and where it writes
    ("direct": into the state; "later": into the workspace, written at the end; "hand":
    handed to the next phase), or None where no kernel takes its shape."""
    target, _, check = form.order[place]
    terms = target.terms
    if not terms:  # a block cleared: NumPy's zeros
        return None
    mixes = [t for t in terms if t.kind == "mix"]
    others = terms[len(mixes) :]
    size = _size(target.rows)
    whole = not form.subset
    select = None if whole else (mixes[0].select if mixes else target.rows)
    args: list = []
    parts: list[int] = []  # per argument: 0 shared, 1 one row per target row, 2 a column
    for term in mixes:
        matrix = term.matrix
        if whole:
            if term.select is not None or matrix.shape[0] != size:
                return None
        elif select is None or term.select is None or not (
            term.select is select or np.array_equal(term.select, select)
        ):
            return None
        if form.take is not None and term.source == form.take:
            source = handed.get((id(z), form.take))
        else:
            source = z[term.rows]
        if matrix.format != "csr" or matrix.dtype != np.float64 or not _float_rows(source):
            return None
        args += [matrix.indptr, matrix.indices, matrix.data, source]
        parts += [0, 0, 0, 0]
    kinds: list[int] = []
    scalars: list[float] = []
    indexed: list[bool] = []
    per_row: list[tuple[int, np.ndarray]] = []
    for t, term in enumerate(others):
        if term.kind == "mix":
            return None
        if term.kind == "grad":
            if not _float_rows(gradients) or gradients.shape[0] != size:
                return None
            args.append(gradients)
            parts.append(1)
            indexed.append(False)
        elif isinstance(term.rows, slice):  # a whole block's rows, in place
            args.append(z[term.rows])
            parts.append(1)
            indexed.append(False)
        else:  # rows of a block, read through their indices
            args += [z, term.rows]
            parts += [0, 1]
            indexed.append(True)
        kind, scalar = term_kind(term.coef)
        kinds.append(kind)
        scalars.append(scalar)
        if kind == 3:
            per_row.append((t, term.coef))
    if form.take is None and target.block == form.hand_off:
        where = "hand"
    elif target.block not in later and all(
        term.source != target.block or term.source == form.take for term in mixes
    ):
        where = "direct"
    else:
        where = "later"
    scaled = tuple(term.coef != 1.0 for term in mixes)
    direct = where == "direct" and not whole  # (a whole block's rows: a view of the state)
    # short rows: their length compiled in (loops unrolled, a product's row in registers)
    width = z.shape[1] if z.shape[1] <= WIDTH_MAX else 0
    kernel = rows_kernel(scaled, tuple(kinds), tuple(indexed), direct, whole, width)
    if kernel is None:
        return None
    rows_array = np.zeros((len(kinds), size)) if per_row else np.empty((len(kinds), 0))
    for t, coef in per_row:
        rows_array[t] = coef
    tail = (
        np.asarray(scalars),
        np.asarray([float(t.coef) for t in mixes]),
        rows_array,
        z.nbytes >= PREFETCH_BYTES,
    )
    head = () if whole else (select,)
    parts = [*([] if whole else [1]), *parts, 0, 0, 2, 0]
    return kernel, (*head, *args, *tail), where, check, tuple(parts)


def apply_compiled(
    form: BlockwiseForm, z, gradients, scratch, rows_kernel, scatter, handed, split=None
) -> bool | None:
    """Apply ``form`` to the float64 state ``z`` by compiled passes (see the module
    docstring): whether every new entry checked is finite, or None where a target has a
    shape no kernel takes (nothing is written then; the caller applies the form another
    way). ``scratch(z, block, rows)``: the workspace's arrays; ``scatter(z, rows,
    values)``: ``z[rows] = values``; ``handed``: the blocks phases hand on.
    ``split(calls)``: runs the calls (functions of no argument) on threads and gives their
    answers; a target of a form on some rows of at least :data:`SPLIT_ROWS` rows is then
    computed in two halves of its rows, a call each (each row is computed alone: the
    same bits)."""
    if form.take is not None and (id(z), form.take) not in handed:
        return None
    later = _read_later(form)
    passes = []
    for place in range(len(form.order)):
        found = _pass(form, z, gradients, rows_kernel, handed, place, later[place])
        if found is None:
            return None
        passes.append(found)
    if form.take is not None:
        handed.pop((id(z), form.take))
    finite = True
    written = []
    for (target, _, _), (kernel, args, where, check, parts) in zip(
        form.order, passes, strict=True
    ):
        rows = target.rows
        if where == "direct":
            out = z[rows] if isinstance(rows, slice) else z
            head = () if isinstance(rows, slice) else (rows,)
        else:
            out, head = scratch(z, target.block, _size(rows))("acc"), ()
        size = _size(rows)
        if split is not None and form.subset and size >= SPLIT_ROWS:
            calls = [
                _part(kernel, out, head, args, parts, where == "direct", a, b)
                for a, b in ((0, size // 2), (size // 2, size))
            ]
            ok = all(split(calls))
        else:
            ok = kernel(out, *head, *args)
        finite = finite and (not check or bool(ok))
        if where == "hand":
            handed[id(z), target.block] = out
        elif where == "later":
            written.append((rows, out))
    for rows, out in written:  # a phase is simultaneous: written when all are computed
        if isinstance(rows, slice):
            z[rows] = out
        else:
            scatter(z, rows, out)
    return finite


def _part(kernel, out, head, args, parts, direct: bool, a: int, b: int):
    """The call of ``kernel`` on the target rows ``a:b`` (``parts``, from :func:`_pass`:
    which arguments hold a row, or a column, per target row)."""
    own = [
        x[a:b] if f == 1 else x[:, a:b] if f == 2 else x
        for x, f in zip(args, parts, strict=True)
    ]
    first = tuple(x[a:b] for x in head)
    target = out if direct else out[a:b]
    return lambda: kernel(target, *first, *own)
