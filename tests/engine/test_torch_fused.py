"""The Torch backend's fused path (node-local runs compiled to Torch code, whole-block
mixing, one finiteness read per round) gives the NumPy backend's numbers to 1e-12 in
float64: every federated method on random masks with empty and one-participant rounds,
decentralized methods with dense and sparse mixing, divergence caught at the same round;
thread settings; the same on CUDA where one exists."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from stochmix import run  # noqa: E402
from stochmix.algorithms import (  # noqa: E402
    DGD,
    FOCUS,
    MIFA,
    SCAFFOLD,
    AmplifiedFedAvg,
    FedAvg,
    FedStale,
    FedVARP,
    GradientTracking,
    PushPull,
)
from stochmix.engine.backends import TorchBackend  # noqa: E402
from stochmix.engine.backends import torch_backend as backends_module  # noqa: E402
from stochmix.engine.codegen import torch_program  # noqa: E402
from stochmix.engine.codegen.cache import program_for  # noqa: E402
from stochmix.mixing import OnePeerExponential, RandomSequence  # noqa: E402
from stochmix.participation import Full, Trace  # noqa: E402
from stochmix.problems import LeastSquares, Quadratic  # noqa: E402

N = 10
ROUNDS = 24


class _Replay(Trace):
    """A recorded trace that states marginals (for the methods that weigh by 1/p_i)."""

    def __init__(self, masks, p):
        super().__init__(masks)
        self._p = p

    @property
    def probabilities(self):
        return self._p


def _masks(seed: int = 0) -> np.ndarray:
    """Random masks with empty, one-participant and full rounds among them."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, N)
    masks = rng.random((ROUNDS, N)) < p
    masks[2] = False  # empty
    masks[5] = False
    masks[5, 3] = True  # one participant
    masks[6] = False
    masks[6, 0] = True  # the first client alone
    masks[9] = True  # everyone
    masks[13] = False
    masks[13, N - 1] = True  # the last client alone
    return masks, p


def federated_methods(lr):
    return [
        FedAvg(lr, 3),
        FedAvg(lr, 2, server_lr=1.5, weights="unbiased"),
        FedAvg(lr, 2, weights="fedau", cutoff=5),
        AmplifiedFedAvg(lr, 2, amplification=3.0, period=4),
        FedStale(lr, 3, beta=0.6),
        FedStale(lr, 2, beta=0.3, probabilities="fedau"),
        FedVARP(lr, 2),
        MIFA(lr, 2),
        SCAFFOLD(lr, 3),
        FOCUS(lr / N, 3),
    ]


@pytest.fixture(scope="module")
def problem():
    return LeastSquares.random(N, 5, rows_per_client=(3, 9), reg=0.1, seed=7)


