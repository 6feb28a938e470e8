"""The run loop's parts on their own: the round planner, the checkpointer, and the one
normalisation of a seed that every part sees."""

import warnings

import numpy as np
import pytest

import stochmix as sm
from stochmix import run
from stochmix._fingerprint import seed_identity
from stochmix._validate import as_seed
from stochmix.algorithms import FOCUS, FedAvg
from stochmix.engine.backends.dispatch import execute
from stochmix.engine.backends.names import make_backend
from stochmix.engine.model.layout import Layout
from stochmix.engine.model.method import RunContext
from stochmix.engine.plan.planner import RoundPlanner
from stochmix.engine.runner import checkpoint as files
from stochmix.engine.runner.checkpointer import Checkpointer, CheckpointWarning, run_identity
from stochmix.engine.runner.recorder import Recorder
from stochmix.participation import Bernoulli, Full
from stochmix.problems import Quadratic

N, D = 8, 3


class Counting(FedAvg):
    """FedAvg that counts how often the planner asks it for a round's phases."""

    def __init__(self, *args, phase_key=True, template_key=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.built = 0
        self._phase, self._template = phase_key, template_key

    def round_phases(self, r, participants, ctx):
        self.built += 1
        return super().round_phases(r, participants, ctx)

    def phase_key(self, r, participants):
        return super().phase_key(r, participants) if self._phase else None

    def template_key(self, r, participants):
        return super().template_key(r, participants) if self._template else None


def _parts(method, n=N):
    back = make_backend("numpy", np.float64)
    layout = Layout(method.blocks(n))
    ctx = RunContext(layout, n, D, None)
    method.start(ctx)
    return back, ctx, back.asarray(layout.initial(np.ones(D)))


def _state_after(method, rounds_participants, planner_of=RoundPlanner):
    """The state after running ``rounds_participants`` through a planner and execute."""
    problem = Quadratic.random(N, D, seed=0)
    back, ctx, z = _parts(method)
    planner = planner_of(method, back, ctx)
    for r, participants in enumerate(rounds_participants):
        execute(planner.plan(r, participants), z, back, problem, method, ctx)
    return z, planner


# ------------------------------------------------------------------ the planner
def test_a_plan_is_kept_only_once_its_key_came_twice():
    method = Counting(0.1, 2, template_key=False)
    back, ctx, _ = _parts(method)
    planner = RoundPlanner(method, back, ctx)
    same = np.array([1, 4, 6])
    planner.plan(0, same)
    assert method.built == 1 and not planner.cache  # seen once: hashed, not kept
    planner.plan(1, same)
    assert method.built == 2 and len(planner.cache) == 1  # came twice: kept
    planner.plan(2, same)
    assert method.built == 2  # reused
    planner.plan(3, np.array([0, 2]))
    assert method.built == 3 and len(planner.cache) == 1


def test_without_a_phase_key_every_round_is_built():
    method = Counting(0.1, 2, phase_key=False, template_key=False)
    back, ctx, _ = _parts(method)
    planner = RoundPlanner(method, back, ctx)
    for r in range(3):
        planner.plan(r, np.array([1, 2]))
    assert method.built == 3 and not planner.cache


def test_large_rounds_are_not_cached(monkeypatch):
    from stochmix.engine.plan import planner as planning

    monkeypatch.setattr(planning, "CACHE_MAX_PARTICIPANTS", 2)
    method = Counting(0.1, 1, template_key=False)
    back, ctx, _ = _parts(method)
    planner = RoundPlanner(method, back, ctx)
    for r in range(3):
        planner.plan(r, np.array([1, 2, 3]))
    assert method.built == 3 and not planner.cache


def test_templates_are_checked_on_the_second_round_then_instantiated():
    method = Counting(0.1, 2, phase_key=False)
    back, ctx, _ = _parts(method)
    planner = RoundPlanner(method, back, ctx)
    planner.plan(0, np.array([0, 3]))
    (template,) = planner.templates.values()
    assert template is not False and not template.verified
    planner.plan(1, np.array([2, 5]))
    assert template.verified and method.built == 2
    planner.plan(2, np.array([1, 7]))
    assert method.built == 2  # instantiated from the template: no phases built


def test_one_participant_rounds_are_always_built_in_full():
    method = Counting(0.1, 2, phase_key=False)
    back, ctx, _ = _parts(method)
    planner = RoundPlanner(method, back, ctx)
    for r in range(3):
        planner.plan(r, np.array([r]))
    assert method.built == 3 and not planner.templates


class _NoReuse(RoundPlanner):
    def plan(self, r, participants):
        return self.build(r, participants)


@pytest.mark.parametrize("method", [FedAvg(0.1, 2), FOCUS(0.1, 2)], ids=["fedavg", "focus"])
def test_reused_plans_give_the_numbers_of_fresh_ones(method):
    rng = np.random.default_rng(1)
    rounds = [np.flatnonzero(rng.random(N) < 0.5) for _ in range(6)] * 3
    fresh, _ = _state_after(method, rounds, _NoReuse)
    reused, planner = _state_after(method, rounds)
    np.testing.assert_array_equal(reused, fresh)
    assert planner.cache or planner.templates


# ------------------------------------------------------------------ the checkpointer
def _identity(seed=0):
    method, problem, part = FedAvg(0.1, 1), Quadratic.random(N, D, seed=0), Full(N)
    back = make_backend("numpy", np.float64)
    return run_identity(method, problem, part, seed, back, np.zeros(D), ("distance",), "auto", 1)


def _recorded(rounds=4):
    method, problem = FedAvg(0.1, 1), Quadratic.random(N, D, seed=0)
    back, ctx, z = _parts(method)
    recorder = Recorder(problem, method, ctx, ("distance",), rounds, 1, N)
    for r in range(rounds + 1):
        recorder.count[r] = r
        recorder.measure(r, z, back)
    return method, problem, back, ctx, z, recorder


def test_the_checkpointer_refuses_what_it_cannot_use(tmp_path):
    with pytest.raises(TypeError, match="file path"):
        Checkpointer(3, _identity())
    with pytest.raises(ValueError, match="fixed seed"):
        Checkpointer(tmp_path / "c", _identity(seed=None))
    with pytest.raises(ValueError, match="folder"):
        Checkpointer(tmp_path, _identity())


def test_the_checkpointer_clears_orphans_and_loads_nothing_at_first(tmp_path):
    orphan = tmp_path / ".c.xyz.tmp"
    orphan.write_bytes(b"half")
    saver = Checkpointer(tmp_path / "c", _identity(), every=3)
    assert not orphan.exists() and saver.load(10) is None
    assert [d for d in range(1, 11) if saver.due(d, 10)] == [3, 6, 9, 10]


def test_save_load_restore_round_trip(tmp_path):
    method, problem, back, ctx, z, recorder = _recorded()
    saver = Checkpointer(tmp_path / "c", _identity())
    saver.save(4, z + 1.0, back, ctx, recorder, problem)
    saved = Checkpointer(tmp_path / "c", _identity()).load(6)
    assert saved["done"] == 4
    _, _, _, ctx2, _, fresh = _recorded(rounds=6)
    z2 = Checkpointer.restore(saved, back, ctx2, fresh, problem)
    np.testing.assert_array_equal(z2, z + 1.0)
    np.testing.assert_array_equal(fresh.count[:5], np.arange(5))
    np.testing.assert_array_equal(fresh.server[:4], recorder.server[:4])


def test_load_refuses_another_run_and_a_later_round(tmp_path):
    method, problem, back, ctx, z, recorder = _recorded()
    Checkpointer(tmp_path / "c", _identity()).save(4, z, back, ctx, recorder, problem)
    with pytest.raises(ValueError, match="different run.*seed"):
        Checkpointer(tmp_path / "c", _identity(seed=1)).load(10)
    with pytest.raises(ValueError, match="round 4, beyond rounds=3"):
        Checkpointer(tmp_path / "c", _identity()).load(3)


def test_a_failed_save_warns_once_and_goes_on(tmp_path, monkeypatch):
    method, problem, back, ctx, z, recorder = _recorded()
    saver = Checkpointer(tmp_path / "c", _identity())

    def full_disk(path, payload):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "save", full_disk)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saver.save(2, z, back, ctx, recorder, problem)
        saver.save(4, z, back, ctx, recorder, problem)
    assert [w.category for w in caught] == [CheckpointWarning]
    assert saver.failed == [2, 4] and not (tmp_path / "c").exists()


