"""Per-round metrics: closed forms where they exist, a schedule for those that need a pass
over every client, and a Result that reads only the rounds with a value."""

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import FOCUS, FedAvg, GradientTracking
from stochmix.engine.runner.recorder import auto_interval
from stochmix.mixing import OnePeerExponential
from stochmix.participation import Bernoulli, Full, UniformSample
from stochmix.problems import LeastSquares, Logistic, Quadratic

CLOSED_FORM = {
    "diagonal quadratic": lambda: Quadratic.random(30, 6, seed=1),
    "full quadratic": lambda: Quadratic.random(30, 6, diagonal=False, seed=2),
    "least squares": lambda: LeastSquares.random(30, 6, rows_per_client=(2, 9), seed=3),
    "ridge, Gram form": lambda: LeastSquares.random(30, 6, 20, reg=0.3, seed=4, form="gram"),
}


@pytest.mark.parametrize("make", CLOSED_FORM.values(), ids=CLOSED_FORM)
def test_closed_forms_equal_the_passes_over_every_client(make):
    problem = make()
    x = np.random.default_rng(0).standard_normal(problem.dim)
    every = np.arange(problem.n_clients)
    points = np.tile(x, (problem.n_clients, 1))
    gap = problem.objective(x) - problem.f_star
    assert problem.objective_gap(x) == pytest.approx(gap, rel=1e-12)
    np.testing.assert_allclose(
        problem.gradient(x), problem.gradients(every, points).mean(axis=0), rtol=1e-11, atol=1e-12
    )
    assert {"objective", "gradient_norm"} <= problem.closed_form_metrics


@pytest.mark.parametrize("make", CLOSED_FORM.values(), ids=CLOSED_FORM)
def test_closed_form_gap_is_accurate_where_subtracting_two_values_is_not(make):
    """1e-9 from the optimum the gap is about 1e-18: the closed form gets it to 1e-6
    relative. f(x) and f* are O(1) doubles, so their difference is 0 or a multiple of the
    spacing of doubles at their size (~2e-15), whatever rounding the BLAS gives: no
    subtraction of the two can come within 1e-6 relative of the gap."""
    problem = make()
    x = problem.x_star + 1e-9 * np.random.default_rng(1).standard_normal(problem.dim)
    delta = x - problem.x_star  # the displacement x holds (elementwise, correctly rounded)
    h, _ = (
        problem.hessians_and_linear_terms()
        if isinstance(problem, LeastSquares)
        else (_quadratic_hessians(problem), None)
    )
    exact = 0.5 * delta @ h.mean(axis=0) @ delta
    assert 1e-19 < exact < 1e-16
    assert problem.objective_gap(x) == pytest.approx(exact, rel=1e-6, abs=0)
    np.testing.assert_allclose(problem.gradient(x), h.mean(axis=0) @ delta, rtol=1e-6)
    # why it matters: both values are doubles of size >= smallest, so their difference is
    # a multiple of np.spacing(smallest): 0, or a hundred times the gap or more
    smallest = min(abs(problem.objective(x)), abs(problem.f_star))
    assert np.spacing(smallest) > 100 * exact
    assert problem.objective(x) - problem.f_star != pytest.approx(exact, rel=1e-6, abs=0)


def _quadratic_hessians(problem):
    h = problem.hessians
    return np.stack([np.diag(row) for row in h]) if problem.diagonal else h


class NoPasses(Quadratic):
    """A quadratic whose passes over every client fail: default runs must not make any."""

    def objective(self, x):
        raise AssertionError("a default run evaluated the objective with a pass over clients")

    def client_objectives(self, points):
        raise AssertionError("a default run evaluated every client")


def test_default_metrics_make_no_pass_over_the_clients():
    base = Quadratic.random(50, 4, seed=0)
    problem = NoPasses(base.centers, base.hessians)
    res = sm.run(FOCUS(0.5 / (50 * problem.smoothness), 3), problem, UniformSample(50, 5), 40)
    for curve in (res.distance, res.objective_gap, res.gradient_norm):
        assert curve is not None and np.isfinite(curve).all()  # every round, closed forms
    assert res.config["evaluate_every"] == 1


