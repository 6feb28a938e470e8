"""Studies (stochmix.studies): a [sweep] table's cells, bad sweeps refused before any cell
runs, the same study.csv bytes serially, on local processes, on a Dask cluster and after
a resume, failed cells reported without losing the others, the command and the plot."""

import csv
import sys

import pytest

import stochmix as sm
from stochmix import experiments
from stochmix.cli import main
from stochmix.config import dumps
from stochmix.studies import Study, SweepError, sweep

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def base(rounds: int = 30) -> dict:
    return {
        "name": "tiny",
        "rounds": rounds,
        "seeds": [0, 1],
        "problem": {"kind": "least_squares", "n_clients": 10, "dim": 5, "rows_per_client": 10},
        "participation": {"kind": "bernoulli", "low": 0.1, "high": 0.9},
        "methods": [
            {"kind": "fedavg", "label": "FedAvg", "lr": 0.02, "local_steps": 2},
            {"kind": "focus", "label": "FOCUS", "lr": 0.002, "local_steps": 2},
        ],
    }


SWEEP = {"participation.low": [0.05, 0.3], "methods.FOCUS.local_steps": [1, 3]}


def test_product_cells_are_resolved_configurations():
    study = Study(base(), sweep=SWEEP)
    assert len(study.cells) == 2 * 2 * 2  # values x values x seeds
    first = study.cells[0]
    assert first.values == {"participation.low": 0.05, "methods.FOCUS.local_steps": 1}
    assert first.seed == 0 and study.cells[1].seed == 1
    assert first.name == "participation.low=0.05__methods.FOCUS.local_steps=1__seed=0"
    resolved = tomllib.loads(first.text)
    assert resolved["seeds"] == [0]
    assert resolved["participation"]["low"] == 0.05
    focus = next(m for m in resolved["methods"] if m["label"] == "FOCUS")
    assert focus["local_steps"] == 1
    fedavg = next(m for m in resolved["methods"] if m["label"] == "FedAvg")
    assert fedavg["local_steps"] == 2
    assert len({cell.digest for cell in study.cells}) == len(study.cells)
    assert study.columns[:4] == ["cell", "participation.low", "methods.FOCUS.local_steps", "seed"]


def test_zip_ranges_and_log_ranges():
    study = Study(
        base(),
        sweep={
            "problem.dim": {"start": 4, "stop": 8, "num": 3},
            "methods.FOCUS.lr": {"start": 1e-4, "stop": 1e-2, "num": 3, "log": True},
            "participation.low": {"start": 0.1, "stop": 0.3, "num": 3},
        },
        mode="zip",
    )
    assert study.sweep.values == {
        "problem.dim": [4, 6, 8],
        "methods.FOCUS.lr": [0.0001, 0.001, 0.01],
        "participation.low": [0.1, 0.2, 0.3],
    }
    assert [c.values["problem.dim"] for c in study.cells] == [4, 4, 6, 6, 8, 8]
    # the mode may be given in the table, as in TOML
    table = {**base(), "sweep": {"mode": "zip", "rounds": [10, 20], "problem.dim": [3, 4]}}
    assert [c.values for c in Study(table).cells[::2]] == [
        {"rounds": 10, "problem.dim": 3},
        {"rounds": 20, "problem.dim": 4},
    ]


