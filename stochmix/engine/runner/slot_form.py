"""The slot form of a round (see :mod:`stochmix.engine.runner.segments`): its linear phases
as flat arrays in which every row is ``base + nodes[slot]``, so that rounds of one
structure over other nodes run the same compiled program; and the packing of several such
programs into the arrays of one batch."""

from __future__ import annotations

import numpy as np

from ..model.rowmap import RowMap

__all__ = [
    "AFFINE_DIAGONAL",
    "AFFINE_FULL",
    "SLOT_KERNELS",
    "TOP_K_STEP",
    "SlotProgram",
    "pack",
    "slot_program",
    "unique_rows",
]

#: The element-wise kernels the loop applies, by the code a phase's ``k_kind`` holds
#: (0: a linear phase): those of one source, whose round scalars (at most two) are
#: constants of the round.
SLOT_KERNELS = {"shrink": 1, "shrink_scaled": 2, "clip": 3}
#: The codes of a map whose function declares itself affine row by row (``row_affine``,
#: see :func:`_affine_triplets`): diagonal matrices (one number per entry), full ones.
AFFINE_DIAGONAL, AFFINE_FULL = 4, 5
#: The code of a compression step ``b + TopK_k(a - b)`` of two sources (``row_top_k``, see
#: :func:`_top_k_triplets`): CHOCO's public copies under top-k (or no) compression.
TOP_K_STEP = 6


class SlotProgram:
    """One round's phases in slot form (see the module docstring), as flat arrays.

    Per phase q: targets ``t_base[t0[q]:t0[q+1]]``, ``t_slot[...]`` (rows rewritten);
    terms ``m_target`` (index among the phase's targets), ``m_base``, ``m_slot`` (the
    source row, ``m_slot = -1``: the fixed row ``m_base``), ``m_coef`` in
    ``m0[q]:m0[q+1]``; gradient terms ``g_target``, ``g_client`` (index among the
    phase's clients), ``g_coef`` in ``g0[q]:g0[q+1]``; clients' slots ``c_slot`` in
    ``c0[q]:c0[q+1]``; ``k_kind[q]`` the phase's kernel (:data:`SLOT_KERNELS`; 0: linear)
    and ``k_par[2q:2q+2]`` its round scalars (a kernel phase has one term per target, its
    source row, whose ``m_coef`` is 1 and unused).
    """

    t0: np.ndarray
    t_base: np.ndarray
    t_slot: np.ndarray
    m0: np.ndarray
    m_target: np.ndarray
    m_base: np.ndarray
    m_slot: np.ndarray
    m_coef: np.ndarray
    g0: np.ndarray
    g_target: np.ndarray
    g_client: np.ndarray
    g_coef: np.ndarray
    c0: np.ndarray
    c_slot: np.ndarray
    k_kind: np.ndarray
    k_par: np.ndarray
    k_tab: np.ndarray
    k_mat: np.ndarray
    a_off: np.ndarray
    a_diag: np.ndarray
    a_mat: np.ndarray

    FIELDS = (
        "t0", "t_base", "t_slot", "m0", "m_target", "m_base", "m_slot", "m_coef",
        "g0", "g_target", "g_client", "g_coef", "c0", "c_slot", "k_kind", "k_par",
        "k_tab", "k_mat", "a_off", "a_diag", "a_mat",
    )  # fmt: skip
    #: the tables of per-row affine phases (rows stacked along the first axis)
    TABLES = ("a_off", "a_diag", "a_mat")

    def __init__(self, **arrays):
        for name in self.FIELDS:
            setattr(self, name, arrays[name])

    def same(self, other: SlotProgram) -> bool:
        """Equal arrays, coefficients bit for bit."""
        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in self.FIELDS)

    @property
    def gradients(self) -> bool:
        return self.c_slot.size > 0


