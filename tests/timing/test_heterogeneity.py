"""System heterogeneity: uneven local steps, FedNova, the virtual clock with deadlines,
FedBuff and FedAsync on the arrival schedule, each against its per-client reference
(tests/reference/fednova.py, tests/reference/asynchronous.py) and its paper's claim."""

from itertools import islice

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import (
    FOCUS,
    SCAFFOLD,
    FedAsync,
    FedAvg,
    FedBuff,
    FedDyn,
    FedNova,
    FedProx,
    RandomSteps,
    Staleness,
)
from stochmix.timing import Clock, Constant, Exponential, Pareto, TimeModel
from stochmix.timing.arrivals import arrival_records
from tests.reference import asynchronous as ref_async
from tests.reference.fednova import fedavg_uneven, fednova, surrogate_minimizer

N, D = 9, 3


def _problem(seed=0):
    return sm.problems.Quadratic.random(N, D, seed=seed)


def _masks_and_steps(seed, rounds, empty=(2,)):
    """Random masks (some rounds empty) and K_i per round, as the references take them."""
    rng = np.random.default_rng(seed)
    masks = rng.random((rounds, N)) < 0.5
    for r in empty:
        masks[r] = False
    steps = rng.integers(1, 5, size=(rounds, N))
    return masks, steps


class _StepTable:
    """A LocalSteps rule that replays a table of K_i per round (the references' input)."""

    random = True

    def __init__(self, table):
        self.table = np.asarray(table, np.int64)

    def counts(self, r, participants, seed):
        return self.table[r][participants]

    def check_clients(self, n_clients):
        pass

    def mean(self):
        return float(self.table.mean())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("compiled", [False, True])
def test_uneven_fedavg_and_fednova_match_their_references(seed, compiled):
    problem = _problem(seed)
    masks, steps = _masks_and_steps(seed, 12)
    lr = 0.3 / problem.smoothness
    trace = sm.participation.Trace(masks)
    for method, reference in ((FedAvg, fedavg_uneven), (FedNova, fednova)):
        result = sm.run(
            method(lr, _StepTable(steps), server_lr=0.8), problem, trace, 12,
            progress=False, compiled=compiled,
        )  # fmt: skip
        expected = reference(problem, masks, steps, np.zeros(D), lr, server_lr=0.8)
        assert np.abs(result.server - expected).max() < 1e-12
        counted = [int(s[m].sum()) for m, s in zip(masks, steps, strict=True)]
        assert result.gradients[1:].tolist() == counted


def test_client_step_array_and_random_steps_are_what_each_client_takes():
    problem = _problem()
    masks, _ = _masks_and_steps(3, 8, empty=())
    lr = 0.2 / problem.smoothness
    k = np.arange(1, N + 1)
    result = sm.run(FedAvg(lr, k), problem, sm.participation.Trace(masks), 8, progress=False)
    expected = fedavg_uneven(problem, masks, [k] * 8, np.zeros(D), lr)
    assert np.abs(result.server - expected).max() < 1e-12
    rule = RandomSteps.uniform(1, 4)
    draws = [rule.counts(r, np.arange(N), 7) for r in range(8)]
    assert {int(v) for d in draws for v in d} == {1, 2, 3, 4}
    result = sm.run(FedAvg(lr, rule), problem, sm.participation.Full(N), 8, seed=7, progress=False)
    expected = fedavg_uneven(problem, [np.ones(N, bool)] * 8, draws, np.zeros(D), lr)
    assert np.abs(result.server - expected).max() < 1e-12


@pytest.mark.parametrize(
    "method",
    [
        lambda k: FOCUS(0.01, k),
        lambda k: SCAFFOLD(0.01, k),
        lambda k: FedProx(0.01, 0.1, k),
        lambda k: FedDyn(0.01, k),
    ],
    ids=["FOCUS", "SCAFFOLD", "FedProx", "FedDyn"],
)
def test_equal_counts_given_as_an_array_give_the_int_numbers(method):
    problem = _problem()
    process = sm.participation.Bernoulli(np.full(N, 0.6))
    as_int = sm.run(method(3), problem, process, 15, progress=False)
    as_array = sm.run(method(np.full(N, 3)), problem, process, 15, progress=False)
    np.testing.assert_array_equal(as_int.server, as_array.server)
    uneven = sm.run(method(np.arange(1, N + 1) % 4 + 1), problem, process, 15, progress=False)
    assert np.isfinite(uneven.server).all()
    assert not np.allclose(uneven.server[-1], as_int.server[-1])


