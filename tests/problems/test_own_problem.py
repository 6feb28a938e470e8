"""The declared contracts: a problem written from the README and ``stochmix.protocols``
alone runs on every path, and backends get exactly the capabilities they declare."""

import functools

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, FOCUS, FedAvg, GradientTracking
from stochmix.engine import NumpyBackend
from stochmix.engine.model.whole_block import apply_blockwise_numpy
from stochmix.engine.plan.capabilities import Capabilities, capabilities
from stochmix.engine.plan.gradients import row_gradient
from stochmix.mixing import StaticSequence
from stochmix.participation import Bernoulli, Full
from stochmix.problems import ClientData, LeastSquares, Problem, client_rows
from stochmix.protocols import (
    AppliesBlockwise,
    BackendLike,
    RoundHooks,
    RunsLocalPhases,
)

N, M, D = 24, 6, 4
METRICS = ("objective",)  # a metric that never asks for gradients


# ------------------------------------------------------------------ the README's problem
@functools.cache  # one class, one kernel: its row-wise programs are compiled once
def _my_least_squares():
    """The README's problem, written again from its text: F_i(x) = 1/2 ||A_i x - b_i||^2,
    its data passed to Problem.__init__, the gradient once as gradient_formula, and a
    compiled one-client kernel from row_gradient."""
    numba = pytest.importorskip("numba")
    from stochmix.problems.kernels import fetch_none

    @numba.njit
    def kernel(data, c, x, out):
        a, b = data
        out[:] = 0.0
        for k in range(a.shape[1]):
            r = 0.0
            for j in range(x.shape[0]):
                r += a[c, k, j] * x[j]
            r -= b[c, k]
            for j in range(x.shape[0]):
                out[j] += a[c, k, j] * r

    class MyLeastSquares(Problem):
        def __init__(self, a, b):
            super().__init__(a.shape[0], a.shape[2], data={"a": a, "b": b})

        def gradient_formula(self, xp, data, idx, x):
            a, b = client_rows(xp, data["a"], idx), client_rows(xp, data["b"], idx)
            r = xp.einsum("mkd,md->mk", a, x) - b
            return xp.einsum("mkd,mk->md", a, r)

        def objective(self, x):
            r = np.einsum("nkd,d->nk", self.data["a"], x) - self.data["b"]
            return 0.5 * float((r * r).sum(axis=1).mean())

        def row_gradient(self, dtype):
            data = self.data.like(dtype)
            return kernel, fetch_none, (data["a"], data["b"])

    return MyLeastSquares


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, M, D)), rng.standard_normal((N, M))


class _Counted:
    """Counts the calls of some of a problem's members (wrapped on the instance)."""

    def __init__(self, problem, *names):
        self.calls = {name: [] for name in names}
        for name in names:
            original = getattr(problem, name)

            def wrapped(*args, _original=original, _name=name, **kwargs):
                self.calls[_name].append(args[0])
                return _original(*args, **kwargs)

            setattr(problem, name, wrapped)


def test_the_readme_problem_has_public_data_and_every_flag():
    MyLeastSquares = _my_least_squares()
    a, b = _data()
    problem = MyLeastSquares(a, b)
    assert isinstance(problem, sm.ProblemLike)
    assert isinstance(problem.data, ClientData) and set(problem.data) == {"a", "b"}
    np.testing.assert_array_equal(problem.data["a"], a)
    assert not problem.data["a"].flags.writeable and a.flags.writeable  # a read-only view
    assert problem.data.like(np.float32)["b"].dtype == np.float32
    flags = ("pure_gradients", "unchecked_gradients", "client_slices", "compiled_gradient")
    assert all(getattr(problem, flag) is True for flag in flags)
    assert row_gradient(problem, NumpyBackend(compiled=True), np.float64) is not None
    builtin = LeastSquares(a, b, form="padded")
    x = np.random.default_rng(1).standard_normal((N, D))
    clients = np.arange(N)
    np.testing.assert_array_equal(problem.gradients(clients, x), builtin.gradients(clients, x))


