"""The [clock] table, the heterogeneity methods' kinds and local-step tables in
configurations, and the simulated time in a study's per-run summary."""

import csv
import sys

import numpy as np
import pytest

from stochmix import experiments
from stochmix.config import ConfigError, dumps, parse
from stochmix.studies import Study
from stochmix.timing import Clock, Exponential, Pareto

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def clocked(**clock) -> dict:
    return {
        "name": "clocked",
        "rounds": 25,
        "seeds": [0],
        "problem": {"kind": "quadratic", "n_clients": 20, "dim": 3},
        "participation": {"kind": "uniform_sample", "size": 8},
        "clock": {
            "compute": {"kind": "pareto", "shape": 1.5, "scale": 0.1},
            "upload": {"kind": "exponential", "mean": 0.5},
            "deadline": 2.0,
            "partial_work": True,
            **clock,
        },
        "methods": [
            {"kind": "fednova", "lr": 0.01, "local_steps": {"low": 1, "high": 4}},
            {"kind": "fedavg", "lr": 0.01, "local_steps": list(range(1, 21))},
        ],
    }


def test_the_clock_table_builds_the_clock_and_resolves_to_itself():
    exp = parse(clocked())
    clock = exp.clock
    assert isinstance(clock, Clock) and clock.deadline == 2.0 and clock.partial_work
    assert isinstance(clock.time_model.compute, Pareto)
    assert isinstance(clock.time_model.upload, Exponential)
    assert exp.run_options["clock"] is clock
    again = parse(tomllib.loads(dumps(exp.resolved())))
    assert again.resolved() == exp.resolved()
    assert exp.resolved()["clock"]["upload"] == {"kind": "exponential", "mean": 0.5, "shift": 0.0}


def test_a_clocked_configuration_records_time_and_reruns_to_the_same_bytes(tmp_path):
    exp = parse(clocked())
    outcomes = experiments.run_experiment(exp, progress=False, log=None)
    experiments.write_metrics(outcomes, tmp_path / "a.csv")
    again = parse(tomllib.loads(dumps(exp.resolved())))
    experiments.write_metrics(
        experiments.run_experiment(again, progress=False, log=None), tmp_path / "b.csv"
    )
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    times = [float(r["time"]) for r in rows if r["method"] == "fednova"]
    assert times[0] == 0.0 and np.all(np.diff(times) > 0) and np.all(np.diff(times) <= 2.0)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"deadline": 0.01}, "below the fastest possible round"),
        ({"compute": {"kind": "weibull"}}, "clock.compute.kind must be one of"),
        ({"compute": {"kind": "pareto", "shape": 1.5}}, "clock.compute.scale is required"),
        ({"upload": -1.0}, "clock.upload"),
        ({"rate": 2}, "unknown key clock.rate"),
        ({"speeds": [1.0] * 3}, "speeds must hold one factor per client"),
    ],
)
def test_bad_clock_tables_name_the_key(change, words):
    raw = clocked(**change)
    with pytest.raises((ConfigError, ValueError), match=words):
        exp = parse(raw)
        experiments.run_experiment(exp, progress=False, log=None)


def test_asynchronous_kinds_take_full_participation_and_their_arrival_schedule():
    raw = clocked()
    raw.pop("participation")
    raw["clock"].pop("deadline")
    raw["clock"].pop("partial_work")  # without a deadline there is no partial work
    raw["methods"] = [
        {"kind": "fedbuff", "lr": 0.01, "local_steps": 2, "buffer": 3, "concurrency": 6},
        {"kind": "fedasync", "lr": 0.01, "alpha": 0.5, "concurrency": 4},
    ]
    exp = parse(raw)
    outcomes = experiments.run_experiment(exp, progress=False, log=None)
    for outcome in outcomes:
        (result,) = outcome.best
        assert result.time is not None and np.isfinite(result.server).all()
    raw["participation"] = {"kind": "uniform_sample", "size": 5}
    with pytest.raises(ConfigError, match="fedbuff"):
        parse(raw)


def test_a_study_reports_the_simulated_time_of_each_run(tmp_path):
    raw = clocked()
    raw["methods"] = raw["methods"][:1]
    study = Study(raw, sweep={"rounds": [10, 20]})
    study.run(tmp_path / "study", progress=False)
    rows = list(csv.DictReader((tmp_path / "study" / "study.csv").open()))
    times = [float(r["virtual_time"]) for r in rows]
    assert len(times) == 2 and 0 < times[0] < times[1] <= 20 * 2.0


def test_the_clock_table_takes_on_off_availability():
    exp = parse(clocked(availability={"mean_on": 4.0, "mean_off": 2.0}))
    assert exp.clock.availability.stationary == pytest.approx(2 / 3)
    assert exp.resolved()["clock"]["availability"] == {"mean_on": 4.0, "mean_off": 2.0}
    assert parse(tomllib.loads(dumps(exp.resolved()))).resolved() == exp.resolved()
    with pytest.raises(ConfigError, match="clock.availability"):
        parse(clocked(availability={"mean_on": 4.0}))