def _positions(values: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The place of each of ``values`` among the sorted ``nodes`` (-1 where absent), and
    whether it is there."""
    pos = nodes.searchsorted(values)
    inside = (pos < nodes.size) & (nodes[np.minimum(pos, max(nodes.size - 1, 0))] == values)
    return np.where(inside, pos, -1), inside


def _slots(rows: np.ndarray, bases: np.ndarray, starts: np.ndarray, nodes: np.ndarray):
    """``(base, slot, inside)`` of state rows: the row of node 0 of each row's block, the
    place of its node among ``nodes`` (-1 for a row of no node of the round), and whether
    it has one."""
    base = bases[np.searchsorted(starts, rows, side="right") - 1]
    slot, inside = _positions(rows - base, nodes)
    return base, slot, inside


def slot_program(
    phases, layout, nodes: np.ndarray, client_node: int, problem=None
) -> SlotProgram | None:
    """The slot form of a round's phases, or None when a phase is not a linear phase, an
    element-wise kernel or a per-row affine map (of ``problem``, the run's problem as its
    maps see it), or touches a row of a node outside ``nodes``."""
    if layout.scratch:
        return None  # rows kept apart: a block is not one range of rows
    blocks = layout.blocks
    starts = np.array([layout.start(b.name) for b in blocks], dtype=np.int64)
    bases = np.array([layout.start(b.name) - b.first_node for b in blocks], dtype=np.int64)
    order = np.argsort(starts)
    starts, bases = starts[order], bases[order]
    parts: dict[str, list] = {k: [] for k in SlotProgram.FIELDS}
    counts = {"t0": 0, "m0": 0, "g0": 0, "c0": 0}
    for key in counts:
        parts[key].append(0)
    tables = {"a_off": 0, "a_diag": 0, "a_mat": 0}  # rows so far
    for phase in phases:
        kind, params = 0, (0.0, 0.0)
        tab = mat = -1
        if isinstance(phase, RowMap):
            found = (
                _kernel_triplets(phase)
                or _affine_triplets(phase, problem)
                or _top_k_triplets(phase)
            )
            if found is None:
                return None  # nonlinear: no slot form (its _triplets refuse)
            kind, params, triplets = found[:3]
            if len(found) > 3:  # a per-row affine map: its tables
                matrices, offsets = found[3]
                which = "a_diag" if kind == AFFINE_DIAGONAL else "a_mat"
                tab, mat = tables["a_off"], tables[which]
                parts["a_off"].append(offsets)
                parts[which].append(matrices)
                tables["a_off"] += offsets.shape[0]
                tables[which] += matrices.shape[0]
        elif getattr(phase, "draws", None) is not None or getattr(phase, "by_index", False):
            return None  # sampled gradients, rows by index: bound per round, not slots
        else:
            triplets = getattr(phase, "_triplets", None)
        if triplets is None:
            return None
        targets, sources, coefs, g_targets, g_clients, g_coefs, zero_rows = triplets
        rewritten = np.unique(np.concatenate([targets, g_targets, zero_rows]))
        t_base, t_slot, ok = _slots(rewritten, bases, starts, nodes)
        if not ok.all():
            return None
        s_base, s_slot, inside = _slots(sources, bases, starts, nodes)
        s_base = np.where(inside, s_base, sources)  # a fixed row: its own index
        clients = np.unique(g_clients)
        c_slot, ok = _positions(clients + client_node, nodes)
        if not ok.all():
            return None
        parts["t_base"].append(t_base)
        parts["t_slot"].append(t_slot)
        parts["m_target"].append(np.searchsorted(rewritten, targets))
        parts["m_base"].append(s_base)
        parts["m_slot"].append(s_slot)
        parts["m_coef"].append(np.asarray(coefs, dtype=float))
        parts["g_target"].append(np.searchsorted(rewritten, g_targets))
        parts["g_client"].append(np.searchsorted(clients, g_clients))
        parts["g_coef"].append(np.asarray(g_coefs, dtype=float))
        parts["c_slot"].append(c_slot)
        parts["k_kind"].append(np.array([kind], dtype=np.int64))
        parts["k_par"].append(np.array(params, dtype=float))
        parts["k_tab"].append(np.array([tab], dtype=np.int64))
        parts["k_mat"].append(np.array([mat], dtype=np.int64))
        counts["t0"] += rewritten.size
        counts["m0"] += targets.size
        counts["g0"] += g_targets.size
        counts["c0"] += clients.size
        for key, value in counts.items():
            parts[key].append(value)
    arrays = {key: _stacked(parts[key], key) for key in SlotProgram.TABLES}
    for key in SlotProgram.FIELDS:
        if key in SlotProgram.TABLES:
            continue
        values = parts[key]
        dtype = float if key.endswith(("coef", "par")) else np.int64
        arrays[key] = (
            np.asarray(values, dtype=np.int64)
            if key in counts
            else (np.concatenate(values).astype(dtype) if values else np.zeros(0, dtype))
        )
    return SlotProgram(**arrays)


def _kernel_triplets(phase: RowMap):
    """``(kind, round scalars, triplets)`` of a map that is a kernel of
    :data:`SLOT_KERNELS` reading the same nodes' rows (its node-local form): one term of
    coefficient 1 per target row, from its source row; else None."""
    if phase.kernel is None or phase.local is None:
        return None
    name, params = phase.kernel
    kind = SLOT_KERNELS.get(name)
    if kind is None or len(phase.sources) != 1:
        return None
    values = tuple(float(p) for p in params) + (0.0,) * (2 - len(params))
    targets = phase.z_rows
    sources = phase.sources[0][2]
    none = np.zeros(0, dtype=np.int64)
    ones = np.ones(targets.size)
    return kind, values, (targets, sources, ones, none, none, np.zeros(0), none)


def _stacked(tables: list, key: str) -> np.ndarray:
    """The tables of a program's (or a batch's) per-row affine phases, rows stacked, as
    float64 C arrays: an empty one of the loop's shape ((0, 1), or (0, 1, 1) for
    ``a_mat``) where there is none."""
    found = [t for t in tables if t.shape[0]]
    if not found:
        return np.zeros((0, 1, 1) if key == "a_mat" else (0, 1))
    return np.ascontiguousarray(np.concatenate(found), dtype=np.float64)


def _affine_triplets(phase: RowMap, problem):
    """``(kind, round scalars, triplets, (matrices, offsets))`` of a map whose function
    declares itself affine row by row, else None. Such a function has a method
    ``row_affine(problem, rows)`` giving, for the map's rows ``rows`` (of its target
    block), ``(M, b, after)``: the map sends the k-th row ``v`` of its one source to ``M_k
    (v + b_k)`` (``after`` False) or ``M_k v + b_k`` (True), with ``M`` of shape (k, d)
    (diagonal matrices) or (k, d, d) and ``b`` (k, d) (or None: not affine for this
    problem). ADMM's exact local solves and the dual methods' conjugate gradients of
    quadratics are such maps. The loop computes what the map computes, in the same order
    for diagonal matrices (the same bits); a full matrix's products are summed in column
    order (to rounding)."""
    declared = getattr(phase.function, "row_affine", None)
    if not callable(declared) or problem is None or len(phase.sources) != 1:
        return None
    targets = phase.z_rows
    sources = phase.sources[0][2]
    if sources.size != targets.size or not targets.size:
        return None  # (one source row shared by every target: not row by row)
    found = declared(problem, phase.target_rows)
    if found is None:
        return None
    matrices, offsets, after = found
    matrices = np.ascontiguousarray(matrices, dtype=np.float64)
    offsets = np.ascontiguousarray(offsets, dtype=np.float64)
    k = targets.size
    if offsets.ndim != 2 or offsets.shape[0] != k or matrices.shape[0] != k:
        return None
    d = offsets.shape[1]
    if matrices.shape not in ((k, d), (k, d, d)):
        return None
    kind = AFFINE_DIAGONAL if matrices.ndim == 2 else AFFINE_FULL
    none = np.zeros(0, dtype=np.int64)
    triplets = (targets, sources, np.ones(k), none, none, np.zeros(0), none)
    return kind, (1.0 if after else 0.0, 0.0), triplets, (matrices, offsets)


def _top_k_triplets(phase: RowMap):
    """``(kind, round scalars, triplets)`` of a compression step: a map whose function
    says (``row_top_k()`` gives k, or inf for every entry) that it sends its two sources'
    rows (a, b) to ``b + TopK_k(a - b)`` (the k entries of largest magnitude of a - b,
    ties at the k-th to the lowest indices, as :class:`~stochmix.mixing.compression.TopK`
    keeps them), written over b's own rows; else None. Its terms are those of the linear
    ``a - b`` (two per target: a's row with 1, b's with -1, summed as NumPy subtracts);
    the loop then keeps the k entries and adds b's row (``k_par[2q]`` = k)."""
    declared = getattr(phase.function, "row_top_k", None)
    if not callable(declared) or len(phase.sources) != 2:
        return None
    k = declared()
    targets = phase.z_rows
    (_, _, a), (_, _, b) = phase.sources
    if k is None or not k >= 1 or not targets.size:
        return None
    if a.size != targets.size or not np.array_equal(b, targets):
        return None  # (b must be the target's own rows, read before they are written)
    none = np.zeros(0, dtype=np.int64)
    pairs = np.repeat(targets, 2)
    sources = np.column_stack([a, b]).reshape(-1)
    coefs = np.tile([1.0, -1.0], targets.size)
    return TOP_K_STEP, (float(k), 0.0), (pairs, sources, coefs, none, none, np.zeros(0), none)