@pytest.mark.parametrize("method", [FedAvg(0.02, 3), FOCUS(0.002, 3)], ids=["FedAvg", "FOCUS"])
def test_the_readme_problem_runs_compiled_and_not_as_the_builtin_least_squares(method):
    MyLeastSquares = _my_least_squares()
    a, b = _data()
    part = Bernoulli(0.5, N)
    runs = {}
    for compiled in (False, True):
        mine = MyLeastSquares(a, b)
        counted = _Counted(mine, "gradients", "bind_clients")
        args = dict(seed=3, compiled=compiled, metrics=METRICS)
        runs[compiled] = sm.run(method, mine, part, 30, **args)
        builtin = sm.run(method, LeastSquares(a, b, form="padded"), part, 30, **args)
        np.testing.assert_allclose(runs[compiled].server, builtin.server, rtol=0, atol=1e-12)
        # the fast paths: never the checked gradients; gathered once per segment by
        # bind_clients on the NumPy programs, the compiled kernel alone with compiled=True
        assert counted.calls["gradients"] == []
        assert bool(counted.calls["bind_clients"]) is (not compiled)
    np.testing.assert_allclose(runs[True].server, runs[False].server, rtol=0, atol=1e-12)
    assert np.abs(runs[True].server[-1]).max() > 0.01  # the runs moved


def test_the_readme_problem_reads_a_decentralized_block_in_place():
    MyLeastSquares = _my_least_squares()
    a, b = _data()
    ring = StaticSequence(__import__("networkx").cycle_graph(N))
    for method in (DGD(0.01, ring), GradientTracking(0.01, ring)):
        mine = MyLeastSquares(a, b)
        counted = _Counted(mine, "gradients", "gradients_unchecked", "bind_clients")
        res = sm.run(method, mine, Full(N), 40, metrics=METRICS)
        ref = sm.run(method, LeastSquares(a, b, form="padded"), Full(N), 40, metrics=METRICS)
        np.testing.assert_allclose(res.server, ref.server, rtol=0, atol=1e-12)
        assert counted.calls["gradients"] == []
        # whole-block phases read the block in place (a slice); gradient tracking's round
        # is one program (its products inside), which binds the clients' gradients once
        in_place = any(isinstance(idx, slice) for idx in counted.calls["gradients_unchecked"])
        assert in_place or counted.calls["bind_clients"], method.name


def test_the_readme_problem_runs_on_the_torch_backend():
    pytest.importorskip("torch")
    MyLeastSquares = _my_least_squares()
    a, b = _data()
    method, part = FOCUS(0.002, 3), Bernoulli(0.5, N)
    res = sm.run(method, MyLeastSquares(a, b), part, 20, seed=1, backend="torch", metrics=METRICS)
    ref = sm.run(method, LeastSquares(a, b, form="padded"), part, 20, seed=1, metrics=METRICS)
    np.testing.assert_allclose(res.server, ref.server, rtol=0, atol=1e-12)


def test_flags_follow_the_methods_they_were_written_with():
    MyLeastSquares = _my_least_squares()

    class Scaled(MyLeastSquares):  # a new formula, no kernel for it: off the compiled path
        def gradient_formula(self, xp, data, idx, x):
            return 2.0 * super().gradient_formula(xp, data, idx, x)

    class Own(MyLeastSquares):  # its own gradients, undeclared: impure, no fast path
        def gradients(self, clients, points):
            return super().gradients(clients, points)

    class Declared(Own):  # declared again: pure (the others stay off)
        pure_gradients = True

    class Recompiled(Scaled):  # a kernel written for the new formula: compiled again
        def row_gradient(self, dtype):
            return super().row_gradient(dtype)

    def flags(cls):
        names = ("pure_gradients", "unchecked_gradients", "client_slices", "compiled_gradient")
        return tuple(getattr(cls, name) for name in names)

    assert flags(MyLeastSquares) == (True, True, True, True)
    assert flags(Scaled) == (True, True, True, False)
    assert flags(Own) == (False, False, False, False)
    assert flags(Declared) == (True, False, False, False)
    assert flags(Recompiled) == (True, True, True, True)
    a, b = _data()
    with pytest.raises(ValueError, match="compiled=True: Scaled has no compiled gradient"):
        sm.run(FedAvg(0.01, 1), Scaled(a, b), Full(N), 2, compiled=True)
    assert row_gradient(Recompiled(a, b), NumpyBackend(compiled=True), np.float64) is not None