# ------------------------------------------------------------------ one seed
SEEDS = [3, np.int64(3), np.uint8(3), np.array(3)]


@pytest.mark.parametrize("seed", SEEDS, ids=["int", "int64", "uint8", "0-d array"])
def test_an_integer_seed_is_one_seed_however_it_is_written(seed, tmp_path):
    assert as_seed(seed) == 3 and type(as_seed(seed)) is int
    assert seed_identity(seed) == seed_identity(3) == 3
    assert _identity(seed) == _identity(3)
    problem, part = Quadratic.random(N, D, seed=0).noisy(0.1, seed=1), Bernoulli(0.5, N)
    res = run(FedAvg(0.1, 1), problem, part, 5, seed=seed, checkpoint=tmp_path / "c")
    ref = run(FedAvg(0.1, 1), problem, part, 5, seed=3)
    assert res.config["seed"] == ref.config["seed"] == 3
    np.testing.assert_array_equal(res.participants, ref.participants)
    np.testing.assert_array_equal(res.server, ref.server)
    saved = files.load(tmp_path / "c")
    assert saved["identity"]["seed"] == 3


def test_seed_objects_are_custom_and_identified_by_their_state():
    sequence = np.random.SeedSequence(5)
    assert seed_identity(sequence) == seed_identity(np.random.SeedSequence(5))
    assert seed_identity(sequence) != seed_identity(np.random.SeedSequence(6))
    assert seed_identity(np.random.PCG64(1)) != seed_identity(np.random.PCG64(2))
    assert seed_identity(np.random.default_rng(1)) != seed_identity(np.random.default_rng(2))
    res = run(FedAvg(0.1, 1), Quadratic.random(N, D, seed=0), Full(N), 2, seed=sequence)
    assert res.config["seed"] == "custom"
    assert (
        run(FedAvg(0.1, 1), Quadratic.random(N, D, seed=0), Full(N), 2, seed=None).config["seed"]
        is None
    )