def assert_close(a, b, tol=1e-12):
    scale = 1 + np.abs(a.server).max()
    np.testing.assert_allclose(b.server, a.server, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(b.distance, a.distance, rtol=0, atol=tol * scale)


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
def test_every_federated_method_matches_numpy_on_the_fused_path(problem, device, monkeypatch):
    masks, p = _masks()
    part = _Replay(masks, p)
    built = []
    original = TorchBackend.local_program

    def spy(self, program):
        built.append(program.key)
        return original(self, program)

    monkeypatch.setattr(TorchBackend, "local_program", spy)
    for method in federated_methods(0.3 / problem.smoothness):
        built.clear()
        a = run(method, problem, part, ROUNDS, seed=4, compiled=False)
        b = run(method, problem, part, ROUNDS, seed=4, backend=TorchBackend(device=device))
        assert built, f"{method!r} never took the fused Torch path"
        assert b.diverged_at is None
        assert_close(a, b)
        np.testing.assert_array_equal(b.participants, a.participants)


def test_fused_path_matches_the_compiled_numpy_path_too(problem):
    masks, p = _masks(1)
    part = _Replay(masks, p)
    lr = 0.3 / problem.smoothness
    for method in (FedAvg(lr, 3), FOCUS(lr / N, 3), FedStale(lr, 2, beta=0.5)):
        a = run(method, problem, part, ROUNDS, seed=1)
        b = run(method, problem, part, ROUNDS, seed=1, backend="torch")
        assert_close(a, b)


def test_float32_fused_path_stays_close(problem):
    masks, p = _masks(2)
    part = _Replay(masks, p)
    method = FOCUS(0.3 / (N * problem.smoothness), 2)
    a = run(method, problem, part, ROUNDS)
    b = run(method, problem, part, ROUNDS, backend="torch", dtype=np.float32)
    np.testing.assert_allclose(b.server, a.server, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("mixing", ["sparse", "dense"])
def test_decentralized_methods_match_numpy(problem, device, mixing):
    lr = 0.2 / problem.smoothness
    for method in (
        DGD(lr, RandomSequence(N, "erdos_renyi", seed=2)),
        GradientTracking(lr, OnePeerExponential(N), rule="natural"),
        PushPull(lr, RandomSequence(N, "random_directed", seed=3)),
    ):
        a = run(method, problem, Full(N), 20)
        b = run(method, problem, Full(N), 20, backend=TorchBackend(device=device, mixing=mixing))
        assert_close(a, b)
        np.testing.assert_allclose(b.consensus, a.consensus, rtol=1e-9, atol=1e-14)


def test_mixing_operators_are_built_once_per_distinct_matrix(problem, monkeypatch):
    """A periodic sequence's matrices become tensors in its first period, not every
    round: twice the rounds build no more operators."""
    built = []
    original = TorchBackend._operator

    def spy(self, csr, dense):
        built.append(dense)
        return original(self, csr, dense)

    monkeypatch.setattr(TorchBackend, "_operator", spy)
    counts = []
    for rounds in (20, 40):
        built.clear()
        graphs = OnePeerExponential(N)  # period ceil(log2 N) = 4
        method = GradientTracking(0.2 / problem.smoothness, graphs, rule="natural")
        result = run(method, problem, Full(N), rounds, backend=TorchBackend(mixing="dense"))
        assert np.isfinite(result.server).all()
        assert built and all(built)
        counts.append(len(built))
    assert counts[0] == counts[1], counts


def test_general_phases_are_cached_by_content(problem, monkeypatch):
    """Phases off the fused path (rebuilt each round) find their dense operators by
    content: the same matrix is never densified twice."""
    calls = []
    original = TorchBackend._build

    def spy(self, phase, dense):
        calls.append(phase)
        return original(self, phase, dense)

    monkeypatch.setattr(TorchBackend, "_build", spy)
    monkeypatch.delattr(TorchBackend, "apply_blockwise", raising=False)  # apply() only
    monkeypatch.delattr(TorchBackend, "run_products", raising=False)
    backend = TorchBackend(mixing="dense")
    method = GradientTracking(0.2 / problem.smoothness, OnePeerExponential(N), rule="natural")
    a = run(method, problem, Full(N), 30)
    b = run(method, problem, Full(N), 30, backend=backend)
    assert_close(a, b)
    # a period of 4 steps, two general phases a round: at most 8 distinct operators
    assert 0 < len(calls) <= 8 + 1


@pytest.mark.parametrize("device", _devices())
def test_divergence_stops_at_the_same_round(device):
    problem = Quadratic.random(N, 4, condition=50.0, seed=0)
    masks, p = _masks(3)
    part = _Replay(masks, p)
    for method in (FedAvg(1e6, 3), FOCUS(1e5, 3), FedStale(1e6, 2, beta=0.5)):
        with pytest.warns(Warning, match="diverged"):
            a = run(method, problem, part, ROUNDS, compiled=False, divergence_threshold=1e300)
        with pytest.warns(Warning, match="diverged"):
            b = run(
                method,
                problem,
                part,
                ROUNDS,
                backend=TorchBackend(device=device),
                divergence_threshold=1e300,
            )
        assert a.diverged_at is not None
        assert b.diverged_at == a.diverged_at


def test_a_nan_anywhere_gives_the_numpy_verdict_for_its_round():
    """A NaN put into one entry of the state before a round: the Torch round (one flag
    read at its end) says False exactly when the NumPy round (checks per phase) does, and
    the next round starts with a clean flag."""
    from stochmix.engine.backends import NumpyBackend
    from stochmix.engine.backends.dispatch import execute
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.model.method import RunContext
    from stochmix.engine.plan.round_plan import plan_round

    problem = Quadratic.random(N, 3, seed=0)
    method = FOCUS(0.01, 2)
    layout = Layout(method.blocks(N))
    verdicts = []
    for block in ("x", "y", "g"):
        for row in (0, 3, 5, 9):
            answers = []
            for backend in (NumpyBackend(compiled=False), TorchBackend()):
                ctx = RunContext(layout, N, 3, None)
                method.start(ctx)
                z = backend.asarray(layout.initial(np.ones(3)))
                first = plan_round(method.round_phases(0, np.arange(N), ctx), backend, method, ctx)
                assert execute(first, z, backend, problem, method, ctx)
                z[layout.start(block) + row, 1] = float("nan")
                plan = plan_round(
                    method.round_phases(1, np.array([2, 4]), ctx), backend, method, ctx
                )
                answers.append(execute(plan, z, backend, problem, method, ctx))
                if isinstance(backend, TorchBackend):  # a clean state: a clean round
                    z = backend.asarray(layout.initial(np.ones(3)))
                    ctx = RunContext(layout, N, 3, None)
                    method.start(ctx)
                    again = plan_round(
                        method.round_phases(0, np.array([1]), ctx), backend, method, ctx
                    )
                    assert execute(again, z, backend, problem, method, ctx)
            assert answers[0] == answers[1], (block, row, answers)
            verdicts.append(answers[0])
    assert True in verdicts and False in verdicts


def test_a_program_alone_reads_its_own_flag(problem):
    """TorchProgram.run without a round flag checks its own values."""
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.model.method import RunContext
    from stochmix.engine.plan.round_plan import LocalStep, plan_round

    method = FedAvg(0.1, 2)
    layout = Layout(method.blocks(N))
    ctx = RunContext(layout, N, problem.dim, None)
    method.start(ctx)
    backend = TorchBackend()
    z = backend.asarray(layout.initial(np.zeros(problem.dim)))
    plan = plan_round(method.round_phases(0, np.array([0, 3, 5]), ctx), backend, method, ctx)
    step = next(item for item in plan if isinstance(item, LocalStep))
    program = torch_program.torch_program(program_for(step.structure))
    args = (step.nodes, layout, step.coefs, step.clients, problem.bind_clients, 2 * problem.dim)
    assert program.run(z, *args) is True
    z[layout.start("x"), 0] = float("inf")  # the server row, which the clients pull
    assert program.run(z, *args) is False


def test_threads_option_and_variable(monkeypatch):
    """The count a backend's runs use, resolved when it is built; building it sets nothing
    (the run sets it and puts it back: tests/engine/test_torch_threads.py)."""
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("STOCHMIX_TORCH_THREADS", raising=False)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
        torch.set_num_threads(2)
        assert TorchBackend(threads=1).threads == 1
        assert TorchBackend(threads=0).threads is None  # left alone
        assert TorchBackend().threads == 1  # default: one thread on the CPU
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert TorchBackend().threads is None  # the user chose: left alone
        monkeypatch.setenv("STOCHMIX_TORCH_THREADS", "1")
        assert TorchBackend().threads == 1
        assert torch.get_num_threads() == 2  # none of them set anything
        monkeypatch.setenv("STOCHMIX_TORCH_THREADS", "many")
        with pytest.raises(ValueError, match="STOCHMIX_TORCH_THREADS"):
            TorchBackend()
        monkeypatch.delenv("STOCHMIX_TORCH_THREADS")
        with pytest.raises(ValueError, match="threads"):
            TorchBackend(threads=-1)
        with pytest.raises(TypeError, match="threads"):
            TorchBackend(threads=1.5)
        with pytest.raises(TypeError, match="threads"):
            TorchBackend(threads=True)
        # a run through the backend object runs on its count and puts the process's back
        problem = Quadratic.random(N, 3, seed=0)
        inside = []
        callback = lambda r, z, ctx: inside.append(torch.get_num_threads())  # noqa: E731
        run(FedAvg(0.1, 2), problem, Full(N), 3, backend=TorchBackend(threads=1), callback=callback)
        assert inside == [1, 1, 1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_operator_cache_stays_within_its_bytes(problem, monkeypatch):
    backend = TorchBackend(mixing="dense", cache_bytes=3 * N * N * 8)
    method = DGD(0.2 / problem.smoothness, RandomSequence(N, "erdos_renyi", seed=2))
    a = run(method, problem, Full(N), 15)
    b = run(method, problem, Full(N), 15, backend=backend)
    assert_close(a, b)
    assert backend._operator_bytes <= backend.cache_bytes
    # phases and matrices new every round: the entries stay bounded too
    monkeypatch.setattr(backends_module, "CACHE_ENTRIES", 8)
    backend = TorchBackend(mixing="sparse")
    run(method, problem, Full(N), 30, backend=backend)
    assert 0 < len(backend._operators) <= 8
    assert backends_module._tensor_bytes(torch.zeros(3, 4, dtype=torch.float64)) == 96


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_runs_the_same_code_and_numbers(problem):
    masks, p = _masks(4)
    part = _Replay(masks, p)
    lr = 0.3 / problem.smoothness
    for method in (FedAvg(lr, 3), FOCUS(lr / N, 3), SCAFFOLD(lr, 2), MIFA(lr, 2)):
        a = run(method, problem, part, ROUNDS, seed=2, compiled=False)
        b = run(method, problem, part, ROUNDS, seed=2, backend="torch", device="cuda")
        assert_close(a, b)
    for mixing in ("dense", "sparse"):
        method = GradientTracking(0.2 / problem.smoothness, OnePeerExponential(N), rule="natural")
        a = run(method, problem, Full(N), 20)
        b = run(method, problem, Full(N), 20, backend=TorchBackend(device="cuda", mixing=mixing))
        assert_close(a, b)