def test_a_problem_without_its_data_says_how_to_give_it():
    class NoData(Problem):
        def __init__(self, centers):
            super().__init__(*centers.shape)
            self.centers = centers

        def gradient_formula(self, xp, data, idx, x):
            return x - client_rows(xp, data["centers"], idx)

        def objective(self, x):
            return 0.0

    with pytest.raises(AttributeError, match=r"NoData has no client data: pass .*data=\{"):
        sm.run(FedAvg(0.1, 1), NoData(np.zeros((4, 2))), Full(4), 1)

    class Wrong(NoData):
        def __init__(self, centers):
            Problem.__init__(self, *centers.shape, data={"centers": centers[:-1]})

    with pytest.raises(ValueError, match=r"data\['centers'\] must hold one entry per client"):
        Wrong(np.zeros((4, 2)))
    with pytest.raises(TypeError, match=r"data\['c'\] must hold real numbers"):
        ClientData(c=np.zeros(3, dtype=complex))


# ------------------------------------------------------------------ backends by contract
class MinimalBackend:
    """A backend with the four required members and nothing else (the general path)."""

    name = "minimal"

    def __init__(self):
        self.applied = 0

    def asarray(self, array):
        return np.asarray(array, dtype=np.float64)

    def to_numpy(self, array):
        return np.asarray(array)

    def apply(self, z, phase, gradients):
        self.applied += 1
        new = phase.mix @ z
        if phase.inject is not None:
            new += phase.inject @ gradients
        z[phase.rows] = new
        return bool(np.isfinite(new).all())


class HookedBackend(MinimalBackend):
    """Adds RoundHooks and AppliesBlockwise (RunsLocalPhases declared, but false)."""

    name = "hooked"
    runs_local_phases = False  # declared and false: not taken

    def __init__(self):
        super().__init__()
        self.rounds = self.ended = self.blockwise = 0

    def begin_round(self):
        self.rounds += 1

    def end_round(self):
        self.ended += 1
        return True

    def apply_blockwise(self, z, phase, gradients):
        self.blockwise += 1
        return apply_blockwise_numpy(z, phase.blockwise, gradients)


class LocalBackend(MinimalBackend):
    """Adds RunsLocalPhases: node-local runs through the engine's NumPy programs."""

    name = "local"
    runs_local_phases = True


def test_capabilities_are_what_the_backend_declares():
    assert capabilities(MinimalBackend()) == Capabilities()
    hooked = capabilities(HookedBackend())
    assert hooked == Capabilities(blockwise=True, round_hooks=True)
    assert capabilities(LocalBackend()) == Capabilities(local_phases=True)
    numpy = capabilities(NumpyBackend(compiled=False))
    assert numpy == Capabilities(
        local_phases=True,
        compiled=False,
        blockwise=True,
        hands_off=True,
        dtype=np.float64,
        row_subsets=True,
        trips=True,
        products=True,
    )
    assert isinstance(HookedBackend(), RoundHooks) and isinstance(HookedBackend(), AppliesBlockwise)
    assert isinstance(HookedBackend(), RunsLocalPhases)  # the member is there; its value is False
    assert not isinstance(MinimalBackend(), (RoundHooks, AppliesBlockwise, RunsLocalPhases))

    class Hidden(NumpyBackend):  # a member hidden on the instance is not there
        def __getattribute__(self, name):
            if name == "apply_blockwise":
                raise AttributeError(name)
            return super().__getattribute__(name)

    assert isinstance(NumpyBackend(), AppliesBlockwise)  # (isinstance asks the class)
    assert capabilities(Hidden()).blockwise is False
    assert capabilities(Hidden()).hands_off is False  # it hands blocks to apply_blockwise
    assert capabilities(Hidden()).row_subsets is False  # (as do row subsets)

    class HalfHooked(MinimalBackend):
        def end_round(self):
            return True

    with pytest.raises(TypeError, match="only one of begin_round and end_round"):
        capabilities(HalfHooked())


