"""Custom methods at the edges of the fast path (found by a review; each failed before its
fix). Every case compares the whole state with the general sparse path, once through the
NumPy programs and once through the row-wise (Numba) programs."""

import importlib.util
import warnings

import numpy as np
import pytest

from stochmix.engine import Block, Method, NumpyBackend, run
from stochmix.mixing.federated import assign_rows, average_rows
from stochmix.mixing.rowsparse import Broadcast, RowSparse
from stochmix.participation import Full, Trace
from stochmix.problems import Logistic, Noisy, Quadratic
from tests._backends import SparseOnly


@pytest.fixture(
    autouse=True,
    params=[
        False,
        pytest.param(
            True,
            marks=pytest.mark.skipif(
                importlib.util.find_spec("numba") is None, reason="needs numba"
            ),
        ),
    ],
    ids=["numpy", "rowwise"],
)
def compiled(request, monkeypatch):
    """Run every case through the NumPy programs and through the row-wise programs."""
    monkeypatch.setitem(PATH, "compiled", request.param)


PATH = {"compiled": False}


def both(make, problem, participation, rounds, dtype=np.float64, **options):
    """(fast states, sparse states, fast result, sparse result) of the same run."""
    out = []
    kernel = getattr(problem, "row_gradient", None)  # stochastic wrappers have none
    compiled = PATH["compiled"] and kernel is not None and kernel(np.dtype(dtype)) is not None
    for backend in (NumpyBackend(dtype, compiled), SparseOnly(dtype)):
        states = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = run(
                make(),
                problem,
                participation,
                rounds,
                seed=3,
                metrics=(),
                backend=backend,
                progress=False,
                callback=lambda r, z, ctx, states=states: states.append(np.array(z)),
                **options,
            )
        out.append((np.array(states), res))
    (fast, rf), (slow, rs) = out
    return fast, slow, rf, rs


def assert_same(fast, slow, atol=1e-12):
    assert fast.shape == slow.shape
    np.testing.assert_allclose(fast, slow, rtol=0, atol=atol * (1 + np.abs(slow).max()))


class TwoSelfTerms(Method):
    """x <- own x + 0.1 y + extra x - lr g: a target with two terms from itself."""

    name = "TwoSelfTerms"

    def __init__(self, own):
        self.own = own

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("y", n + 1, "ones")]

    def round_phases(self, r, participants, ctx):
        n, nodes = ctx.n_clients, participants + 1
        if not participants.size:
            return []
        q = np.full(participants.size, 1.0 / participants.size)
        step = (
            ctx.phase()
            .keep("x", nodes, self.own)
            .combine("x", nodes, "y", nodes, 0.1)
            .combine("x", nodes, "x", nodes, 0.5)
            .gradient("x", nodes, participants, -0.01)
        )
        return [
            ctx.phase().apply("x", "x", assign_rows(participants, n)).build(),
            step.build(),
            ctx.phase().apply("x", "x", average_rows(participants, q, n)).build(),
        ]


class Leader(Method):
    """Peers pulled toward node 0; with node 0 alone, its broadcast is a second self-term."""

    name = "Leader"
    client_node = 0

    def blocks(self, n):
        return [Block("x", n, "model")]

    def round_phases(self, r, participants, ctx):
        if not participants.size:
            return []
        step = ctx.phase().keep("x", participants, 0.9).combine("x", participants, "x", 0, 0.1)
        return [step.gradient("x", participants, participants, -0.05).build()]


@pytest.mark.parametrize("own", [1.0, 2.0])
def test_a_target_with_two_terms_from_itself(own):
    masks = np.random.default_rng(0).random((5, 10)) < 0.5
    fast, slow, _, _ = both(
        lambda: TwoSelfTerms(own), Quadratic.random(10, 3, seed=1), Trace(masks), 5, x0=np.ones(3)
    )
    assert_same(fast, slow)
    masks = np.zeros((4, 10), dtype=bool)
    masks[:, 0] = True  # node 0 alone
    fast, slow, _, _ = both(Leader, Quadratic.random(10, 3, seed=1), Trace(masks), 4)
    assert_same(fast, slow)