def test_metrics_that_need_a_pass_follow_the_schedule():
    problem = Logistic.random(60, 5, seed=0)
    # one local step with everyone: gradient descent, linear on a logistic objective
    method, process = FedAvg(0.5 / problem.smoothness, 1), Full(60)
    res = sm.run(method, problem, process, 30, evaluate_every=7, progress=False)
    for curve in (res.objective_gap, res.gradient_norm):
        assert np.flatnonzero(~np.isnan(curve)).tolist() == [0, 7, 14, 21, 28, 30]
    assert np.isfinite(res.distance).all()  # O(d): every round
    every = sm.run(method, problem, process, 30, evaluate_every=1, progress=False)
    kept = ~np.isnan(res.objective_gap)
    np.testing.assert_array_equal(res.objective_gap[kept], every.objective_gap[kept])
    np.testing.assert_array_equal(res.server, every.server)  # the schedule changes no number
    # what a Result reads off a scheduled curve
    rounds, values = res.evaluated("objective_gap")
    assert rounds.tolist() == [0, 7, 14, 21, 28, 30]
    assert res.last("objective_gap") == every.objective_gap[-1]
    assert res.summary()["final_objective_gap"] == every.objective_gap[-1]
    # the rate is fitted against the rounds that have a value
    assert res.rate("objective_gap") == pytest.approx(every.rate("objective_gap"), rel=1e-2)
    assert res.rate("objective_gap") == pytest.approx(
        np.exp(np.polyfit(rounds[1:], np.log(values[1:]), 1)[0]), rel=1e-12
    )
    csv = res.csv_rows().splitlines()
    assert csv[0].split(",")[6] == "objective_gap"
    assert csv[1 + 7].split(",")[6] == repr(float(every.objective_gap[7]))
    assert csv[1 + 8].split(",")[6] == ""  # no value in round 8


def test_auto_schedule_is_a_deterministic_cost_model():
    problem = Logistic.random(400, 5, seed=0)
    process = UniformSample(400, 4)
    a = sm.run(FedAvg(0.5, 2), problem, process, 50, progress=False)
    b = sm.run(FedAvg(0.5, 2), problem, process, 50, progress=False)
    interval = auto_interval(400, 4.0, problem.chunk_cost(), passes=2)
    assert a.config["evaluate_every"] == b.config["evaluate_every"] == interval > 1
    np.testing.assert_array_equal(np.isnan(a.objective_gap), np.isnan(b.objective_gap))
    assert not np.isnan(a.objective_gap[[0, -1]]).any()
    # a pass costs 2 x 400 clients; a round ~4 of them plus the fixed overhead: 10% of that
    assert auto_interval(400, 4.0, 100.0, passes=2) == int(np.ceil(80_000 / 5_040))
    assert auto_interval(10**6, 10.0, 10.0, passes=0) == 1


def test_decentralized_consensus_is_recorded_every_round():
    problem = Quadratic.random(8, 3, seed=0)
    method = GradientTracking(0.05, OnePeerExponential(8), rule="natural")
    res = sm.run(method, problem, Full(8), 20, progress=False)
    assert res.consensus is not None and np.isfinite(res.consensus).all()


def test_bad_metric_arguments_name_the_argument():
    problem, process = Quadratic.random(5, 2, seed=0), Full(5)
    with pytest.raises(TypeError, match="metrics must be a tuple of metric names"):
        sm.run(FedAvg(0.1, 1), problem, process, 2, metrics="distance")
    with pytest.raises(TypeError, match="metrics must be a tuple"):
        sm.run(FedAvg(0.1, 1), problem, process, 2, metrics=None)
    with pytest.raises(ValueError, match="evaluate_every must be"):
        sm.run(FedAvg(0.1, 1), problem, process, 2, evaluate_every="sometimes")
    with pytest.raises(ValueError, match="evaluate_every"):
        sm.run(FedAvg(0.1, 1), problem, process, 2, evaluate_every=0)


def test_zero_and_one_round_runs_summarise_what_they_can():
    problem = LeastSquares.random(10, 3, 5, seed=0)
    process = Bernoulli.heterogeneous(10, 0.2, 0.8, seed=0)
    for rounds in (0, 1):
        res = sm.run(FOCUS(0.01, 2), problem, process, rounds, progress=False)
        summary = res.summary()
        assert summary["rounds"] == rounds and summary["rate"] is None
        assert summary["final_relative_error"] == res.relative_error[-1]
        assert len(res.csv_rows().splitlines()) == rounds + 2
        assert str(sm.compare([res]))
    with pytest.raises(ValueError, match="rate needs at least 2 rounds"):
        res.rate()