# ------------------------------------------------------------------ the contracts
def test_the_library_meets_its_declared_contracts():
    import stochmix as sm
    from stochmix import protocols
    from stochmix.participation import Trace

    assert sm.ProblemLike is protocols.ProblemLike
    for problem in (Quadratic.random(N, D, seed=0), Quadratic.random(N, D, seed=0).noisy(0.1)):
        assert isinstance(problem, sm.ProblemLike)
    for part in (Full(N), Bernoulli(0.5, N), Trace(np.ones((3, N), dtype=bool))):
        assert isinstance(part, sm.ParticipationLike)
    assert isinstance(make_backend("numpy", np.float64), sm.BackendLike)
    assert not isinstance(Full(N), sm.ProblemLike)
    assert not isinstance(Quadratic.random(N, D, seed=0), sm.ParticipationLike)


class _Sphere:
    """A problem by contract alone: F_i(x) = 1/2 ||x - c_i||^2, no stochmix base class."""

    def __init__(self, centers):
        self.centers = centers
        self.n_clients, self.dim = centers.shape

    def gradients(self, clients, points):
        return points - self.centers[clients]


class _EveryOther:
    """Participation by contract alone: sorted participants, even rounds then odd."""

    n_clients, probabilities = N, None

    def participants(self, seed=None):
        r = 0
        while True:
            yield np.arange(r % 2, N, 2, dtype=np.int64)
            r += 1


def test_objects_that_only_meet_the_contracts_run():
    from stochmix.participation import Trace
    from stochmix.protocols import IndexParticipation

    centers = np.random.default_rng(0).standard_normal((N, D))
    part = _EveryOther()
    assert isinstance(part, IndexParticipation)
    res = run(FedAvg(0.5, 1), _Sphere(centers), part, 6)
    masks = np.zeros((6, N), dtype=bool)
    masks[0::2, 0::2] = masks[1::2, 1::2] = True
    ref = run(FedAvg(0.5, 1), Quadratic(centers, np.ones((N, D))), Trace(masks), 6)
    np.testing.assert_allclose(res.server, ref.server, rtol=0, atol=1e-14)
    assert res.distance is None and res.gradient_norm is None  # optional parts absent
    with pytest.raises(TypeError, match="participation must be a participation process"):
        run(FedAvg(0.5, 1), _Sphere(centers), object(), 2)


# ------------------------------------------------------------------ public extension points
def _scaled_sphere_class():
    """A Problem written from scratch with its own compiled gradient (public API only)."""
    numba = pytest.importorskip("numba")
    from stochmix.problems import Problem
    from stochmix.problems.kernels import fetch_none

    @numba.njit
    def kernel(data, c, x, out):
        centers, scale = data
        for j in range(x.shape[0]):
            out[j] = scale[c] * (x[j] - centers[c, j])

    class ScaledSphere(Problem):
        """F_i(x) = s_i/2 ||x - c_i||^2."""

        pure_gradients = True

        def __init__(self, centers, scale):
            super().__init__(*centers.shape)
            self.centers, self.scale = centers, scale
            self._compiled = {}

        def gradients(self, clients, points):
            return self.scale[clients, None] * (points - self.centers[clients])

        def objective(self, x):
            return float(0.5 * np.mean(self.scale * ((x - self.centers) ** 2).sum(axis=1)))

        def row_gradient(self, dtype):
            if dtype not in self._compiled:
                data = (self.centers.astype(dtype), self.scale.astype(dtype))
                self._compiled[dtype] = (kernel, fetch_none, data)
            return self._compiled[dtype]

    return ScaledSphere


