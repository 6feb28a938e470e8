"""The lowering of a schedule for the row-wise programs, on made-up step lists.

Each case is a short list of schedule steps whose lowered statements are checked as text
(``tests/engine/test_schedule.py`` has the golden loops of FedAvg and FOCUS, and
``tests/engine/test_rowwise.py`` checks every method's lowered programs against one loop per
step, bit for bit).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix.engine.codegen import row_statements as rs
from stochmix.engine.plan.schedule import (
    GRADIENT,
    Add,
    AddScaled,
    Buffer,
    Check,
    Coef,
    Copy,
    Gather,
    Gradient,
    Multiply,
    Negate,
    Reduce,
    Scale,
    Single,
    Store,
    Subtract,
)
from tests import examples

X, Y, G = Buffer(0, 0), Buffer(1, 0), Buffer(2, 0)
X1 = Buffer(0, 1)
ONE, C3 = Coef(0, "one"), Coef(3, "scalar")

NAMES = rs.Names(
    buffer=lambda b: rs.Row(str(b), f"{b}[j]"),
    single=lambda row: rs.Row(f"S{row}", f"S{row}[j]"),
    gathered=lambda slot: rs.Row(f"z[n{slot}]", f"z[n{slot}, j]"),
    gradient=rs.Row("g", "g[j]"),
    origin=rs.Row("origin", "origin[j]"),
    coef=lambda kind, slot: f"c{slot}",
    outer=lambda row: row,
    rounded=lambda expression: f"rounded({expression})",
)


def text(steps, stores=(), checks=(), plain=False) -> list[str]:
    out = []
    for s in rs.lower(tuple(steps), tuple(stores), tuple(checks), NAMES, plain):
        if isinstance(s, rs.Loop):
            out.append(f"{s.out.entry} = {s.value}")
        elif isinstance(s, rs.Call):
            out.append(f"grad({s.point.row}, {s.out.row})")
        elif isinstance(s, rs.Sum):
            out.append(f"A[{s.index}] += {s.value}")
        elif isinstance(s, rs.Put):
            out.append(f"z[n{s.slot}] = {s.value}")
        else:
            out.append(f"finite {', '.join(s.entries)}")
    return out


def test_a_gradient_goes_into_the_buffer_that_keeps_it():
    steps = [Gradient(X), Copy(G, GRADIENT), Add(Y, GRADIENT)]
    assert text(steps, [Store(1, Y), Store(2, G)]) == [
        "grad(b0_0, b2_0)",
        "b1_0[j] = b1_0[j] + b2_0[j]",
        "z[n1] = b1_0[j]",
        "z[n2] = b2_0[j]",
    ]


def test_a_gradient_stays_in_the_scratch_when_its_buffer_is_still_needed():
    # G's old value is read before the copy: writing the gradient there early would lose it
    steps = [Gradient(X), Add(Y, G), Copy(G, GRADIENT)]
    assert rs.kept_gradients(tuple(steps)) == {}
    # ... or G is rewritten before the next gradient while the gradient is still read
    steps = [Gradient(X), Copy(G, GRADIENT), Scale(G, C3), Add(Y, GRADIENT)]
    assert rs.kept_gradients(tuple(steps)) == {}
    # ... or G is the point (a kernel may read its point after it starts writing)
    assert rs.kept_gradients((Gradient(G), Copy(G, GRADIENT))) == {}
    assert rs.kept_gradients((Gradient(X), Copy(G, GRADIENT))) == {0: G}


def test_copies_are_read_where_they_come_from_until_either_changes():
    steps = [
        Gather(Y, 1),  # Y: the node's row of block 1
        Copy(X, Single(0)),  # X: the snapshot S0
        Gradient(X),  # at S0 itself
        AddScaled(X, GRADIENT, C3, GRADIENT),  # X starts from S0
        Copy(G, Y),  # G: a copy of Y, i.e. of the state row
        Scale(Y, C3),  # Y changes: nothing reads the state row through it any more
        Add(G, X),
    ]
    assert text(steps, [Store(1, Y), Store(2, G)]) == [
        "grad(S0, g)",
        "b0_0[j] = S0[j] + g[j] * c3",
        "b1_0[j] = (z[n1, j]) * c3",
        "b2_0[j] = z[n1, j] + b0_0[j]",
        "z[n1] = b1_0[j]",
        "z[n2] = b2_0[j]",
    ]


def test_a_copy_is_made_before_its_source_is_rewritten():
    steps = [Copy(G, X), Scale(X, C3), Add(Y, G)]
    assert text(steps, [Store(0, X), Store(1, Y)]) == [
        "b2_0[j] = b0_0[j]",  # made before X changes
        "b0_0[j] = (b0_0[j]) * c3",
        "b1_0[j] = b1_0[j] + b2_0[j]",
        "z[n0] = b0_0[j]",
        "z[n1] = b1_0[j]",
    ]


def test_steps_on_one_buffer_fuse_in_their_order():
    steps = [Multiply(X, Y, C3), Add(X, G), Subtract(X, Y), Negate(X), Scale(X, C3)]
    assert text(steps, [Store(0, X)]) == [
        # the product rounded as storing it would round it (a float32 state), then on
        "b0_0[j] = (-(rounded(b1_0[j] * c3) + b2_0[j] - b1_0[j])) * c3",
        "z[n0] = b0_0[j]",
    ]
    # one loop per step, as written, when plain
    assert len(text(steps, [Store(0, X)], plain=True)) == 6


def test_a_step_reading_the_fused_buffer_ends_the_loop_first():
    steps = [Multiply(X, Y, C3), Add(G, X), Add(X, G)]
    assert text(steps, [Store(0, X), Store(2, G)]) == [
        "b0_0[j] = b1_0[j] * c3",
        "b2_0[j] = b2_0[j] + b0_0[j]",
        "b0_0[j] = b0_0[j] + b2_0[j]",
        "z[n0] = b0_0[j]",
        "z[n2] = b2_0[j]",
    ]


def test_a_sum_of_a_buffer_nothing_reads_again_is_taken_from_its_expression():
    steps = [Multiply(X, Y, C3), Reduce(7, X, ONE), Add(G, Y)]
    assert text(steps, [Store(2, G)]) == [
        "A[7] += rounded(b1_0[j] * c3)",
        "b2_0[j] = b2_0[j] + b1_0[j]",
        "z[n2] = b2_0[j]",
    ]
    # still read afterwards (stored): written, then summed
    assert text(steps, [Store(0, X), Store(2, G)])[:2] == [
        "b0_0[j] = b1_0[j] * c3",
        "A[7] += b0_0[j]",
    ]


def test_rows_put_back_unchanged_are_not_stored_and_checks_share_a_loop():
    steps = [Gather(Y, 1), Gather(G, 2), Copy(X1, G), Check(Y)]
    lines = text(steps, [Store(1, Y), Store(2, X1), Store(0, None)], [Y, X1])
    assert lines == ["finite z[n1, j]", "z[n0] = 0.0", "finite z[n1, j], z[n2, j]"]


def test_a_copy_of_a_state_row_is_made_before_a_store_rewrites_that_row():
    steps = [Gather(Y, 1), Copy(G, Y), Scale(Y, C3)]
    # G holds the old row 1, which the store of Y rewrites: G is copied out first
    assert text(steps, [Store(1, Y), Store(2, G)]) == [
        "b1_0[j] = (z[n1, j]) * c3",
        "b2_0[j] = z[n1, j]",
        "z[n1] = b1_0[j]",
        "z[n2] = b2_0[j]",
    ]


# ---------------------------------------------------------------------- random step lists
# Any list of steps, lowered or written one loop per step, must store the same rows, sum
# the same outer rows and find the same NaN/Inf. The statements are run here by NumPy on
# whole rows (``j`` is ``slice(None)``: a loop over j of an element-wise statement reads
# each entry before writing it), with a gradient that mixes entries and reads its point
# entry by entry while it writes (as a kernel may): a point that were its output would
# show.
SLOTS, D = 3, 4
BUFFERS = [Buffer(s, k) for s in range(SLOTS) for k in (0, 1)]
KINDS = ("one", "minus_one", "scalar", "array")


def _operand():
    return st.one_of(st.sampled_from(BUFFERS), st.sampled_from([Single(0), Single(1), GRADIENT]))


def _coef():
    return st.builds(Coef, st.integers(0, 5), st.sampled_from(KINDS))


_buffer = st.sampled_from(BUFFERS)
_step = st.one_of(
    st.builds(Gather, _buffer, st.integers(0, SLOTS - 1)),
    st.builds(Gradient, st.one_of(st.none(), _buffer)),
    st.builds(Reduce, st.integers(0, 2), _buffer, _coef()),
    st.builds(Check, _buffer),
    st.builds(Negate, _buffer),
    st.builds(Scale, _buffer, _coef()),
    st.builds(Copy, _buffer, _operand()),
    st.builds(Multiply, _buffer, _operand(), _coef()),
    st.builds(Add, _buffer, _operand()),
    st.builds(Subtract, _buffer, _operand()),
    st.builds(AddScaled, _buffer, _operand(), _coef(), st.just(GRADIENT)),
)
# every block's rows stored (from a buffer, or zeros), so that every value can show
_stores = st.lists(
    st.one_of(_buffer, _buffer, _buffer, st.none()), min_size=SLOTS, max_size=SLOTS
).map(lambda values: tuple(Store(slot, value) for slot, value in enumerate(values)))


def _execute(statements, seed: int, poison: bool, dtype=np.float64):
    """Run ``statements`` on rows of ``dtype`` with float64 coefficients (as the compiled
    programs do: a float32 row times a coefficient is a float64 value until stored)."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(D, D))

    def grad(point, out):
        for i in range(D):  # entry by entry, reading the point as it goes
            out[i] = float(mix[i] @ point) + 0.5 * point[i]

    def rows(*shape):
        return rng.normal(size=shape).astype(dtype)

    space = {"np": np, "grad": grad, "j": slice(None), "A": np.zeros((3, D), dtype)}
    space["rounded"] = lambda value: np.asarray(value).astype(dtype)
    space.update({str(b): rows(D) for b in BUFFERS})
    space.update(g=rows(D), origin=np.zeros(D, dtype), S0=rows(D), S1=rows(D))
    space.update(z=rows(SLOTS, D))
    space.update({f"n{s}": s for s in range(SLOTS)})
    space.update({f"c{s}": np.float64(rng.normal()) for s in range(6)})
    if poison:  # a NaN or an Inf somewhere for the checks to find
        name = str(BUFFERS[rng.integers(len(BUFFERS))])
        space[name][rng.integers(D)] = np.inf if rng.random() < 0.5 else np.nan
    bad = False
    for s in statements:
        if isinstance(s, rs.Loop):
            exec(f"{s.out.entry} = {s.value}", space)
        elif isinstance(s, rs.Call):
            exec(f"grad({s.point.row}, {s.out.row})", space)
        elif isinstance(s, rs.Sum):
            exec(f"A[{s.index}, j] += {s.value}", space)
        elif isinstance(s, rs.Put):
            exec(f"z[n{s.slot}, j] = {s.value}", space)
        else:
            bad |= any(bool(np.any(eval(f"{e} - {e} != 0.0", space))) for e in s.entries)
    return space["z"], space["A"], bad


@settings(max_examples=examples(1000), deadline=None)
@given(
    steps=st.lists(_step, min_size=2, max_size=14),
    stores=_stores,
    checks=st.lists(_buffer, max_size=3),
    seed=st.integers(0, 2**16),
    poison=st.booleans(),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_random_steps_lowered_give_the_bits_of_one_loop_per_step(
    steps, stores, checks, seed, poison, dtype
):
    found = {}
    for plain in (True, False):
        statements = rs.lower(tuple(steps), stores, tuple(checks), NAMES, plain)
        with np.errstate(all="ignore"):
            found[plain] = _execute(statements, seed, poison, dtype)
    z, sums, bad = found[False]
    np.testing.assert_array_equal(z, found[True][0])
    np.testing.assert_array_equal(sums, found[True][1])
    assert bad == found[True][2]