def test_rate_floor_follows_the_dtype():
    """A float32 run stalls near 1e-7; its default fit stops above that plateau and gives
    the linear phase's rate, the float64 run's fitted over the same span."""
    problem = LeastSquares.random(20, 10, rows_per_client=20, seed=0)
    process = Bernoulli.heterogeneous(20, 0.1, 0.9, seed=0)
    method = FOCUS(0.5 / (20 * problem.smoothness), local_steps=5)
    single = sm.run(method, problem, process, 400, dtype=np.float32, progress=False)
    double = sm.run(method, problem, process, 400, progress=False)
    assert single.dtype == np.float32 and single.relative_error[-1] > 1e-9  # a plateau
    floor = single.default_floor()
    assert floor == pytest.approx(1e3 * np.finfo(np.float32).eps)
    assert single.rate() == pytest.approx(double.rate(floor=floor), abs=2e-3)
    plateau = single.rate(floor=1e3 * np.finfo(np.float64).eps)  # the float64 floor
    assert plateau > single.rate() + 0.05


def _pair():
    problem = LeastSquares.random(12, 3, 6, seed=0)
    process = Bernoulli.heterogeneous(12, 0.2, 0.8, seed=0)
    return [
        sm.run(FOCUS(0.002, 2), problem, process, 30, seed=s, progress=False) for s in (0, 1)
    ] + [sm.run(FedAvg(0.02, 2), problem, process, 30, seed=0, progress=False)]


