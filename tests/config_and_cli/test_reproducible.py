"""The command's run folder: the same configuration gives the same metrics.csv byte for byte,
the resolved configuration repeats the run, and finished work survives a failing summary or
plot."""

import csv
import re
from pathlib import Path

import numpy as np
import pytest

import stochmix as sm
from stochmix import config, experiments
from stochmix.cli import main
from stochmix.engine.runner.result import COLUMNS

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "guide" / "cli.md"
DECENTRALIZED = ROOT / "examples" / "decentralized.toml"
FILES = {"config.resolved.toml", "participation.csv", "metrics.csv", "timing.csv"}


def _readme_config(tmp_path) -> Path:
    """The configuration of the guide's page on the command line (its first TOML block)."""
    block = re.search(r"```toml\n(.*?)```", CLI_PAGE.read_text(), re.S).group(1)
    path = tmp_path / "readme.toml"
    path.write_text(block)
    return path


def _run(folder: Path, *args) -> Path:
    assert main(["run", *args, "--out", str(folder), "--quiet", "--no-plot"]) == 0
    assert FILES <= {p.name for p in folder.iterdir()}
    return folder


@pytest.mark.slow
def test_readme_config_gives_the_same_metrics_bytes_twice(tmp_path, capsys):
    config = _readme_config(tmp_path)
    first = _run(tmp_path / "a", str(config))
    second = _run(tmp_path / "b", str(config))
    assert (first / "metrics.csv").read_bytes() == (second / "metrics.csv").read_bytes()
    # ... and so does its resolved configuration, which reads back to itself
    third = _run(tmp_path / "c", str(first / "config.resolved.toml"))
    assert (third / "metrics.csv").read_bytes() == (first / "metrics.csv").read_bytes()
    resolved = (first / "config.resolved.toml").read_text()
    assert (third / "config.resolved.toml").read_text() == resolved
    assert "seed = 0" in resolved  # the problem's and the participation's seeds
    capsys.readouterr()


@pytest.mark.slow  # (long: run after the quick suite)
def test_default_gives_the_same_metrics_bytes_twice(tmp_path, capsys):
    first = _run(tmp_path / "a")
    second = _run(tmp_path / "b")
    assert (first / "metrics.csv").read_bytes() == (second / "metrics.csv").read_bytes()
    timing = list(csv.DictReader(open(first / "timing.csv")))
    assert list(timing[0]) == ["method", "lr", "seed", "round", "wall_time"]
    assert len(timing) == 2 * 801 and float(timing[-1]["wall_time"]) > 0
    probabilities = list(csv.DictReader(open(first / "participation.csv")))
    p = np.array([float(row["probability"]) for row in probabilities])
    assert p.size == 20 and 0.1 <= p.min() and p.max() <= 0.9
    capsys.readouterr()


def test_metrics_csv_has_the_columns_of_result_to_csv(tmp_path, capsys):
    folder = _run(tmp_path / "out", "--rounds", "30")
    text = (folder / "metrics.csv").read_text()
    assert text.splitlines()[0].split(",") == list(COLUMNS)
    exp = config.default()
    spec = exp.methods[1]  # FOCUS
    method = spec.build(spec.lrs[0])
    method.name = spec.label
    res = sm.run(method, exp.problem, exp.participation, 30, seed=0, progress=False)
    res.config.setdefault("lr", spec.lrs[0])
    assert res.csv_rows(header=False) in text
    capsys.readouterr()


def test_run_folders_are_unique_within_one_second(tmp_path):
    folders = {experiments.output_dir("x/y", root=tmp_path, stamp="20250101-000000") for _ in "abc"}
    assert sorted(p.name for p in folders) == [f"x_y-20250101-000000-{n}" for n in (1, 2, 3)]


@pytest.mark.parametrize("step", ["summary_rows", "plot"])
def test_a_failing_summary_or_plot_keeps_the_files(tmp_path, capsys, monkeypatch, step):
    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(experiments, step, broken)
    folder = tmp_path / "out"
    assert main(["run", "--rounds", "20", "--out", str(folder), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: boom" in err and str(folder) in err
    assert FILES <= {p.name for p in folder.iterdir()}
    assert len((folder / "metrics.csv").read_text().splitlines()) == 1 + 2 * 21


@pytest.mark.parametrize("how", ["option", "config"])
def test_one_round_runs_end_to_end(tmp_path, capsys, how):
    if how == "option":
        args = ["--rounds", "1"]
    else:
        path = tmp_path / "one.toml"
        path.write_text(DECENTRALIZED.read_text().replace("rounds = 300", "rounds = 1"))
        args = [str(path)]
    folder = tmp_path / "out"
    assert main(["run", *args, "--out", str(folder), "--quiet"]) == 0
    assert (folder / "error.png").stat().st_size > 1000
    assert "linear rate" not in capsys.readouterr().out  # too short to fit a rate


def test_decentralized_example_runs_through_the_command(tmp_path, capsys):
    folder = tmp_path / "out"
    assert main(["run", str(DECENTRALIZED), "--out", str(folder), "--quiet"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert float(rows["GradientTracking"][2]) < 1e-10  # exact with a fixed step
    assert float(rows["DGD"][2]) > 1e-4  # an O(step) neighbourhood
    table = list(csv.DictReader(open(folder / "metrics.csv")))
    assert {r["method"] for r in table} == {"GradientTracking", "DGD"}
    assert all(r["consensus"] != "" for r in table if r["round"] == "300")
    p = [row["probability"] for row in csv.DictReader(open(folder / "participation.csv"))]
    assert p == ["1.0"] * 16


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"stochmix {sm.__version__}"


def test_plot_skips_rounds_without_a_value(tmp_path):
    rounds = 20
    curves = []
    for seed in range(2):
        distance = np.geomspace(1.0, 1e-6, rounds + 1) * (1 + seed)
        distance[1:-1:3] = np.nan  # a metric evaluated on a schedule
        curves.append(
            sm.Result(
                method="M",
                server=np.zeros((rounds + 1, 2)),
                participants=np.zeros(rounds + 1, dtype=np.int64),
                wall_time=np.linspace(0, 1, rounds + 1),
                distance=distance,
                config={"lr": 0.1, "seed": seed},
            )
        )
    outcome = experiments.MethodOutcome("M", {0.1: curves}, 0.1)
    assert experiments.plot([outcome], tmp_path / "e.png").stat().st_size > 1000
    steps, mean, low, high = experiments._geometric_band([c.distance for c in curves])
    assert steps.size == rounds + 1 - len(range(1, rounds, 3))
    assert np.isfinite(mean).all() and (low < mean).all() and (mean < high).all()
    np.testing.assert_allclose(mean, np.sqrt(2) * curves[0].distance[steps])


def test_participation_csv_says_when_p_is_unknown(tmp_path):
    process = sm.participation.WeightedSample([1.0, 2.0, 3.0, 4.0], 2)
    text = experiments.write_participation(process, tmp_path / "p.csv").read_text()
    assert text.startswith("# WeightedSample") and "no closed-form" in text
    assert text.splitlines()[-1] == "client,probability"