@pytest.mark.parametrize(
    "swept, mode, words",
    [
        ({"participation.lo": [0.1]}, None, ["'participation.lo'", "[0.1]", "participation.low"]),
        ({"methods.focus.lr": [0.1]}, None, ["'methods.focus.lr'", "methods.FOCUS.lr"]),
        ({"problem.dim": []}, None, ["problem.dim", "empty", "[]"]),
        (
            {"problem.dim": {"start": 1, "stop": 5, "num": 0}},
            None,
            ["problem.dim", "empty", "'num': 0"],
        ),
        ({"methods.FOCUS.kind": ["fedavg"]}, None, ["methods.FOCUS.kind", "cannot vary", "fedavg"]),
        ({"clock.dedline": [2.0]}, None, ["'clock.dedline'", "[2.0]", "unknown key"]),
        ({"output.x": ["messages"]}, None, ["output.x", "cannot vary", "messages"]),
        ({"seeds": [[0, 1]]}, None, ["seeds", "cannot vary"]),
        ({"participation.low": ["low"]}, None, ["participation.low", "'low'"]),
        ({"participation.low": [0.5, 1.5]}, None, ["participation.low", "1.5"]),
        ({"problem.dim": [3, 4], "rounds": [5]}, "zip", ["zip", "problem.dim", "rounds"]),
        ({"problem.dim": [3]}, "diagonal", ["mode", "diagonal"]),
        ({"problem.dim": 3}, None, ["problem.dim", "3"]),
    ],
)
def test_bad_sweeps_name_the_key_and_the_value(swept, mode, words, tmp_path):
    with pytest.raises(SweepError) as error:
        Study(base(), sweep=swept, mode=mode).run(tmp_path / "never")
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)
    assert not (tmp_path / "never").exists()  # refused before any cell ran


def test_serial_and_two_processes_give_the_same_bytes(tmp_path):
    serial = Study(base(), sweep=SWEEP).run(tmp_path / "serial", progress=False)
    parallel = Study(base(), sweep=SWEEP).run(tmp_path / "jobs", jobs=2, progress=False)
    assert not serial.failures and not parallel.failures
    text = (tmp_path / "serial" / "study.csv").read_bytes()
    assert text == (tmp_path / "jobs" / "study.csv").read_bytes()
    rows = list(csv.DictReader(text.decode().splitlines()))
    assert len(rows) == 8 * 2  # cells x methods
    assert list(rows[0])[:6] == [
        "cell",
        "participation.low",
        "methods.FOCUS.local_steps",
        "seed",
        "method",
        "lr",
    ]
    assert {"rate", "rounds_to_1e-8", "rounds_to_tolerance", "final_relative_error"} <= set(rows[0])
    for cell in serial.cells:  # per-round curves stay in each cell's folder, same bytes
        one = tmp_path / "serial" / "cells" / cell.name / "metrics.csv"
        two = tmp_path / "jobs" / "cells" / cell.name / "metrics.csv"
        assert one.read_bytes() == two.read_bytes()
    timing = list(csv.DictReader(open(tmp_path / "jobs" / "timing.csv")))
    assert len(timing) == 16 and float(timing[0]["seconds"]) > 0


def test_an_interrupted_study_resumes_to_the_same_bytes(tmp_path):
    folder = tmp_path / "study"
    first = sweep(base(), SWEEP, folder=folder, progress=False)
    text = (folder / "study.csv").read_bytes()
    lost = folder / "cells" / first.cells[3].name
    for path in lost.iterdir():  # as if killed while the cell ran
        path.unlink()
    again = Study(base(), sweep=SWEEP).run(folder, progress=False)
    assert again.skipped == len(first.cells) - 1
    assert (folder / "study.csv").read_bytes() == text
    assert (lost / "done").read_text().strip() == first.cells[3].digest
    # a changed configuration is a new cell: it runs again
    changed = Study(base(rounds=31), sweep=SWEEP).run(folder, progress=False)
    assert changed.skipped == 0