class Blend(Method):
    """After the average, participants blend toward the server: x_i <- 0.9 x_i + 0.1 x_0.
    With one participant every term is a single row (absolute rows, in the run's tail)."""

    name = "Blend"

    def blocks(self, n):
        return [Block("x", n + 1, "model")]

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        n, nodes, k = ctx.n_clients, participants + 1, participants.size
        if not k:
            return []
        q = np.full(k, 1.0 / k)
        return [
            ctx.phase().apply("x", "x", assign_rows(participants, n)).build(),
            ctx.phase().keep("x", nodes).gradient("x", nodes, participants, -0.1).build(),
            ctx.phase().apply("x", "x", average_rows(participants, q, n, 0.5)).build(),
            ctx.phase().keep("x", nodes, 0.9).combine("x", nodes, "x", 0, 0.1).build(),
        ]


class Alternating(Method):
    """Claims rounds alike (template_key = |S|) while the row its server step reads
    alternates between two blocks: a lie only the rows of single-row terms show."""

    name = "Alternating"

    def __init__(self, where):
        self.where = where

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("y", n + 1, "ones"), Block("w", n + 1)]

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        n, nodes = ctx.n_clients, participants + 1
        if not participants.size:
            return []
        other, q = ("y" if r % 2 == 0 else "w"), 1.0 / participants.size
        pull = ctx.phase().apply("x", "x", assign_rows(participants, n))
        step = ctx.phase().keep("x", nodes).gradient("x", nodes, participants, -0.1)
        total = ctx.phase().combine("x", 0, "x", nodes, q)
        if self.where == "outer":
            return [p.build() for p in (pull, step, total.combine("x", 0, other, 0, 0.5))]
        tail = ctx.phase().combine(other, 0, "x", 0, 1.0)
        return [p.build() for p in (pull, step, total, tail)]


def test_templates_with_single_row_terms_stay_right():
    one_each = np.eye(6, dtype=bool)  # a different single participant every round
    fast, slow, _, _ = both(Blend, Quadratic.random(6, 2, seed=1), Trace(one_each), 6)
    assert_same(fast, slow)
    three = np.zeros((8, 8), dtype=bool)
    three[:, :3] = True
    for where in ("outer", "tail"):
        fast, slow, _, _ = both(
            lambda where=where: Alternating(where), Quadratic.random(8, 3, seed=1), Trace(three), 8
        )
        assert_same(fast, slow)


class Repeats(Method):
    """A custom method whose node list repeats a node (the sparse path sums its entries)."""

    name = "Repeats"

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("y", n + 1, "ones")]

    def round_phases(self, r, participants, ctx):
        if not participants.size:
            return []
        p = np.concatenate([participants, participants[:1]])
        nodes = p + 1
        step = (
            ctx.phase()
            .keep("x", nodes)
            .combine("x", nodes, "y", nodes, 0.1)
            .keep("y", nodes, 0.9)
            .gradient("x", nodes, p, -0.05)
        )
        return [
            ctx.phase().apply("x", "x", assign_rows(participants, ctx.n_clients)).build(),
            step.build(),
        ]


def test_repeated_nodes_go_the_general_way():
    masks = np.random.default_rng(0).random((6, 10)) < 0.5
    fast, slow, _, _ = both(
        Repeats, Quadratic.random(10, 3, seed=1), Trace(masks), 6, x0=np.ones(3)
    )
    assert_same(fast, slow)