def test_a_problem_of_ones_own_runs_compiled_through_the_public_api():
    from stochmix.engine.backends import NumpyBackend
    from stochmix.engine.plan.gradients import row_gradient

    ScaledSphere = _scaled_sphere_class()
    rng = np.random.default_rng(0)
    problem = ScaledSphere(rng.standard_normal((40, 5)), rng.uniform(0.5, 2.0, 40))
    assert row_gradient(problem, NumpyBackend(compiled=True), np.float64) is not None
    part = Bernoulli(0.4, 40)
    for method in (FedAvg(0.1, 3), FOCUS(0.05, 3)):
        fast = run(method, problem, part, 30, seed=2, compiled=True)
        slow = run(method, problem, part, 30, seed=2, compiled=False)
        np.testing.assert_allclose(fast.server, slow.server, rtol=0, atol=1e-12)
        assert np.abs(fast.server[-1]).max() > 0.01  # the runs moved


def test_gradients_overridden_without_declaring_them_pure_stay_off_the_compiled_path():
    ScaledSphere = _scaled_sphere_class()

    class Shifted(ScaledSphere):  # a gradients of its own, no declaration: taken as impure
        def gradients(self, clients, points):
            return super().gradients(clients, points) + 1.0

    rng = np.random.default_rng(0)
    problem = Shifted(rng.standard_normal((6, 2)), np.ones(6))
    with pytest.raises(ValueError, match="compiled=True: Shifted has no compiled gradient"):
        run(FedAvg(0.1, 1), problem, Full(6), 2, compiled=True)


def test_run_options_are_run_keywords_with_the_same_defaults():
    """run() lists its options once, as RunOptions' fields: the same names, the same
    defaults, in the same order, so that nothing can be added to one and not the other."""
    import dataclasses
    import inspect

    from stochmix.engine.runner.arguments import RunOptions

    keywords = [p for p in inspect.signature(run).parameters.values() if p.kind == p.KEYWORD_ONLY]
    fields = [f for f in dataclasses.fields(RunOptions) if f.name != "is_checked"]
    assert [p.name for p in keywords] == [f.name for f in fields]
    for p, f in zip(keywords, fields, strict=True):
        assert p.default is f.default or p.default == f.default, p.name


def test_run_options_are_checked_once_and_named_in_errors():
    import dataclasses

    from stochmix.engine.runner.arguments import RunOptions

    problem = Quadratic.random(5, 2, seed=0)
    with pytest.raises(TypeError, match=r"options that run\(\) does not take: \['round'\]"):
        RunOptions.of(round=3)
    rounds, options = RunOptions.of(seed=3, metrics=["distance"]).checked(
        FedAvg(0.1), problem, Full(5), 4
    )
    assert rounds == 4 and options.is_checked and options.metrics == ("distance",)
    assert options.x0.shape == (2,)
    with pytest.raises(ValueError, match="storage"):
        RunOptions.of(storage="sometimes").checked(FedAvg(0.1), problem, Full(5), 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 4  # type: ignore[misc]
    explained = sm.explain(FedAvg(0.1), problem, Full(5), 2, options=RunOptions.of(seed=3))
    assert explained.rounds[0].participants == 5


def test_a_dtype_the_backend_object_does_not_hold_is_refused():
    """``dtype`` applies to a backend given by name; with a backend object, a dtype other
    than the default that the object does not compute in would be ignored: refused, naming
    both (a float32 comparison ran in float64 unnoticed)."""
    from stochmix.engine import NumpyBackend

    problem = sm.problems.Quadratic.random(4, 2, seed=0)
    full = sm.participation.Full(4)
    with pytest.raises(ValueError, match="dtype=float32 but the NumpyBackend object computes"):
        run(FedAvg(0.1, 1), problem, full, 2, backend=NumpyBackend(), dtype=np.float32)
    held = run(FedAvg(0.1, 1), problem, full, 2, backend=NumpyBackend(np.float32),
               dtype=np.float32, progress=False)  # fmt: skip
    named = run(FedAvg(0.1, 1), problem, full, 2, dtype=np.float32, progress=False)
    np.testing.assert_array_equal(held.server, named.server)