def test_result_columns_csv_and_dataframe(tmp_path):
    res = _pair()[0]
    cols = res.columns()
    assert list(cols) == list(sm.engine.runner.result.COLUMNS)
    assert cols["lr"][0] == 0.002 and cols["seed"][0] == 0 and cols["round"][-1] == 30
    np.testing.assert_array_equal(cols["relative_error"], res.relative_error)
    assert np.isnan(cols["consensus"]).all()  # not a decentralized method
    path = res.to_csv(tmp_path / "focus.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(sm.engine.runner.result.COLUMNS) and len(lines) == 32
    assert lines[5].split(",")[5] == repr(float(res.distance[4]))
    assert res.to_csv(tmp_path / "again.csv").read_bytes() == path.read_bytes()
    timed = res.to_csv(tmp_path / "timed.csv", wall_time=True).read_text().splitlines()
    assert timed[0].endswith(",wall_time")
    pd = pytest.importorskip("pandas")
    frame = res.to_dataframe()
    assert list(frame.columns) == list(sm.engine.runner.result.COLUMNS)
    np.testing.assert_array_equal(frame["distance"].to_numpy(), res.distance)
    read = pd.read_csv(path)
    np.testing.assert_array_equal(read["distance"].to_numpy(), res.distance)


def test_to_dataframe_without_pandas_says_what_is_missing(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"needs pandas \(pip install pandas\)"):
        _pair()[0].to_dataframe()


def test_compare_gives_the_command_table():
    runs = _pair()
    table = sm.compare(runs)
    assert [row["method"] for row in table.rows] == ["FOCUS", "FedAvg"]
    focus = table.rows[0]
    assert focus["final_relative_error"] == pytest.approx(
        np.median([r.relative_error[-1] for r in runs[:2]])
    )
    assert focus["lr"] == 0.002
    text = str(table).splitlines()
    assert text[0].split()[:2] == ["method", "lr"] and len(text) == 4
    by_label = sm.compare({"a": runs[0], "b": runs[1:]})
    assert [row["method"] for row in by_label.rows] == ["a", "b"]
    with pytest.raises(TypeError, match="results must hold stochmix Results"):
        sm.compare([runs[0], "not a result"])


def test_a_run_stopped_by_the_threshold_evaluates_its_last_round():
    class PassOnly(Quadratic):
        closed_form_metrics = frozenset()  # objective and gradient on the schedule

    base = Quadratic.random(20, 3, seed=0)
    problem = PassOnly(base.centers, base.hessians)
    with pytest.warns(sm.engine.DivergenceWarning):
        res = sm.run(FedAvg(5.0, 3), problem, Full(20), 60, divergence_threshold=1e6,
                     evaluate_every=50)  # fmt: skip
    assert res.diverged_at < 50 and np.isfinite(res.objective_gap[-1])


def test_compare_keeps_step_sizes_apart():
    problem, process = Quadratic.random(5, 2, seed=0), Full(5)
    runs = [sm.run(FedAvg(lr, 1), problem, process, 10) for lr in (0.01, 0.5)]
    assert [row["method"] for row in sm.compare(runs).rows] == [
        "FedAvg (lr 0.01)",
        "FedAvg (lr 0.5)",
    ]


def test_numpy_scalars_are_numbers():
    p = Bernoulli(np.float64(0.3), n_clients=5)
    assert np.allclose(p.probabilities, 0.3)


def _no_minimiser():
    """A logistic regression without a minimiser: f_star is unknown."""
    rng = np.random.default_rng(0)
    rows, labels = rng.standard_normal((48, 3)), rng.integers(0, 2, 48)
    problem = Logistic.from_stacked(rows, labels, np.full(12, 4), 0.0, allow_no_minimiser=True)
    assert problem.x_star is None and problem.f_star is None
    return problem


def test_unknown_f_star_records_the_objective_not_a_gap(tmp_path):
    """Where f_star is unknown the run records f(x) as ``objective`` (the summary
    table's "final objective"), never as ``objective_gap``; problems with a known f_star
    keep exactly COLUMNS and "final obj. gap"."""
    problem = _no_minimiser()
    res = sm.run(FedAvg(0.5, 2), problem, Full(12), 8, evaluate_every=1, progress=False)
    assert res.objective_gap is None
    assert res.objective[0] == pytest.approx(problem.objective(res.server[0]), rel=1e-12)
    assert res.objective[-1] == pytest.approx(problem.objective(res.server[-1]), rel=1e-12)
    assert res.summary()["final_objective"] == res.objective[-1]
    assert "final_objective_gap" not in res.summary()
    cols = res.columns()
    assert list(cols) == [*sm.engine.runner.result.COLUMNS, "objective"]
    assert np.isnan(cols["objective_gap"]).all()
    np.testing.assert_array_equal(cols["objective"], res.objective)
    assert list(res.columns(objective=False)) == list(sm.engine.runner.result.COLUMNS)
    loaded = sm.Result.load(res.save(tmp_path / "run"))
    np.testing.assert_array_equal(loaded.objective, res.objective)
    assert loaded.objective_gap is None
    table = str(sm.compare([res])).splitlines()[0]
    assert "final objective" in table and "obj. gap" not in table

    known = sm.run(FedAvg(0.02, 2), Quadratic.random(12, 3, seed=0), Full(12), 8)
    assert known.objective is None and known.objective_gap is not None
    assert list(known.columns()) == list(sm.engine.runner.result.COLUMNS)
    table = str(sm.compare([known])).splitlines()[0]
    assert "final obj. gap" in table and "final objective" not in table


def test_metrics_csv_of_an_unknown_f_star_has_the_objective_column(tmp_path):
    """The command's metrics.csv: COLUMNS then ``objective``, the same header for every
    run of the experiment; its summary table says "final objective"."""
    from stochmix import config, experiments
    from stochmix.reporting import format_table

    exp = config.parse(
        {
            "name": "no-minimiser",
            "rounds": 5,
            "seeds": [0, 1],
            "evaluate_every": 1,
            "problem": {"kind": "logistic", "n_clients": 12, "dim": 3, "seed": 0},
            "methods": [{"kind": "fedavg", "lr": [0.1, 0.3], "local_steps": 2}],
        }
    )
    exp.problem = _no_minimiser()  # the built-in kinds all have a minimiser
    outcomes = experiments.run_experiment(exp, progress=False, log=None)
    text = experiments.write_metrics(outcomes, tmp_path / "metrics.csv").read_text()
    lines = text.splitlines()
    assert lines[0] == ",".join([*sm.engine.runner.result.COLUMNS, "objective"])
    assert len(lines) == 1 + 2 * 2 * 6  # two step sizes, two seeds, six rounds each
    assert all(line.split(",")[6] == "" and line.split(",")[-1] for line in lines[1:])
    header = format_table(experiments.summary_rows(outcomes)).splitlines()[0]
    assert "final objective" in header and "obj. gap" not in header