def test_a_failed_cell_does_not_lose_the_others(tmp_path, monkeypatch, capsys):
    real = experiments.run_experiment

    def flaky(exp, **kwargs):
        if exp.tables["participation"]["low"] == 0.3 and exp.seeds == [1]:
            raise FloatingPointError("boom in this cell")
        return real(exp, **kwargs)

    monkeypatch.setattr(experiments, "run_experiment", flaky)
    study = Study(base(), sweep=SWEEP).run(tmp_path / "s", progress=False)
    assert len(study.failures) == 2
    cell, message = study.failures[0]
    assert cell.values["participation.low"] == 0.3 and cell.seed == 1
    assert "FloatingPointError: boom in this cell" in message
    assert "participation.low = 0.3" in cell.describe()
    rows = list(csv.DictReader(open(tmp_path / "s" / "study.csv")))
    assert len(rows) == (8 - 2) * 2
    failures = (tmp_path / "s" / "failures.csv").read_text()
    assert "boom in this cell" in failures
    # the command says so and exits 1; a re-run after the fix retries only those cells
    config = tmp_path / "study.toml"
    config.write_text(dumps({**base(), "sweep": SWEEP}))
    out = tmp_path / "cmd"
    assert main(["run", str(config), "--out", str(out), "--quiet", "--no-plot"]) == 1
    assert "2 of 8 cells failed" in capsys.readouterr().err
    monkeypatch.setattr(experiments, "run_experiment", real)
    assert main(["run", str(config), "--out", str(out), "--quiet", "--no-plot"]) == 0
    assert "6 cell(s) already done" in capsys.readouterr().out
    assert not (out / "failures.csv").exists()
    clean = Study(base(), sweep=SWEEP).run(tmp_path / "clean", progress=False)
    assert (out / "study.csv").read_bytes() == clean.csv.read_bytes()


