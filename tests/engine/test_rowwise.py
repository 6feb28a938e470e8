"""The row-wise path: runs of node-local phases compiled by Numba, one node at a time.

Checked on the whole state against the general sparse path (every phase through its sparse
rows) and against the NumPy programs, for every method and every problem with a compiled
gradient.
"""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

import stochmix.engine.codegen.rowwise as rowwise  # noqa: E402
from stochmix.algorithms import FOCUS, FedAvg  # noqa: E402
from stochmix.engine import run  # noqa: E402
from stochmix.engine.backends import dispatch  # noqa: E402
from stochmix.engine.codegen import cache as programs  # noqa: E402
from stochmix.engine.codegen.program import ProgramCache  # noqa: E402
from stochmix.engine.plan import gradients  # noqa: E402
from stochmix.participation import Bernoulli, Full, Trace, UniformSample  # noqa: E402
from stochmix.problems import LeastSquares, Logistic, Quadratic  # noqa: E402
from tests._backends import SparseOnly  # noqa: E402
from tests.engine.test_programs import Swirl, _methods  # noqa: E402


def states(method, problem, participation, rounds, seed=3, **options):
    out = []
    result = run(
        method,
        problem,
        participation,
        rounds,
        seed=seed,
        metrics=(),
        callback=lambda r, z, ctx: out.append(np.array(z)),
        **options,
    )
    return np.array(out), result


def _masks(n, rounds=20):
    rng = np.random.default_rng(1)
    masks = rng.random((rounds, n)) < np.linspace(0.05, 0.9, n)
    masks[3] = False  # a round nobody joins
    masks[4] = True  # everyone
    masks[5] = False
    masks[5, 7] = True  # one client
    return masks


def _spy(monkeypatch) -> list:
    """Record the programs that run (to see which path a round took)."""
    ran = []
    original = rowwise.RowwiseProgram.run

    def spy(self, *args, **kwargs):
        ran.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(rowwise.RowwiseProgram, "run", spy)
    return ran


@pytest.mark.parametrize("method", _methods(), ids=lambda m: m.name)
def test_row_wise_path_equals_the_sparse_path_on_the_whole_state(monkeypatch, method):
    ran = _spy(monkeypatch)
    problem = Quadratic.random(30, 3, seed=5)
    decentralized = method.name in ("GradientTracking", "PushPull")
    part = Full(30) if decentralized else Trace(_masks(30))
    fast, _ = states(method, problem, part, 20, compiled=True)
    slow, _ = states(method, problem, part, 20, backend=SparseOnly())
    assert ran  # the row-wise programs ran
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12 * (1 + np.abs(slow).max()))


@pytest.mark.parametrize(
    "problem",
    [
        Quadratic.random(30, 4, seed=1, diagonal=False),
        LeastSquares.random(30, 4, 5, seed=2),  # padded rows
        LeastSquares.random(30, 4, 5, seed=2, reg=0.3),
        LeastSquares.random(30, 4, (1, 9), seed=3, reg=0.5),
        Logistic.random(30, 4, (2, 12), seed=4),
        Logistic.random(30, 3, 8, n_classes=4, seed=5),
    ],
    ids=["full quadratic", "least squares", "ridge", "ragged ridge", "logistic", "softmax"],
)
@pytest.mark.parametrize(
    "method", [FedAvg(0.05, 3), FOCUS(0.002, 3), Swirl(0.01)], ids=lambda m: m.name
)
def test_compiled_gradients_of_every_problem(method, problem):
    fast, _ = states(method, problem, Trace(_masks(30)), 20, compiled=True)
    slow, _ = states(method, problem, Trace(_masks(30)), 20, backend=SparseOnly())
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-11 * (1 + np.abs(slow).max()))