def test_a_backend_with_the_four_members_alone_runs_every_phase_through_apply():
    problem = LeastSquares(*_data())
    ring = StaticSequence(__import__("networkx").cycle_graph(N))
    cases = [(FOCUS(0.002, 3), Bernoulli(0.5, N)), (GradientTracking(0.01, ring), Full(N))]
    for method, part in cases:
        backend = MinimalBackend()
        assert isinstance(backend, BackendLike)
        res = sm.run(method, problem, part, 15, seed=2, backend=backend, metrics=METRICS)
        ref = sm.run(method, problem, part, 15, seed=2, metrics=METRICS)
        assert res.config["backend"] == "minimal" and res.config["dtype"] == "float64"
        np.testing.assert_allclose(res.server, ref.server, rtol=0, atol=1e-10)
        phases = len(method.round_phases(0, np.arange(N), _context(method)))
        assert backend.applied >= 15 * min(phases, 2)  # every phase, one by one


def _context(method):
    from stochmix.engine import Layout, RunContext

    ctx = RunContext(Layout(method.blocks(N)), N, D)
    method.start(ctx)
    return ctx


def test_a_declared_capability_is_used():
    problem = LeastSquares(*_data())
    ring = StaticSequence(__import__("networkx").cycle_graph(N))
    method = GradientTracking(0.01, ring)
    backend = HookedBackend()
    res = sm.run(method, problem, Full(N), 12, backend=backend, metrics=METRICS)
    ref = sm.run(method, problem, Full(N), 12, metrics=METRICS)
    np.testing.assert_allclose(res.server, ref.server, rtol=0, atol=1e-12)
    assert backend.rounds == backend.ended == 12  # the round hooks, once a round each
    assert backend.blockwise > 0 and backend.applied == 0  # whole-block phases, one product

    # node-local runs of phases go through the engine's programs: one segment per round
    from stochmix.engine.plan.round_plan import LocalStep, plan_round

    fedavg = FedAvg(0.02, 3)
    ctx = _context(fedavg)
    phases = fedavg.round_phases(0, np.arange(0, N, 2), ctx)
    general = plan_round(phases, MinimalBackend(), fedavg, ctx)
    assert not any(isinstance(step, LocalStep) for step in general)
    local = LocalBackend()
    plan = plan_round(phases, local, fedavg, ctx)
    assert any(isinstance(step, LocalStep) for step in plan)
    part = Bernoulli(0.5, N)
    res = sm.run(fedavg, problem, part, 12, seed=4, backend=local, metrics=METRICS)
    ref = sm.run(fedavg, problem, part, 12, seed=4, compiled=False, metrics=METRICS)
    np.testing.assert_array_equal(res.server, ref.server)
    assert local.applied < 12  # the local steps never reach apply


def test_bind_clients_reads_consecutive_clients_in_place_where_slices_are_taken():
    """Consecutive clients read their rows in place (the formula for slices); a problem
    whose gradients_unchecked takes no slice (client_slices False) keeps the gathered
    rows, and a run with it works."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(12, 4, 3)), rng.normal(size=(12, 4))
    problem = LeastSquares(a, b)
    x = rng.normal(size=(5, 3))
    bound = problem.bind_clients(np.arange(3, 8), x)
    np.testing.assert_allclose(bound(x), problem.gradients(np.arange(3, 8), x), rtol=1e-13)

    class NoSlices(LeastSquares):
        def gradients_unchecked(self, idx, x):
            if not isinstance(idx, np.ndarray):
                raise TypeError(f"gradients_unchecked got {idx!r}")
            return super().gradients_unchecked(idx, x)

    mine = NoSlices(a, b)
    assert mine.client_slices is False
    np.testing.assert_array_equal(
        mine.bind_clients(np.arange(3, 8), x)(x), problem.gradients(np.arange(3, 8), x)
    )
    got = sm.run(FedAvg(0.05, 2), mine, Full(12), 3, compiled=False, progress=False)
    want = sm.run(FedAvg(0.05, 2), problem, Full(12), 3, compiled=False, progress=False)
    np.testing.assert_allclose(got.server, want.server, rtol=0, atol=1e-12)