def test_fedavg_goes_to_the_surrogate_and_fednova_to_the_true_minimiser(unchecked):
    """Wang et al. (2020): with heterogeneous K_i (full participation, quadratic clients,
    small steps) FedAvg minimises sum_i K_i f_i / sum_i K_i; FedNova sum_i f_i."""
    problem = _problem(4)
    k = np.array([1, 8, 1, 8, 2, 12, 3, 1, 6])
    H, b = problem.hessians_and_linear_terms()
    surrogate = surrogate_minimizer(H, b, k.astype(float))
    x_star = problem.x_star
    gap = np.linalg.norm(surrogate - x_star)
    full = sm.participation.Full(N)
    errors = {}
    for lr in (0.004, 0.002):
        step = lr / problem.smoothness
        avg = sm.run(FedAvg(step, k), problem, full, 4000, progress=False, metrics=())
        nova = sm.run(FedNova(step, k), problem, full, 4000, progress=False, metrics=())
        errors[lr] = (
            np.linalg.norm(avg.server[-1] - surrogate),
            np.linalg.norm(nova.server[-1] - x_star),
        )
        assert errors[lr][0] < 0.05 * gap  # FedAvg: at the surrogate's minimiser
        assert errors[lr][1] < 0.05 * gap  # FedNova: at the true one
        assert np.linalg.norm(avg.server[-1] - x_star) > 0.9 * gap
    # both errors are O(lr): halving the step halves them
    for j in (0, 1):
        assert errors[0.002][j] < 0.6 * errors[0.004][j]