class Blowup(Method):
    """y overflows to inf in a phase whose value a later phase of the run clears."""

    name = "Blowup"

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("y", n + 1, "ones")]

    def round_phases(self, r, participants, ctx):
        nodes = participants + 1
        big = ctx.phase().keep("x", nodes).gradient("x", nodes, participants, -0.1)
        big = big.combine("y", nodes, "y", nodes, 1e200)
        again = ctx.phase().combine("y", nodes, "y", nodes, 1e200)
        return [big.build(), again.build(), ctx.phase().clear("y", nodes).build()]


def test_a_non_finite_value_cleared_later_in_the_run_is_still_caught():
    problem, masks = Quadratic.random(6, 2, seed=1), Trace(np.ones((4, 6), dtype=bool))
    _, _, fast, slow = both(Blowup, problem, masks, 4)
    assert fast.diverged_at == slow.diverged_at == 1


def test_float32_overflow_is_caught_where_it_is_stored():
    class Grow(Blowup):
        def round_phases(self, r, participants, ctx):
            nodes = participants + 1
            return [ctx.phase().combine("y", nodes, "y", nodes, 1e30).build()]

    _, _, fast, slow = both(
        Grow, Quadratic.random(6, 2, seed=1), Trace(np.ones((4, 6), dtype=bool)), 4, np.float32
    )
    assert fast.diverged_at == slow.diverged_at == 2  # 1e30 * 1e30 overflows float32


def test_stochastic_gradients_are_drawn_as_on_the_general_path():
    from stochmix.algorithms import FedAvg

    problem = Noisy(Quadratic.random(2000, 50, seed=1), sigma=0.1, seed=0)  # many chunks
    fast, slow, _, _ = both(lambda: FedAvg(0.05, 3), problem, Full(2000), 2)
    assert_same(fast, slow)


def test_a_numpy_scalar_coefficient_in_a_pattern():
    class Half(Method):
        name = "Half"

        def blocks(self, n):
            return [Block("x", n + 1, "model")]

        def round_phases(self, r, participants, ctx):
            n, nodes = ctx.n_clients, participants + 1
            c = np.float32(0.5)
            op = RowSparse.from_entries(
                n + 1, nodes, np.zeros_like(nodes), c, pattern=Broadcast(nodes, 0, c)
            )
            return [
                ctx.phase().apply("x", "x", op).build(),
                ctx.phase().keep("x", nodes).gradient("x", nodes, participants, -0.1).build(),
            ]

    masks = Trace(np.ones((3, 6), dtype=bool))
    fast, slow, _, _ = both(Half, Quadratic.random(6, 2, seed=1), masks, 3, x0=np.ones(2))
    assert_same(fast, slow)


class Saturate(Method):
    """x overflows to inf and is then read only by a logistic gradient, which saturates
    to a finite value (a review of the row-wise path found it unseen there)."""

    name = "Saturate"

    def blocks(self, n):
        return [Block("x", n + 1, "model")]

    def round_phases(self, r, participants, ctx):
        nodes = participants + 1
        grow = ctx.phase().keep("x", nodes, 1e200)
        step = ctx.phase().gradient("x", nodes, participants, -0.1)  # x <- -0.1 grad(x)
        return [grow.build(), grow.build(), step.build()]


@pytest.mark.parametrize("rows", [6, (2, 12)], ids=["equal rows", "ragged rows"])
def test_a_non_finite_point_read_only_by_a_saturating_gradient_is_caught(rows):
    rng = np.random.default_rng(0)
    counts = rng.integers(2, 13, 8) if isinstance(rows, tuple) else np.full(8, rows)
    features = rng.standard_normal((counts.sum(), 3))
    labels = rng.integers(0, 2, counts.sum())
    # no ridge term: with one, the gradient would carry the inf on (reg * x)
    problem = Logistic.from_stacked(features, labels, counts, 0.0, allow_no_minimiser=True)
    _, _, fast, slow = both(Saturate, problem, Full(8), 3, x0=np.array([1.0, 0.0, 0.0]))
    assert fast.diverged_at == slow.diverged_at == 1
