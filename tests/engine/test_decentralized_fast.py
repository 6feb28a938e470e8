"""The whole-block path of decentralized phases (issue 13): phases that mix whole blocks
are applied as one sparse product per block (``Phase.blockwise`` and
``NumpyBackend.apply_blockwise``) and give the numbers of the general row-sparse path;
matrices and phases are reused per distinct matrix; NaN still stops a run at its round."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from stochmix import run
from stochmix.algorithms import DGD, GradientTracking, PushPull, PushSum
from stochmix.engine import Block, Layout, Method, NumpyBackend
from stochmix.engine.model.method import RunContext
from stochmix.engine.model.phase import PhaseBuilder
from stochmix.engine.model.whole_block import apply_blockwise_numpy
from stochmix.engine.runner.loop import DivergenceWarning
from stochmix.mixing import OnePeerExponential, RandomSequence
from stochmix.mixing.rowsparse import RowSparse
from stochmix.participation import Full
from stochmix.problems import Quadratic
from tests._backends import WholeBlocks


class GeneralOnly(NumpyBackend):
    """The NumPy backend without ``apply_blockwise`` and ``run_products``: every mixing
    phase takes the general path (what a backend without the whole-block form gets)."""

    def __getattribute__(self, name):
        if name in ("apply_blockwise", "run_products"):
            raise AttributeError(name)
        return super().__getattribute__(name)


class Counting(NumpyBackend):
    """Counts the phases each path applies; ``products=False``: whole-block phases never
    join runs (no ``run_products``), so every mixing phase takes ``apply_blockwise``."""

    def __init__(self, products=True):
        super().__init__()
        self.products = products
        self.calls = {"apply": 0, "apply_blockwise": 0, "run_products": 0}

    def __getattribute__(self, name):
        if name == "run_products" and not object.__getattribute__(self, "products"):
            raise AttributeError(name)
        return super().__getattribute__(name)

    def apply(self, z, phase, gradients):
        self.calls["apply"] += 1
        return super().apply(z, phase, gradients)

    def apply_blockwise(self, z, phase, gradients):
        self.calls["apply_blockwise"] += 1
        return super().apply_blockwise(z, phase, gradients)

    def run_products(self, z, products):
        self.calls["run_products"] += 1
        return super().run_products(z, products)


def sequences(seed, n):
    return {
        "undirected": RandomSequence(n, "erdos_renyi", seed=seed),
        "directed": RandomSequence(n, "random_directed", seed=seed + 1),
    }


def methods(seed, n, lr):
    graphs = sequences(seed, n)
    return [
        DGD(lr, graphs["undirected"], decay=0.5),
        DGD(lr, graphs["directed"], rule="row"),
        GradientTracking(lr, graphs["undirected"]),
        GradientTracking(lr, OnePeerExponential(n), rule="natural"),
        PushPull(lr, graphs["directed"]),
        PushSum(lr, graphs["directed"], decay=0.5),
    ]


def close(a, b, tol=1e-12):
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * (1 + np.abs(b).max()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_whole_block_path_equals_general_path(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(5, 12)), int(rng.integers(1, 4))
    problem = Quadratic.random(n, d, seed=seed)
    x0 = rng.normal(size=d)
    for index, method in enumerate(methods(seed, n, 0.2 / problem.smoothness)):
        counting = Counting()
        fast = run(method, problem, Full(n), 15, x0=x0, backend=counting, progress=False)
        slow = run(
            methods(seed, n, 0.2 / problem.smoothness)[index],
            problem,
            Full(n),
            15,
            x0=x0,
            backend=GeneralOnly(),
            progress=False,
        )
        # the mixing phases: whole-block products, or products inside a run
        mixed = counting.calls["apply_blockwise"] + counting.calls["run_products"]
        assert mixed >= 15 and counting.calls["apply"] == 0, method.name
        close(fast.server, slow.server)
        close(fast.consensus, slow.consensus)


@pytest.mark.parametrize("seed", [3, 4])
def test_each_mixing_phase_equals_its_matrices(seed):
    """Phase by phase, on a random state: the whole-block form gives M z + B G with M and
    B from Phase.matrix() and Phase.gradient_matrix()."""
    rng = np.random.default_rng(seed)
    n, d = 7, 3
    problem = Quadratic.random(n, d, seed=seed)
    for method in methods(seed, n, 0.1):
        layout = Layout(method.blocks(n))
        ctx = RunContext(layout, n, d)
        method.start(ctx)
        everyone = np.arange(n)
        seen = 0
        for r in range(4):
            for phase in method.round_phases(r, everyone, ctx):
                form = phase.blockwise
                if form is None:
                    continue
                seen += 1
                z = rng.normal(size=(layout.size, d)) + 3.0  # positive weights for push-sum
                grads = None
                want = phase.matrix() @ z
                if form.clients is not None:
                    grads = problem.gradients(form.clients, method.points(z, ctx, form.clients))
                    full = np.zeros((n, d))
                    full[form.clients] = grads
                    want = want + phase.gradient_matrix(n) @ full
                got = z.copy()
                assert apply_blockwise_numpy(got, form, grads)
                close(got, want)
        assert seen >= 4, method.name


class TwoMatrices(Method):
    """A made-up method: one phase mixes two blocks with two different matrices,
    x <- W1 x + 0.5 W2 y,  y <- W2 x - 0.3 y + 2 G(x)."""

    name = "two matrices"
    client_node = 0

    def __init__(self, w1, w2):
        self.w1, self.w2 = w1, w2

    def blocks(self, n_clients):
        return [Block("x", n_clients, "model"), Block("y", n_clients, "ones")]

    def round_phases(self, r, participants, ctx):
        w1, w2 = RowSparse.whole(self.w1), RowSparse.whole(self.w2)
        phase = (
            ctx.phase("both")
            .apply("x", "x", w1)
            .apply("x", "y", w2, 0.5)
            .apply("y", "x", w2)
            .combine("y", participants, "y", participants, -0.3)
            .gradient("y", participants, participants, 2.0)
        )
        return [phase.build()]

    def output(self, z, ctx):
        return z[ctx.layout.slice("x")].mean(axis=0)


def random_stochastic(rng, n):
    dense = rng.random((n, n)) * (rng.random((n, n)) < 0.4) + np.eye(n)
    return sp.csr_array(dense / dense.sum(axis=1, keepdims=True))


def test_made_up_method_two_matrices_in_one_phase():
    rng = np.random.default_rng(5)
    n, d = 9, 2
    problem = Quadratic.random(n, d, seed=5)
    w1, w2 = random_stochastic(rng, n), random_stochastic(rng, n)
    layout = Layout(TwoMatrices(w1, w2).blocks(n))
    ctx = RunContext(layout, n, d)
    (phase,) = TwoMatrices(w1, w2).round_phases(0, np.arange(n), ctx)
    form = phase.blockwise
    assert form is not None
    assert [t.block for t in form.targets] == ["x", "y"]
    # products first, the term that reads y itself last (written straight into y's rows)
    assert [term.kind for term in form.targets[1].terms] == ["mix", "grad", "block"]
    # x and y read each other: x is kept in a buffer, y is written as soon as computed
    assert [(t.block, direct) for t, direct, _ in form.order] == [("x", False), ("y", True)]
    counting = Counting(products=False)
    fast = run(TwoMatrices(w1, w2), problem, Full(n), 6, backend=counting, progress=False)
    slow = run(TwoMatrices(w1, w2), problem, Full(n), 6, backend=GeneralOnly(), progress=False)
    assert counting.calls == {"apply": 0, "apply_blockwise": 6, "run_products": 0}
    close(fast.server, slow.server)
    # its products inside a run of node-local phases (the compiled loop's): the same numbers
    pytest.importorskip("numba")
    within = Counting()
    within.compiled = True
    joined = run(TwoMatrices(w1, w2), problem, Full(n), 6, backend=within, progress=False)
    assert within.calls == {"apply": 0, "apply_blockwise": 0, "run_products": 6}
    close(joined.server, slow.server)
    # and by hand
    x, y = np.zeros((n, d)), np.ones((n, d))
    for _ in range(6):
        x, y = w1 @ x + 0.5 * (w2 @ y), w2 @ x - 0.3 * y + 2.0 * problem.gradients(np.arange(n), x)
    close(fast.server[-1], x.mean(axis=0))


def test_partial_apply_takes_the_row_subset_or_the_general_path():
    """An apply on some rows only (x[A] <- W[A] x, an activated round's pull) has a form
    on those rows: the NumPy backend applies it through apply_blockwise, a backend that
    does not apply row subsets through its sparse rows, with the same numbers."""
    n, d = 6, 2
    layout = Layout([Block("x", n, "model")])
    rows = np.array([1, 2, 4])
    w = random_stochastic(np.random.default_rng(6), n)
    partial = RowSparse(n, rows, w[rows])
    phase = PhaseBuilder(layout).apply("x", "x", partial).build()
    assert phase.blockwise is not None and phase.blockwise.subset
    whole = PhaseBuilder(layout).apply("x", "x", RowSparse.whole(w))
    assert whole.build().blockwise is not None
    # a whole-block apply with a term on some rows only: the general path too
    mixed = whole.combine("x", rows, "x", rows, 0.5).build()
    assert mixed.blockwise is None

    class Partial(TwoMatrices):
        def blocks(self, n_clients):
            return [Block("x", n_clients, "model")]

        def round_phases(self, r, participants, ctx):
            return [ctx.phase().apply("x", "x", partial).build()]

    class NoSubsets(Counting):
        applies_row_subsets = False

    problem = Quadratic.random(n, d, seed=6)
    results = []
    for backend, calls in ((Counting(), (0, 3)), (NoSubsets(), (3, 0))):
        results.append(
            run(Partial(w, w), problem, Full(n), 3, x0=np.ones(d), backend=backend,
                progress=False).server  # fmt: skip
        )
        assert backend.calls == {"apply": calls[0], "apply_blockwise": calls[1], "run_products": 0}
    np.testing.assert_allclose(results[0], results[1], rtol=1e-13, atol=1e-15)
    # by hand: three steps of x[A] <- W[A] x
    x = np.ones((n, d))
    for _ in range(3):
        x[rows] = w[rows] @ x
    np.testing.assert_allclose(results[0][-1], x.mean(axis=0), rtol=1e-13)


class NaNAfter(Quadratic):
    """Gradients turn NaN from the ``bad``-th call on."""

    def __init__(self, base, bad):
        self.__dict__.update(base.__dict__)
        self.calls, self.bad = 0, bad

    def gradients(self, clients, points):
        self.calls += 1
        out = super().gradients(clients, points)
        return out * np.nan if self.calls >= self.bad else out


# (method, the call of problem.gradients that first returns NaN, the round it falls in):
# gradient tracking asks once at round 0 (initial gradients) and once per round (track);
# DGD once per round; push-sum once per round from round 1 on
NAN_CASES = [
    (lambda n: GradientTracking(0.05, OnePeerExponential(n), rule="natural"), 5, 3),
    (lambda n: DGD(0.05, OnePeerExponential(n), rule="natural"), 3, 2),
    (lambda n: PushSum(0.05, RandomSequence(n, "random_directed", seed=1)), 3, 3),
]


class InfAfter(NaNAfter):
    """One node's gradient turns +Inf from the ``bad``-th call on (no NaN anywhere: the
    network average is then Inf, not NaN)."""

    def gradients(self, clients, points):
        self.calls += 1
        out = Quadratic.gradients(self, clients, points)
        if self.calls >= self.bad:
            out[0] = np.inf
        return out


@pytest.mark.parametrize("backend", [NumpyBackend, GeneralOnly])
@pytest.mark.parametrize(("make", "bad", "round_"), NAN_CASES)
@pytest.mark.parametrize("broken", [NaNAfter, InfAfter])
def test_nan_stops_the_run_at_its_round(backend, make, bad, round_, broken):
    n, d = 8, 3
    problem = broken(Quadratic.random(n, d, seed=7), bad=bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(make(n), problem, Full(n), 10, backend=backend(), progress=False)
    assert result.diverged_at == round_ + 1  # the record counts rounds from 1
    assert any(issubclass(w.category, DivergenceWarning) for w in caught)


def test_matrices_and_phases_are_reused_per_distinct_matrix():
    n, d = 16, 2
    graphs = OnePeerExponential(n)
    w = graphs.matrix(5, "natural", copy=False)
    assert w is graphs.matrix(5 + graphs.period, "natural", copy=False)
    assert not w.data.flags.writeable
    fresh = graphs.matrix(5, "natural")
    assert fresh is not w and fresh.data.flags.writeable
    np.testing.assert_array_equal(fresh.toarray(), w.toarray())

    method = GradientTracking(0.05, graphs, rule="natural")
    before = method.fingerprint()
    layout = Layout(method.blocks(n))
    ctx = RunContext(layout, n, d)
    method.start(ctx)
    everyone = np.arange(n)
    first = method.round_phases(1, everyone, ctx)
    again = method.round_phases(1 + graphs.period, everyone, ctx)
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert method.mixing(1, "natural").values is graphs.matrix(1, "natural", copy=False)
    assert method.fingerprint() == before  # the caches are not parameters

    random = RandomSequence(n, seed=3)
    method = GradientTracking(0.05, random)
    method.start(ctx)
    a = method.round_phases(1, everyone, ctx)
    b = method.round_phases(2, everyone, ctx)
    assert a[0] is not b[0]  # a non-periodic sequence: a new matrix every step
    assert method.mixing(2, "metropolis").values is random.matrix(2, "metropolis", copy=False)


def test_the_same_phases_get_the_same_plan():
    from stochmix.engine.plan.round_plan import plan_round

    n, d = 16, 2
    method = DGD(0.05, OnePeerExponential(n), rule="natural")
    layout = Layout(method.blocks(n))
    ctx = RunContext(layout, n, d)
    method.start(ctx)
    backend = NumpyBackend()
    everyone = np.arange(n)
    phases = method.round_phases(2, everyone, ctx)
    first = plan_round(phases, backend, method, ctx)
    # the local step next to the mixing phase takes the whole-block path: no LocalStep
    assert [type(item).__name__ for item in first] == ["Phase", "Phase"]
    again = plan_round(
        method.round_phases(2 + method.graphs.period, everyone, ctx), backend, method, ctx
    )
    assert all(a is b for a, b in zip(first, again, strict=True))
    general = GeneralOnly()  # kept alive: a freed backend's id may come back
    other = plan_round(phases, general, method, ctx)  # another backend: planned anew
    assert [type(item).__name__ for item in other] == ["LocalStep", "Phase"]
    # kept from the second time on: the same LocalStep comes back
    backend = GeneralOnly()
    plans = [plan_round(phases, backend, method, ctx) for _ in range(3)]
    assert plans[2][0] is plans[1][0] and plans[1][0] is not plans[0][0]


def test_whole_block_phases_leave_the_model_block_to_the_reported_average():
    """In a run's plan, whole-block phases do not sum the model block for the NaN/Inf
    check: the network average, checked after every round, sums every row of it. The
    other blocks keep their checks (y), but for a copy of gradients that y adds (g)."""
    from stochmix.engine.plan.round_plan import plan_round

    n, d = 16, 2
    method = GradientTracking(0.05, OnePeerExponential(n), rule="natural")
    ctx = RunContext(Layout(method.blocks(n)), n, d)
    method.start(ctx)
    phases = method.round_phases(2, np.arange(n), ctx)
    plan = plan_round(phases, WholeBlocks(), method, ctx)
    checks = {t.block: check for item in plan for t, _, check in item.blockwise.order}
    assert method.checked_by_output == ("x",)
    assert checks["x"] is False and checks["y"] is True
    # the phases themselves are untouched: analysis and other runs see their own checks
    own = {t.block: check for ph in phases for t, _, check in ph.blockwise.order}
    assert own["x"] is True
    again = plan_round(phases, WholeBlocks(), method, ctx)
    assert all(a is b for a, b in zip(plan, again, strict=True))  # one copy per phase


class NoHandOff(NumpyBackend):
    """The NumPy backend with every whole-block phase writing its blocks into the state."""

    hands_off = False


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("form", ["atc", "cta"])
def test_a_block_handed_to_the_next_phase_gives_the_same_bits(form, d):
    """DGD's local step hands x to its product x <- W x, which writes W x straight into the
    state (no temporary copied back): the same bits as writing x and multiplying it. The
    CTA form and gradient tracking have no such pair (their products have other terms)."""
    from stochmix.engine.plan.round_plan import plan_round

    n = 12
    problem = Quadratic.random(n, d, seed=3)
    for graphs, rule in (
        (OnePeerExponential(n), "natural"),
        (RandomSequence(n, "erdos_renyi", seed=4), "metropolis"),
    ):
        method = DGD(0.05, graphs, rule=rule, form=form)
        ctx = RunContext(Layout(method.blocks(n)), n, d)
        method.start(ctx)
        plan = plan_round(method.round_phases(0, np.arange(n), ctx), WholeBlocks(), method, ctx)
        handed = [(item.blockwise.hand_off, item.blockwise.take) for item in plan]
        assert handed == ([("x", None), (None, "x")] if form == "atc" else [(None, None)])
        x0 = np.random.default_rng(5).normal(size=(n, d))
        ours = run(method, problem, Full(n), 9, x0=x0, progress=False, metrics=("consensus",))
        plain = run(
            method, problem, Full(n), 9, x0=x0, progress=False, metrics=("consensus",),
            backend=NoHandOff(),
        )  # fmt: skip
        assert np.array_equal(ours.server, plain.server)
        assert np.array_equal(ours.consensus, plain.consensus)
    tracking = GradientTracking(0.05, OnePeerExponential(n), rule="natural")
    ctx = RunContext(Layout(tracking.blocks(n)), n, d)
    tracking.start(ctx)
    plan = plan_round(tracking.round_phases(1, np.arange(n), ctx), WholeBlocks(), tracking, ctx)
    assert all(item.blockwise.hand_off is None and item.blockwise.take is None for item in plan)


class TwoGossips(Method):
    """A made-up method: a local step, then two gossip steps, x <- W (W (x - a G(x)))."""

    name = "two gossips"
    client_node = 0

    def __init__(self, w):
        self.w = w

    def blocks(self, n_clients):
        return [Block("x", n_clients, "model")]

    def round_phases(self, r, participants, ctx):
        w = RowSparse.whole(self.w)
        step = (
            ctx.phase("step")
            .keep("x", participants)
            .gradient("x", participants, participants, -0.1)
        )
        first = ctx.phase("gossip").apply("x", "x", w)
        second = ctx.phase("gossip again").apply("x", "x", w)
        return [step.build(), first.build(), second.build()]

    def output(self, z, ctx):
        return z[ctx.layout.slice("x")].mean(axis=0)


def test_a_phase_that_takes_a_block_hands_none_on():
    """Of three phases in a chain, only the first pair hands x over (a phase takes or hands,
    not both); the run gives the bits of the unchained path."""
    from stochmix.engine.plan.round_plan import plan_round

    n, d = 10, 3
    w = OnePeerExponential(n).matrix(1, "natural")
    method = TwoGossips(w)
    ctx = RunContext(Layout(method.blocks(n)), n, d)
    plan = plan_round(method.round_phases(0, np.arange(n), ctx), NumpyBackend(), method, ctx)
    handed = [(item.blockwise.hand_off, item.blockwise.take) for item in plan]
    assert handed == [("x", None), (None, "x"), (None, None)]
    problem = Quadratic.random(n, d, seed=1)
    ours = run(method, problem, Full(n), 6, progress=False, metrics=())
    plain = run(method, problem, Full(n), 6, progress=False, metrics=(), backend=NoHandOff())
    assert np.array_equal(ours.server, plain.server)