def test_bad_local_steps_are_refused_with_the_argument():
    problem = _problem()
    with pytest.raises(ValueError, match=r"local_steps\[2\] = 0"):
        FedAvg(0.1, [1, 1, 0, 1, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="one count per client"):
        sm.run(FedAvg(0.1, [1, 2, 3]), problem, sm.participation.Full(N), 2, progress=False)
    with pytest.raises(TypeError, match="local_steps"):
        FedAvg(0.1, "three")
    with pytest.raises(ValueError, match="local_steps"):
        FedAvg(0.1, 0)


# ------------------------------------------------------------------ the clock
def test_round_time_is_the_slowest_participant_and_the_deadline_drops_the_late():
    clock = Clock(TimeModel(compute=Constant(1.0), upload=Constant(0.5)))
    record = clock.round(0, np.array([1, 4]), np.array([2, 5]), 0, 10.0)
    assert record.time == 10.0 + 5.5 and record.nodes.tolist() == [1, 4]
    cut = Clock(TimeModel(compute=1.0, upload=0.5), deadline=3.0)
    record = cut.round(0, np.array([1, 4, 6]), np.array([2, 5, 1]), 0, 0.0)
    assert record.nodes.tolist() == [1, 6] and record.time == 3.0
    assert record.steps.tolist() == [2, 1]
    partial = Clock(TimeModel(compute=1.0, upload=0.5), deadline=3.0, partial_work=True)
    record = partial.round(0, np.array([1, 4, 6]), np.array([2, 5, 1]), 0, 0.0)
    assert record.nodes.tolist() == [1, 4, 6] and record.steps.tolist() == [2, 2, 1]
    everyone = cut.round(0, np.array([2]), 1, 0, 0.0)
    assert everyone.time == 1.5 and everyone.steps is None


def test_a_deadline_run_records_time_drops_and_counts_the_work_done():
    problem = _problem()
    clock = Clock(TimeModel(compute=Exponential(1.0), upload=0.2), deadline=2.5)
    process = sm.participation.UniformSample(N, 5)
    result = sm.run(FedAvg(0.05, 3), problem, process, 30, clock=clock, progress=False)
    assert np.all(np.diff(result.time) > 0) and np.all(np.diff(result.time) <= 2.5)
    assert result.participants[1:].min() < 5  # someone missed the deadline
    assert (result.gradients[1:] == 3 * result.participants[1:]).all()
    again = sm.run(FedAvg(0.05, 3), problem, process, 30, clock=clock, progress=False)
    np.testing.assert_array_equal(result.time, again.time)
    partial = Clock(clock.time_model, deadline=2.5, partial_work=True)
    more = sm.run(FedAvg(0.05, 3), problem, process, 30, clock=partial, progress=False)
    assert more.participants[1:].sum() > result.participants[1:].sum()
    assert (more.gradients[1:] <= 3 * more.participants[1:]).all()
    assert result.axis("time") is not None


def test_impossible_deadlines_and_bad_delays_are_refused():
    with pytest.raises(ValueError, match="deadline=1.0 is below the fastest"):
        Clock(TimeModel(compute=1.0, upload=0.5), deadline=1.0)
    with pytest.raises(ValueError, match="value"):
        Constant(-1.0)
    with pytest.raises(TypeError, match="compute"):
        TimeModel(compute="slow")
    with pytest.raises(ValueError, match="speeds"):
        TimeModel(speeds=[1.0, -2.0])
    with pytest.raises(ValueError, match="speeds must hold one factor per client"):
        sm.run(FedAvg(0.1), _problem(), sm.participation.Full(N), 1,
               clock=Clock(TimeModel(speeds=[1.0, 2.0])), progress=False)  # fmt: skip
    with pytest.warns(RuntimeWarning, match="no client met deadline"):
        sm.run(FedAvg(0.1), _problem(), sm.participation.Full(N), 3,
               clock=Clock(TimeModel(compute=Exponential(100.0)), deadline=1e-9),
               progress=False)  # fmt: skip


# ------------------------------------------------------------------ asynchronous
def _replay(method, problem, model, rounds, seed, local_steps=2):
    """The engine's run and the per-task reference on the schedule's launches."""
    result = sm.run(
        method, problem, sm.participation.Full(N), rounds, clock=Clock(model), seed=seed,
        progress=False, metrics=("distance",),
    )  # fmt: skip
    log: list = []
    records = list(
        islice(
            arrival_records(N, method.concurrency, method.buffer, model, local_steps, seed,
                            log=log),
            rounds,
        )
    )  # fmt: skip
    return result, records, [c for c, _ in log], [t for _, t in log]


@pytest.mark.parametrize(
    "buffer, concurrency, model",
    [
        (3, 3, TimeModel()),
        (2, 5, TimeModel(compute=Pareto(1.5, 1.0))),
        (1, 4, TimeModel(compute=Exponential(1.0), upload=Exponential(0.3))),
    ],
)
def test_fedbuff_matches_the_event_driven_reference(buffer, concurrency, model):
    problem = _problem(2)
    lr = 0.1 / problem.smoothness
    method = FedBuff(lr, 2, server_lr=0.9, buffer=buffer, concurrency=concurrency)
    result, records, launches, durations = _replay(method, problem, model, 25, 5)
    models, times = ref_async.fedbuff(
        problem, np.zeros(D), lr, 2, 0.9, buffer, concurrency, launches, durations, 25,
        staleness=method.staleness,
    )  # fmt: skip
    assert np.abs(models - result.server).max() < 1e-12
    np.testing.assert_array_equal(times, result.time)
    for record in records:  # clients in flight or buffered are never launched again
        assert np.unique(record.nodes).size == record.nodes.size


def test_fedasync_matches_the_event_driven_reference():
    problem = _problem(3)
    lr = 0.1 / problem.smoothness
    model = TimeModel(compute=Pareto(1.2, 0.5))
    method = FedAsync(lr, 2, alpha=0.6, concurrency=4, staleness=Staleness("hinge", 0.5, 1))
    result, _, launches, durations = _replay(method, problem, model, 40, 1)
    models, times = ref_async.fedasync(problem, np.zeros(D), lr, 2, 0.6, 4, launches,
                                       durations, 40, staleness=method.staleness)  # fmt: skip
    assert np.abs(models - result.server).max() < 1e-12
    np.testing.assert_array_equal(times, result.time)


def test_fedbuff_with_equal_clients_and_m_equal_c_is_synchronous_fedavg():
    """With M = C and every client equally fast, FedBuff is FedAvg on the same cohorts."""
    problem = _problem(5)
    lr, C = 0.2 / problem.smoothness, 4
    result, records, launches, _ = _replay(FedBuff(lr, 3, 0.7, C, C), problem, TimeModel(), 20,
                                           9, local_steps=3)  # fmt: skip
    cohorts = [np.sort(launches[r * C : (r + 1) * C]) for r in range(20)]
    assert all(np.array_equal(c, rec.nodes) for c, rec in zip(cohorts, records, strict=True))
    masks = np.zeros((20, N), bool)
    for r, c in enumerate(cohorts):
        masks[r, c] = True
    fedavg = sm.run(FedAvg(lr, 3, server_lr=0.7), problem, sm.participation.Trace(masks), 20,
                    progress=False)  # fmt: skip
    assert np.abs(fedavg.server - result.server).max() < 1e-12
    np.testing.assert_array_equal(result.time, np.arange(21) * 3.0)


def test_asynchronous_arguments_are_checked_before_any_work():
    with pytest.raises(ValueError, match="buffer must be <= concurrency"):
        FedBuff(0.1, buffer=5, concurrency=3)
    with pytest.raises(ValueError, match=r"staleness must map"):
        FedBuff(0.1, staleness=lambda tau: 2.0 + 0 * tau)
    with pytest.raises(ValueError, match="staleness"):
        FedAsync(0.1, staleness="linear")
    with pytest.raises(ValueError, match="alpha"):
        FedAsync(0.1, alpha=1.5)
    problem = _problem()
    with pytest.raises(ValueError, match="concurrency \\+ buffer"):
        sm.run(FedBuff(0.1, buffer=5, concurrency=6), problem, sm.participation.Full(N), 1,
               progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="participation must make every client available"):
        sm.run(FedBuff(0.1, buffer=2, concurrency=3), problem,
               sm.participation.UniformSample(N, 3), 1, progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="deadline must be None"):
        sm.run(FedBuff(0.1, buffer=2, concurrency=3), problem, sm.participation.Full(N), 1,
               clock=Clock(TimeModel(), deadline=5.0), progress=False)  # fmt: skip


# ------------------------------------------------------------------ lost uploads
def _drops(seed, p=0.3):
    process = sm.participation.UplinkDrops(sm.participation.Bernoulli(np.full(N, 0.6)), p)
    records = list(islice(process.activations(seed), 30))
    worked = np.zeros((30, N), bool)
    arrived = np.zeros((30, N), bool)
    for r, record in enumerate(records):
        worked[r, record.nodes] = True
        arrived[r, record.received] = True
    return process, worked, arrived


def test_a_lost_upload_leaves_the_server_as_a_non_participant_would():
    from tests.reference.fedavg import fedavg
    from tests.reference.mifa import mifa

    problem = _problem(6)
    lr = 0.2 / problem.smoothness
    process, worked, arrived = _drops(3)
    assert (worked & ~arrived).any() and (arrived <= worked).all()
    result = sm.run(FedAvg(lr, 2), problem, process, 30, seed=3, progress=False)
    expected = fedavg(problem, arrived, np.zeros(D), lr, 2)
    assert np.abs(result.server - expected).max() < 1e-12
    assert result.gradients[1:].tolist() == (2 * worked.sum(1)).tolist()  # all worked
    memory = sm.run(sm.algorithms.MIFA(lr, 2), problem, process, 30, seed=3, progress=False)
    expected = mifa(problem, arrived, np.zeros(D), lr, 2)
    assert np.abs(memory.server - expected).max() < 1e-12


@pytest.mark.slow
def test_focus_with_lost_uploads_matches_its_reference_and_stays_exact():
    """Ying et al.'s FOCUS keeps its exactness when uploads are lost after the local work
    (each arrives with positive probability): the lost tracker stays with its client."""
    from tests.reference.focus import focus

    problem = _problem(7)
    lr = 0.05 / problem.smoothness
    process, worked, arrived = _drops(4)
    result = sm.run(FOCUS(lr, 3), problem, process, 30, seed=4, progress=False)
    expected = focus(problem, worked, np.zeros(D), lr, 3, received=arrived)
    assert np.abs(result.server - expected).max() < 1e-10
    long = sm.run(FOCUS(0.2 / problem.smoothness, 3), problem, process, 1500, seed=4,
                  progress=False)  # fmt: skip
    assert long.relative_error[-1] < 1e-12


def test_uplink_drops_are_checked():
    with pytest.raises(ValueError, match="p must be < 1"):
        sm.participation.UplinkDrops(sm.participation.Full(N), 1.0)
    with pytest.raises(TypeError, match="process"):
        sm.participation.UplinkDrops("full", 0.1)


# ------------------------------------------------------------------ compressed uplinks
@pytest.mark.parametrize("error_feedback", [False, True])
def test_compressed_uplink_matches_its_reference(error_feedback):
    from tests.reference.uplink import fedavg_uplink

    problem = sm.problems.Quadratic.random(N, 8, seed=8)
    lr = 0.3 / problem.smoothness
    masks, _ = _masks_and_steps(9, 20)
    method = sm.algorithms.CompressedUplink(FedAvg(lr, 2), "top_k:3", error_feedback)
    result = sm.run(method, problem, sm.participation.Trace(masks), 20, progress=False)
    expected = fedavg_uplink(problem, masks, np.zeros(8), lr, 2, 3, error_feedback)
    assert np.abs(result.server - expected).max() < 1e-12


@pytest.mark.slow
def test_ef21_converges_where_plain_top_k_stalls():
    """Richtárik et al. (2021): with a contractive compressor (top-k), EF21 keeps the
    method's fixed point (here FedAvg with one local step, full participation: gradient
    descent, whose fixed point is x*), where compressing the updates alone stalls."""
    problem = sm.problems.Quadratic.random(10, 20, seed=1)
    lr = 0.5 / problem.smoothness
    full = sm.participation.Full(10)
    errors = {}
    for feedback in (False, True):
        method = sm.algorithms.CompressedUplink(FedAvg(lr, 1), "top_k:2", feedback)
        errors[feedback] = sm.run(method, problem, full, 2000, progress=False).relative_error
    assert errors[True][-1] < 1e-12
    assert errors[False][-1] > 0.1  # stalls far from x*
    noisy = sm.algorithms.CompressedUplink(FedAvg(lr, 1), "none", noise=0.01)
    floor = sm.run(noisy, problem, full, 2000, progress=False).relative_error[-1]
    assert 1e-4 < floor < 0.2  # additive noise: a noise floor


def test_compressed_uplinks_wrap_the_delta_uploaders_only():
    with pytest.raises(TypeError, match="whose upload is known"):
        sm.algorithms.CompressedUplink(FOCUS(0.1), "top_k:2")
    with pytest.raises(ValueError, match="noise"):
        sm.algorithms.CompressedUplink(FedAvg(0.1), "top_k:2", noise=-1.0)
    problem = _problem()
    process = sm.participation.UplinkDrops(sm.participation.Bernoulli(np.full(N, 0.7)), 0.2)
    for method in (FedNova(0.05, [1, 2, 3, 1, 2, 3, 1, 2, 3]), sm.algorithms.MIFA(0.05, 2),
                   sm.algorithms.FedAdam(0.05, 2), FedProx(0.05, 0.1, 2),
                   FedProx(0.05, 0.1, solver="exact")):  # fmt: skip
        wrapped = sm.algorithms.CompressedUplink(method, "top_k:1", True, noise=1e-3)
        result = sm.run(wrapped, problem, process, 20, progress=False)
        plain = sm.run(method, problem, process, 20, progress=False)
        assert np.isfinite(result.server).all()
        assert np.abs(result.server[-1] - plain.server[-1]).max() > 1e-6  # it compressed


def test_on_off_availability_follows_the_continuous_time_law():
    """A client seen on at t is on at t + h with probability
    pi + (1 - pi) exp(-(1/mean_on + 1/mean_off) h); the stationary fraction is pi."""
    from stochmix.timing import OnOff

    law = OnOff(mean_on=2.0, mean_off=1.0)
    tracker = law.tracker(40_000)
    rng = np.random.default_rng(0)
    everyone = np.arange(40_000)
    first = tracker.available(everyone, 0.0, rng)
    second = tracker.available(everyone, 0.5, rng)
    pi = law.stationary
    assert abs(first.mean() - pi) < 4 * np.sqrt(pi * (1 - pi) / 40_000)
    stay = pi + (1 - pi) * np.exp(-(0.5 + 1.0) * 0.5)
    measured = second[first].mean()
    assert abs(measured - stay) < 4 * np.sqrt(stay * (1 - stay) / first.sum())
    assert abs(measured - pi) > 0.1  # the law remembers over short gaps


def test_a_clock_with_availability_keeps_the_clients_that_are_on():
    from stochmix.timing import OnOff

    clock = Clock(TimeModel(compute=1.0), availability=OnOff(5.0, 5.0))
    result = sm.run(FedAvg(0.05, 2), _problem(), sm.participation.Full(N), 40, clock=clock,
                    progress=False)  # fmt: skip
    counts = result.participants[1:]
    assert counts.min() < N and 0.2 * N < counts.mean() < 0.8 * N
    with pytest.raises(ValueError, match="availability must be None"):
        sm.run(FedBuff(0.1, buffer=2, concurrency=3), _problem(), sm.participation.Full(N), 1,
               clock=clock, progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="mean_on"):
        OnOff(0.0, 1.0)


def test_uneven_rounds_are_templated_per_group_and_give_the_same_bits(monkeypatch):
    from stochmix.engine.plan.template import RoundTemplate

    answers, original = [], RoundTemplate.matches

    def matches(self, plan, participants, bases=(), *counts):
        answers.append(original(self, plan, participants, bases, *counts))
        return answers[-1]

    monkeypatch.setattr(RoundTemplate, "matches", matches)
    problem = sm.problems.Quadratic.random(400, 3, seed=1)
    process = sm.participation.UniformSample(400, 120)
    method = FedAvg(0.1 / problem.smoothness, RandomSteps.uniform(1, 4))

    class NoTemplate(FedAvg):
        def template_key(self, r, participants):
            return None

    plain = NoTemplate.__new__(NoTemplate)
    plain.__dict__.update(method.__dict__)
    templated = sm.run(method, problem, process, 12, progress=False)
    built = sm.run(plain, problem, process, 12, progress=False)
    np.testing.assert_array_equal(templated.server, built.server)
    np.testing.assert_array_equal(templated.gradients, built.gradients)
    np.testing.assert_array_equal(templated.messages, built.messages)
    assert answers and all(answers)


def test_review_fixes_lost_uploads_and_clocks_are_refused_or_counted():
    problem = _problem()
    lossy = sm.participation.UplinkDrops(sm.participation.Full(N), 0.5)
    with pytest.raises(ValueError, match="loses uploads"):
        sm.run(FedBuff(0.1, buffer=2, concurrency=3), problem, lossy, 2, progress=False)
    # every upload of a round lost: FedAvgM skips the round as if nobody had joined
    one = sm.participation.UplinkDrops(sm.participation.UniformSample(N, 1), 0.5)
    records = list(islice(one.activations(3), 25))
    arrived = np.zeros((25, N), bool)
    for r, record in enumerate(records):
        arrived[r, record.received] = True
    assert (~arrived.any(1)).any()
    for method in (sm.algorithms.FedAvgM(0.05, 2),
                   sm.algorithms.FedStale(0.05, 2, probabilities=np.full(N, 0.2))):  # fmt: skip
        lost = sm.run(method, problem, one, 25, seed=3, progress=False)
        seen = sm.run(method, problem, sm.participation.Trace(arrived), 25, progress=False)
        assert np.abs(lost.server - seen.server).max() < 1e-12
    # FedAsync with every client training at once (C + M = N + 1)
    result = sm.run(FedAsync(0.05, 1, concurrency=N), problem, sm.participation.Full(N), 20,
                    progress=False)  # fmt: skip
    assert np.isfinite(result.server).all()
    with pytest.raises(ValueError, match="n_clients \\+ 1"):
        next(arrival_records(6, 5, 3, TimeModel(), 1, 0))
    # staleness functions written for one number, and ones that cannot take arrays
    FedBuff(0.1, staleness=lambda tau: 1.0)
    import math

    with pytest.raises(TypeError, match="staleness must take an array"):
        FedBuff(0.1, staleness=lambda tau: 1 / math.sqrt(1 + tau))
    # a clock times Scaffnew's rounds by their local steps
    scaffnew = sm.algorithms.Scaffnew(0.05, p=0.3, seed=2)
    timed = sm.run(scaffnew, problem, sm.participation.Full(N), 10, progress=False,
                   clock=Clock(TimeModel(compute=1.0)))  # fmt: skip
    steps = [scaffnew.local_steps(r) for r in range(10)]
    np.testing.assert_array_equal(np.diff(timed.time), steps)


def test_a_checkpoint_resumes_only_under_the_same_clock(tmp_path):
    problem = _problem()
    process = sm.participation.UniformSample(N, 4)
    clock = Clock(TimeModel(compute=Exponential(1.0)), deadline=1.0)
    path = tmp_path / "run.ckpt"
    sm.run(FedAvg(0.05, 2), problem, process, 10, clock=clock, checkpoint=path,
           checkpoint_every=5, progress=False)  # fmt: skip
    whole = sm.run(FedAvg(0.05, 2), problem, process, 20, clock=clock, progress=False)
    resumed = sm.run(FedAvg(0.05, 2), problem, process, 20, clock=clock, checkpoint=path,
                     checkpoint_every=5, progress=False)  # fmt: skip
    assert resumed.config["resumed_from"] == 10
    np.testing.assert_array_equal(resumed.server, whole.server)
    np.testing.assert_array_equal(resumed.time, whole.time)
    with pytest.raises(Exception, match="checkpoint"):
        sm.run(FedAvg(0.05, 2), problem, process, 20, checkpoint=path, checkpoint_every=5,
               progress=False)  # fmt: skip