def test_the_command_runs_a_study_and_a_cell_runs_alone(tmp_path, capsys):
    config = tmp_path / "study.toml"
    config.write_text(dumps({**base(), "sweep": {"participation.low": [0.05, 0.3]}}))
    out = tmp_path / "out"
    assert main(["run", str(config), "--jobs", "2", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"study table: {out / 'study.csv'}" in printed
    assert (out / "rate.png").is_file() and (out / "curves.png").is_file()
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert len(rows) == 2 * 2 * 2
    # every cell's resolved configuration repeats that cell alone
    cell = out / "cells" / rows[-1]["cell"]
    alone = tmp_path / "alone"
    resolved = str(cell / "config.resolved.toml")
    assert main(["run", resolved, "--out", str(alone), "--quiet", "--no-plot"]) == 0
    assert (alone / "metrics.csv").read_bytes() == (cell / "metrics.csv").read_bytes()
    # the study folder's study.toml runs the same study again (all cells skipped)
    assert main(["run", str(out / "study.toml"), "--out", str(out), "--quiet"]) == 0
    assert "4 cell(s) already done" in capsys.readouterr().out
    # --jobs belongs to studies
    plain = tmp_path / "plain.toml"
    plain.write_text(dumps(base()))
    assert main(["run", str(plain), "--jobs", "2", "--out", str(tmp_path / "p")]) == 2
    assert "--jobs applies to a study" in capsys.readouterr().err


def test_results_and_plot(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    study = Study(base(), sweep={"participation.low": [0.05, 0.2, 0.5]})
    with pytest.raises(RuntimeError, match="has not run"):
        study.results()
    study.run(tmp_path / "s", progress=False)
    table = study.results(frame=False)
    assert table["participation.low"] == [0.05] * 4 + [0.2] * 4 + [0.5] * 4
    assert table["method"][:2] == ["FedAvg", "FOCUS"]
    assert all(isinstance(r, float) for r in table["rate"])
    # the per-round table: every cell's metrics.csv with its swept value as a column
    per_round = study.rounds(frame=False)
    assert list(per_round)[:2] == ["cell", "participation.low"]
    assert len(per_round["round"]) == 12 * 31  # 3 values x 2 seeds x 2 methods x 31 rounds
    assert per_round["participation.low"][0] == 0.05 and per_round["round"][:2] == [0, 1]
    assert set(per_round["method"]) == {"FedAvg", "FOCUS"}
    pd = pytest.importorskip("pandas")
    frame = study.results()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == study.columns
    ax = study.plot(y="rate", x="participation.low")
    assert isinstance(ax, matplotlib.axes.Axes)
    assert len(ax.get_lines()) == 2 and ax.get_xlabel() == "participation.low"
    with pytest.raises(ValueError, match="x must be a swept key"):
        study.plot(x="problem.dim")
    panels = study.plot_curves(by="participation.low")
    assert [ax.get_title() for ax in panels] == [
        "participation.low = 0.05",
        "participation.low = 0.2",
        "participation.low = 0.5",
    ]
    assert all(len(ax.get_lines()) == 2 for ax in panels)
    assert panels[0].get_ylabel() == "relative error"
    assert len(panels[0].get_lines()[0].get_xdata()) == 31  # rounds 0..30


def test_dask_cluster_gives_the_same_bytes(tmp_path):
    distributed = pytest.importorskip("distributed")
    serial = Study(base(), sweep=SWEEP).run(tmp_path / "serial", progress=False)
    assert not serial.failures
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        study = Study(base(), sweep=SWEEP)
        study.run(tmp_path / "dask", executor="dask", address=cluster.scheduler_address)
    assert not study.failures
    assert (tmp_path / "dask" / "study.csv").read_bytes() == (
        tmp_path / "serial" / "study.csv"
    ).read_bytes()


def test_a_dask_address_that_does_not_answer_is_one_clear_error(tmp_path):
    pytest.importorskip("distributed")
    study = Study(base(), sweep={"problem.dim": [3]})
    with pytest.raises(SweepError, match="tcp://127.0.0.1:9.*no Dask scheduler answered"):
        study.run(tmp_path / "s", executor="dask", address="tcp://127.0.0.1:9", timeout=2)
    assert not (tmp_path / "s").exists()  # before any cell ran


def test_studies_are_in_the_package():
    assert sm.studies.Study is Study and sm.sweep is sweep


def test_the_guide_study_runs_as_written(tmp_path, capsys):
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "studies.md"
    block = re.search(r"```toml\n(.*?)```", page.read_text(), re.S).group(1)
    config = tmp_path / "pmin.toml"
    config.write_text(block)
    out = tmp_path / "out"
    args = ["run", str(config), "--out", str(out), "--rounds", "20", "--quiet", "--no-plot"]
    assert main(args) == 0
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert len(rows) == 4 * 3 * 2  # p_min values x seeds x methods
    assert {row["participation.low"] for row in rows} == {"0.02", "0.1", "0.3", "0.5"}
    capsys.readouterr()


def test_rounds_to_the_swept_tolerance(tmp_path):
    study = Study({**base(rounds=60), "seeds": [0]}, sweep={"tolerance": [0.5, 0.05]})
    table = study.run(tmp_path / "s", progress=False).results(frame=False)
    focus = [i for i, method in enumerate(table["method"]) if method == "FOCUS"]
    loose, tight = (table["rounds_to_tolerance"][i] for i in focus)
    assert table["tolerance"][focus[0]] == 0.5
    assert loose is not None and (tight is None or loose <= tight)


def test_the_guide_sweep_table_reads_as_it_says():
    import re
    from pathlib import Path

    from stochmix.studies.spec import parse_sweep

    page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "studies.md"
    block = re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)[1]
    swept = parse_sweep(tomllib.loads(block)["sweep"])
    assert swept.mode == "zip"
    assert swept.values == {
        "problem.dim": [5, 10, 20],
        "participation.low": [0.1, 0.3, 0.5],
        "methods.FOCUS.lr": [0.0001, 0.001, 0.01],
    }
    assert len(Study(base(), sweep=swept.values, mode="zip").cells) == 3 * 2


def test_the_command_uses_every_core_only_where_it_pays(monkeypatch):
    import os

    import stochmix as sm
    from stochmix.studies.study import PARALLEL_WORK

    small = {
        "rounds": 20,
        "problem": {"kind": "least_squares", "n_clients": 10, "dim": 3},
        "methods": [{"kind": "fedavg", "lr": 0.01}],
        "sweep": {"problem.dim": [2, 3]},
    }
    study = sm.Study(small)
    assert study.work() == 2 * 20 * 10 and study.default_jobs() == 1
    big = {**small, "rounds": PARALLEL_WORK}  # cells x rounds x clients >= PARALLEL_WORK
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert sm.Study(big).default_jobs() == 2  # every core, but no more than the cells
    one_cell = {**big, "sweep": {"problem.dim": [3]}}
    assert sm.Study(one_cell).default_jobs() == 1