def test_kernels_are_inlined_by_numba_into_every_program():
    import numba

    from stochmix._compiled import inlined
    from stochmix.problems import kernels

    fast = inlined(kernels.quadratic_diagonal)
    assert fast.targetoptions["inline"] == "always"
    assert fast.py_func is kernels.quadratic_diagonal.py_func

    def plain(data, c, x, out):
        out[:] = x

    assert inlined(plain) is plain  # not a Numba function: called as it is
    spread = numba.njit(parallel=True)(plain)
    assert inlined(spread) is spread  # parallel functions are not inlined


@pytest.mark.parametrize("steps", [5, 8])
def test_many_local_steps_each_call_the_kernel(steps):
    # programs with more than four kernel calls (LLVM stopped inlining them there)
    problem = Quadratic.random(30, 4, seed=2)
    for method in (FedAvg(0.05, steps), FOCUS(0.002, steps)):
        fast, _ = states(method, problem, Trace(_masks(30)), 20, compiled=True)
        slow, _ = states(method, problem, Trace(_masks(30)), 20, backend=SparseOnly())
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-11 * (1 + np.abs(slow).max()))
        assert np.abs(fast[-1]).max() > 0.01


def test_least_squares_in_gram_form():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((20, 200, 3))  # many rows per client: stored as A^T A, A^T b
    problem = LeastSquares(a, rng.standard_normal((20, 200)))
    assert problem._form == "gram"
    fast, _ = states(FOCUS(1e-4, 3), problem, Trace(_masks(20)), 20, compiled=True)
    slow, _ = states(FOCUS(1e-4, 3), problem, Trace(_masks(20)), 20, backend=SparseOnly())
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-11 * (1 + np.abs(slow).max()))


@pytest.mark.parametrize("method", [FedAvg(0.1, 3), FOCUS(0.002, 3), Swirl()], ids=lambda m: m.name)
def test_float32_agrees_with_the_numpy_programs(method):
    problem = Quadratic.random(30, 5, seed=3)
    fast, _ = states(method, problem, Trace(_masks(30)), 20, compiled=True, dtype=np.float32)
    slow, _ = states(method, problem, Trace(_masks(30)), 20, compiled=False, dtype=np.float32)
    assert fast.dtype == np.float32
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-5 * (1 + np.abs(slow).max()))


@pytest.mark.parametrize("method", [FedAvg(0.1, 3), FOCUS(0.002, 3), Swirl()], ids=lambda m: m.name)
def test_threads_give_the_serial_result_and_are_deterministic(monkeypatch, method):
    problem = Quadratic.random(300, 3, seed=4)
    part = Bernoulli(np.linspace(0.2, 0.9, 300))
    serial, _ = states(method, problem, part, 12, compiled=True)
    monkeypatch.setattr(dispatch, "WORKERS", 2)
    monkeypatch.setattr(rowwise, "PARALLEL_MIN_ENTRIES", 1)
    parts = []
    original = rowwise.RowwiseProgram._task  # what each part runs (the pool's or not)
    monkeypatch.setattr(
        rowwise.RowwiseProgram,
        "_task",
        lambda self, *a: parts.append(a[-1]) or original(self, *a),
    )
    threaded, _ = states(method, problem, part, 12, compiled=True)
    again, _ = states(method, problem, part, 12, compiled=True)
    assert set(parts) == {0, 1}  # both workers ran
    np.testing.assert_allclose(threaded, serial, rtol=0, atol=1e-12 * np.abs(serial).max())
    np.testing.assert_array_equal(threaded, again)


@pytest.mark.parametrize("method", [FedAvg(50.0, 3), FOCUS(50.0, 3)], ids=lambda m: m.name)
def test_divergence_is_caught_in_the_same_round(method):
    """NaN and Inf in rows the compiled loop writes stop the run where NumPy's would."""
    problem = Quadratic.random(30, 3, seed=5)
    with pytest.warns(RuntimeWarning):
        _, fast = states(method, problem, UniformSample(30, 10), 200, compiled=True)
    with pytest.warns(RuntimeWarning):
        _, slow = states(method, problem, UniformSample(30, 10), 200, compiled=False)
    assert fast.diverged and slow.diverged
    assert len(fast.server) == len(slow.server) < 200


