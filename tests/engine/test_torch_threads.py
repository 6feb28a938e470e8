"""Torch's intra-op threads: a run's Torch work runs on the fast count (one thread unless the
user asked otherwise), and the process's count is what it was after the run, on either
backend, for a TorchModel on the default backend too, and when the run raises
(stochmix.engine.backends.threads). Every test starts from two threads, so that a count left at
one would show."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from stochmix import run  # noqa: E402
from stochmix.algorithms import FedAvg  # noqa: E402
from stochmix.engine.backends import NumpyBackend, TorchBackend  # noqa: E402
from stochmix.engine.backends.threads import resolve_threads, torch_threads  # noqa: E402
from stochmix.participation import Full  # noqa: E402
from stochmix.problems import Quadratic, TorchModel  # noqa: E402
from tests import CHILD_TIMEOUT  # noqa: E402

N = 4
BEFORE = 2  # the count set before every test: not the run's default of 1
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    """Two threads before each test, no variable choosing a count; the count found is put
    back after."""
    for variable in ("STOCHMIX_TORCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    found = torch.get_num_threads()
    torch.set_num_threads(BEFORE)
    yield
    torch.set_num_threads(found)


class _Seen:
    """A per-sample loss (cross-entropy) that notes Torch's thread count each time the
    problem's gradients or values run it: the count the gradients are computed under."""

    __name__ = "cross_entropy_noting_threads"

    def __init__(self):
        self.counts = []

    def __call__(self, outputs, targets):
        self.counts.append(torch.get_num_threads())
        return torch.nn.functional.cross_entropy(outputs, targets, reduction="none")


def torch_model() -> tuple[TorchModel, _Seen]:
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    data = [(rng.normal(size=(6, 5)), rng.integers(0, 3, size=6)) for _ in range(N)]
    seen = _Seen()
    return TorchModel(module.double(), data, loss=seen, reg=0.01), seen


def _fit(problem, backend="numpy", callback=None, metrics=("objective",)):
    return run(
        FedAvg(0.1, 2), problem, Full(N), 3, x0=problem.initial_point(), backend=backend,
        metrics=metrics, callback=callback, progress=False,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_torch_model_gradients_run_on_one_thread_and_the_count_comes_back(backend, unchecked):
    problem, seen = torch_model()
    inside = []
    _fit(problem, backend, callback=lambda r, z, ctx: inside.append(torch.get_num_threads()))
    assert seen.counts and set(seen.counts) == {1}  # every gradient and objective value
    assert inside == [1, 1, 1]
    assert torch.get_num_threads() == BEFORE


def test_torch_backend_run_restores_the_count():
    problem = Quadratic.random(N, 3, seed=0)
    inside = []
    callback = lambda r, z, ctx: inside.append(torch.get_num_threads())  # noqa: E731
    run(FedAvg(0.1, 2), problem, Full(N), 3, backend="torch", callback=callback)
    assert inside == [1, 1, 1]
    assert torch.get_num_threads() == BEFORE
    run(FedAvg(0.1, 2), problem, Full(N), 3, backend=TorchBackend(threads=1))
    assert torch.get_num_threads() == BEFORE


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_run_that_raises_restores_the_count(backend, unchecked):
    problem, seen = torch_model()

    def fail(r, z, ctx):
        assert torch.get_num_threads() == 1
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        _fit(problem, backend, callback=fail)
    assert torch.get_num_threads() == BEFORE

    def failing_loss(outputs, targets):  # raised inside the gradients, on one thread
        seen.counts.append(torch.get_num_threads())
        raise RuntimeError("bad loss")

    problem._loss_fn = failing_loss
    seen.counts.clear()
    with pytest.raises(RuntimeError, match="bad loss"):
        _fit(problem, backend, metrics=())
    assert seen.counts == [1]
    assert torch.get_num_threads() == BEFORE


def test_a_diverging_run_that_raises_restores_the_count():
    from stochmix.engine.runner.loop import DivergenceError

    problem = Quadratic.random(N, 3, seed=0)
    for backend in ("numpy", "torch"):
        with pytest.raises(DivergenceError):
            run(FedAvg(1e3, 2), problem, Full(N), 50, backend=backend, on_divergence="raise")
        assert torch.get_num_threads() == BEFORE


def test_building_a_backend_sets_nothing():
    assert TorchBackend().threads == 1
    assert TorchBackend(threads=3).threads == 3
    assert TorchBackend(threads=0).threads is None  # never touched
    assert NumpyBackend().threads == 1
    assert torch.get_num_threads() == BEFORE


@pytest.mark.parametrize("backend_class", [NumpyBackend, TorchBackend])
def test_the_users_choice_is_used_and_zero_leaves_torch_alone(backend_class, unchecked):
    problem, seen = torch_model()
    for threads, expected in ((3, 3), (0, BEFORE)):
        seen.counts.clear()
        _fit(problem, backend_class(threads=threads))
        assert set(seen.counts) == {expected}
        assert torch.get_num_threads() == BEFORE


def test_the_variables_choose_the_count(monkeypatch, unchecked):
    problem, seen = torch_model()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's count: left alone
    _fit(problem)
    assert set(seen.counts) == {BEFORE}
    monkeypatch.setenv("STOCHMIX_TORCH_THREADS", "3")  # ours wins over OMP_NUM_THREADS
    seen.counts.clear()
    _fit(problem)
    assert set(seen.counts) == {3}
    assert torch.get_num_threads() == BEFORE
    monkeypatch.setenv("STOCHMIX_TORCH_THREADS", "many")
    with pytest.raises(ValueError, match="STOCHMIX_TORCH_THREADS"):
        _fit(problem)
    assert torch.get_num_threads() == BEFORE


def test_resolve_threads_and_the_context():
    assert resolve_threads() == 1
    assert resolve_threads(4) == 4
    assert resolve_threads(np.int64(2)) == 2
    assert resolve_threads(0) is None
    assert resolve_threads(2, torch.device("meta")) is None  # not the CPU: nothing set
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("2", TypeError)):
        with pytest.raises(error, match="threads"):
            resolve_threads(bad)
    with torch_threads(3):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == BEFORE
    with pytest.raises(KeyError), torch_threads(1):
        assert torch.get_num_threads() == 1
        raise KeyError("inside")
    assert torch.get_num_threads() == BEFORE
    with torch_threads(None):
        assert torch.get_num_threads() == BEFORE


def test_a_run_without_torch_loaded_does_not_import_it():
    code = textwrap.dedent(
        """
        import sys
        import stochmix as sm
        from stochmix.algorithms import FedAvg
        from stochmix.participation import Full
        from stochmix.problems import Quadratic
        sm.run(FedAvg(0.1, 2), Quadratic.random(4, 3, seed=0), Full(4), 3, progress=False)
        print("torch" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