def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the int64 matrix ``rows`` (B, w) and the index of each row
    among them, as ``np.unique(rows, axis=0, return_inverse=True)`` gives them (in another
    order): through one integer per row (its entries as mixed-radix digits) where that
    integer fits in int64, a sort of B numbers instead of B rows."""
    low, high = rows.min(axis=0), rows.max(axis=0)
    spans = (high - low + 1).astype(np.float64)
    if float(np.prod(spans)) >= 2.0**62:
        return np.unique(rows, axis=0, return_inverse=True)
    weights = np.cumprod(np.concatenate([[1], spans[:0:-1]]))[::-1].astype(np.int64)
    codes = (rows - low) @ weights
    _, first, which = np.unique(codes, return_index=True, return_inverse=True)
    return rows[first], which.reshape(-1)


def pack(programs: list[SlotProgram]) -> tuple:
    """The programs' arrays concatenated, with program p's phases at ``P0[p]:P0[p+1]``
    and every range shifted into the concatenation."""
    P0 = [0]
    ranges: dict[str, list] = {k: [] for k in ("t0", "m0", "g0", "c0")}
    skip = (*ranges, *SlotProgram.TABLES, "k_tab", "k_mat")
    flat: dict[str, list] = {k: [] for k in SlotProgram.FIELDS if k not in skip}
    shift = dict.fromkeys(ranges, 0)
    tables: dict[str, list] = {k: [] for k in SlotProgram.TABLES}
    offsets: dict[str, list] = {"k_tab": [], "k_mat": []}
    rows = dict.fromkeys(SlotProgram.TABLES, 0)
    for prog in programs:
        phases = prog.t0.size - 1
        P0.append(P0[-1] + phases)
        for key in ranges:
            starts = getattr(prog, key)
            ranges[key].append(starts[:-1] + shift[key])
            shift[key] += int(starts[-1])
        for key in flat:
            flat[key].append(getattr(prog, key))
        # the tables' rows stacked: each program's offsets moved past the ones before
        full = prog.k_kind == AFFINE_FULL
        on = prog.k_tab >= 0
        offsets["k_tab"].append(np.where(on, prog.k_tab + rows["a_off"], -1))
        moved = prog.k_mat + np.where(full, rows["a_mat"], rows["a_diag"])
        offsets["k_mat"].append(np.where(on, moved, -1))
        for key in SlotProgram.TABLES:
            tables[key].append(getattr(prog, key))
            rows[key] += getattr(prog, key).shape[0]
    out = {k: np.concatenate(v) for k, v in flat.items()}
    out.update({k: np.concatenate(v).astype(np.int64) for k, v in offsets.items()})
    out.update({k: _stacked(v, k) for k, v in tables.items()})
    for key, parts in ranges.items():
        out[key] = np.concatenate([*parts, np.array([shift[key]], dtype=np.int64)])
    return np.asarray(P0, dtype=np.int64), out