def test_auto_compiles_long_runs_only(monkeypatch):
    ran = _spy(monkeypatch)
    problem = Quadratic.random(100, 10, seed=0)
    states(FedAvg(0.1, 2), problem, UniformSample(100, 50), 5)  # 2,500 entries in all
    assert not ran
    monkeypatch.setattr(gradients, "ROWWISE_MIN_WORK", 2_000)
    states(FedAvg(0.1, 2), problem, UniformSample(100, 50), 5)
    assert not ran  # 500 entries a round: under ROWWISE_MIN_ENTRIES
    monkeypatch.setattr(gradients, "ROWWISE_MIN_ENTRIES", 400)
    states(FedAvg(0.1, 2), problem, UniformSample(100, 50), 5)
    assert ran


def test_compiled_true_says_why_it_cannot_run():
    quadratic = Quadratic.random(20, 3, seed=0)
    with pytest.raises(ValueError, match="compiled=True: Noisy has no compiled gradient"):
        run(FedAvg(0.1, 2), quadratic.noisy(0.1), Full(20), 2, compiled=True)
    with pytest.raises(ValueError, match="compiled=True: Minibatch has no compiled gradient"):
        run(FedAvg(0.1, 2), LeastSquares.random(20, 3, 4).minibatch(2), Full(20), 2, compiled=True)
    with pytest.raises(ValueError, match="compiled must be True, False or \"auto\", got 'yes'"):
        run(FedAvg(0.1, 2), quadratic, Full(20), 2, compiled="yes")
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match='compiled=True needs backend="numpy"'):
        run(FedAvg(0.1, 2), quadratic, Full(20), 2, compiled=True, backend="torch")


def test_without_numba_auto_falls_back_and_true_says_how_to_install():
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np, stochmix as sm\n"
        "from stochmix.algorithms import FedAvg\n"
        "p = sm.problems.Quadratic.random(20, 3, seed=0)\n"
        "r = sm.run(FedAvg(0.1, 2), p, sm.participation.Full(20), 3)\n"
        "try:\n"
        "    sm.run(FedAvg(0.1, 2), p, sm.participation.Full(20), 3, compiled=True)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "compiled=True: Numba is not installed (pip install numba;" in out.stdout


def test_a_subclass_with_its_own_formula_is_not_given_the_parent_kernel(monkeypatch):
    """Quadratic's compiled gradient is Quadratic's formula: a subclass that changes the
    formula (here: doubles it) stays on the NumPy path, and compiled=True says why."""
    monkeypatch.setattr(gradients, "ROWWISE_MIN_WORK", 0)  # "auto" would compile anything
    monkeypatch.setattr(gradients, "ROWWISE_MIN_ENTRIES", 0)

    class Doubled(Quadratic):
        def gradient_formula(self, xp, data, idx, x):
            return 2.0 * super().gradient_formula(xp, data, idx, x)

    base = Quadratic.random(20, 3, seed=0)
    doubled = Doubled(base.centers, base.hessians)
    auto, _ = states(FedAvg(0.05, 2), doubled, Full(20), 4)
    slow, _ = states(FedAvg(0.05, 2), doubled, Full(20), 4, backend=SparseOnly())
    np.testing.assert_allclose(auto, slow, rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="Doubled has no compiled gradient"):
        run(FedAvg(0.05, 2), doubled, Full(20), 2, compiled=True)


_CACHED_RUN = """
import sys, numpy as np, stochmix as sm
import stochmix.engine.codegen.cache as programs
import stochmix.engine.plan.gradients as gradients
from stochmix.algorithms import FOCUS
gradients.ROWWISE_MIN_ENTRIES = 0  # rounds of 9 x 3 entries may take the row-wise path
compiled = sys.argv[2] if len(sys.argv) > 2 else True
p = sm.problems.Quadratic.random(40, 3, seed=1)
r = sm.run(FOCUS(0.002, 3), p, sm.participation.UniformSample(40, 9), 5, metrics=(),
           compiled=compiled)
hits = sum(sum(prog._function.stats.cache_hits.values()) for prog in programs._ROWWISE.values())
np.save(sys.argv[1], r.server)
print("hits", hits)
"""


def test_compiled_programs_are_cached_on_disk_between_processes(tmp_path):
    """The second process loads the first one's machine code (Numba cache hits) and
    computes the same numbers, bit for bit; an unwritable cache or "off" falls back to
    compiling in memory."""
    import os

    def run_in(env_cache, out, *mode):
        env = {**os.environ, "STOCHMIX_CACHE": str(env_cache)}
        done = subprocess.run(
            [sys.executable, "-c", _CACHED_RUN, str(out), *mode],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return int(done.stdout.split("hits")[-1]), np.load(out)

    cache = tmp_path / "cache"
    auto_hits, _ = run_in(cache, tmp_path / "a.npy", "auto")
    assert auto_hits == 0 and not list(cache.glob("programs/__pycache__/*.nbi"))  # too short
    first_hits, first = run_in(cache, tmp_path / "a.npy")
    second_hits, second = run_in(cache, tmp_path / "b.npy")
    assert first_hits == 0 and second_hits >= 1
    # "auto" does not take what the cache holds for a run this short: its numbers are the
    # NumPy programs', as before anything was compiled
    auto_hits, auto = run_in(cache, tmp_path / "d.npy", "auto")
    assert auto_hits == 0
    np.testing.assert_array_equal(auto, run_in("off", tmp_path / "e.npy", "auto")[1])
    assert list((cache / "programs").glob("stochmix_program_*.py"))
    np.testing.assert_array_equal(first, second)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    for setting in (blocked, "off"):
        hits, again = run_in(setting, tmp_path / "c.npy")
        assert hits == 0
        np.testing.assert_array_equal(again, first)


def test_auto_decides_by_the_run_alone_never_by_the_cache(monkeypatch):
    """The two paths agree to rounding, not bit for bit: "auto" must give the same numbers
    whether or not an earlier run compiled the program."""
    from stochmix.engine import make_backend

    backend = make_backend("numpy")
    problem = Quadratic.random(20, 3, seed=0)
    assert gradients.row_gradient(problem, backend, np.float64, 1e6, 1e5) is None  # short
    assert gradients.row_gradient(problem, backend, np.float64, 1e9, 1e5) is not None  # long
    assert gradients.row_gradient(problem, backend, np.float64, 1e9, 10.0) is None  # small rounds
    # a short run after the same structure ran compiled stays on the NumPy programs
    monkeypatch.setattr(gradients, "ROWWISE_MIN_ENTRIES", 0)
    big = Quadratic.random(200, 5, seed=1)
    method, part = FedAvg(0.05, 3), UniformSample(200, 100)
    short_before, _ = states(method, big, part, 5, compiled=False)
    states(method, big, part, 5, compiled=True)  # the program is compiled now
    ran = _spy(monkeypatch)
    short_after, _ = states(method, big, part, 5)
    assert not ran
    np.testing.assert_array_equal(short_after, short_before)


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize("method", [FedAvg(0.05, local_steps=3), FOCUS(0.05, local_steps=3)])
def test_blocked_loop_equals_the_node_loop_bit_for_bit(monkeypatch, method, block):
    problem = Quadratic.random(40, 5, seed=2)
    participation = Trace(_masks(40))
    monkeypatch.setattr(rowwise, "BLOCK", 0)
    monkeypatch.setattr(programs, "_ROWWISE", ProgramCache())
    nodes, _ = states(method, problem, participation, 20, compiled=True)
    monkeypatch.setattr(rowwise, "BLOCK", block)
    monkeypatch.setattr(programs, "_ROWWISE", ProgramCache())
    ran = _spy(monkeypatch)
    blocked, _ = states(method, problem, participation, 20, compiled=True)
    assert ran and all(program.block == block for program in ran)
    assert "for t0 in range(lo, hi" in ran[0].source
    np.testing.assert_array_equal(blocked, nodes)


def _zoo():
    """The rest of the zoo whose rounds run row-wise programs (every client or node, on
    an undirected ring where a method mixes)."""
    import networkx as nx

    from stochmix.algorithms import (
        D2,
        KGT,
        NIDS,
        ExactDiffusion,
        FedAdagrad,
        FedAdam,
        FedAvgM,
        FedDyn,
        FedProx,
        FedVARP,
        FedYogi,
        Scaffnew,
    )
    from stochmix.mixing.sequences import StaticSequence

    ring = StaticSequence(nx.cycle_graph(30))
    every = [Scaffnew(0.05, 0.3), KGT(0.05, ring, 2), NIDS(0.05, ring), D2(0.05, ring)]
    every.append(ExactDiffusion(0.05, ring))
    some = [FedAvgM(0.1, 2), FedDyn(0.05, 2), FedProx(0.1, 0.1, 2), FedAdam(0.1, 2)]
    some += [FedYogi(0.1, 2), FedAdagrad(0.1, 2)]
    some.append(FedVARP(0.1, 2, probabilities=np.linspace(0.1, 0.9, 30)))
    return [(m, True) for m in every] + [(m, False) for m in some]


@pytest.mark.parametrize(
    ("method", "everyone"),
    [(m, m.name in ("GradientTracking", "PushPull")) for m in _methods()] + _zoo(),
    ids=lambda m: getattr(m, "name", ""),
)
@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.float32, marks=pytest.mark.slow)])
def test_lowered_programs_equal_one_loop_per_step_bit_for_bit(monkeypatch, method, everyone, dtype):
    # the lowering (gradients kept in place, copies forwarded, steps fused) changes no
    # entry's arithmetic: every method's rounds give the same bits as the steps one by
    # one, in float32 too (a fused loop rounds each step's float64 value where one loop
    # per step stores it)
    problem = Quadratic.random(30, 3, seed=5)
    part = Full(30) if everyone else Trace(_masks(30))
    found = {}
    for lowered in (False, True):
        monkeypatch.setattr(rowwise, "LOWERED", lowered)
        monkeypatch.setattr(programs, "_ROWWISE", ProgramCache())
        ran = _spy(monkeypatch)
        found[lowered], _ = states(method, problem, part, 20, compiled=True, dtype=dtype)
        assert ran and all(program.lowered == lowered for program in ran)
    assert found[True].dtype == dtype
    np.testing.assert_array_equal(found[True], found[False])
    assert np.isfinite(found[True]).all() and np.abs(found[True][-1]).max() > 0


@pytest.mark.parametrize("method", [FedAvg(0.05, 3), FOCUS(0.002, 3)], ids=lambda m: m.name)
def test_lowered_programs_forward_copies_and_fuse_steps(monkeypatch, method):
    # what the lowering is for, seen in the code: the snapshot row and the gradients read
    # where they are (no copies), fewer loops than steps
    ran = _spy(monkeypatch)
    states(method, Quadratic.random(30, 3, seed=5), Trace(_masks(30)), 5, compiled=True)
    lowered = ran[-1]
    plain = rowwise.RowwiseProgram(
        lowered.forms,
        lowered.model,
        lowered.tail_length,
        lowered.gradient,
        lowered=False,
        zero=lowered.zero,
        scratch=lowered.scratch,
    )
    assert lowered.source.count("for j in") < plain.source.count("for j in")
    assert "grad(gd, client, S0, " in lowered.source
    assert "grad(gd, client, S0, " not in plain.source
    assert "= g[j]" not in lowered.source
    if method.name == "FOCUS":  # it keeps every gradient
        assert "= g[j]" in plain.source
