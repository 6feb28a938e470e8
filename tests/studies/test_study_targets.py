"""study.csv's costs to a target (issue 40, items 6 and 9): rounds, gradients, messages,
floats and simulated time to the tolerance and to 1e-8, each checked against the cell's
own metrics.csv; lr_at_edge and diverging; a geometric sweep on a log axis."""

import csv

import numpy as np
import pytest

from stochmix.studies import Study
from stochmix.studies.plotting import log_spaced, plot_summary


def clocked(rounds: int = 80) -> dict:
    return {
        "name": "targets",
        "rounds": rounds,
        "seeds": [0],
        "tolerance": 1e-4,
        "problem": {"kind": "quadratic", "n_clients": 10, "dim": 3},
        "participation": {"kind": "uniform_sample", "size": 5},
        "clock": {"compute": 0.1, "upload": {"kind": "exponential", "mean": 0.2}},
        "methods": [
            {"kind": "focus", "label": "FOCUS", "lr": [0.003, 0.01, 0.03, 0.1]},
            {"kind": "fedavg", "label": "FedAvg", "lr": [0.1, 1.0]},
        ],
    }


def _metrics(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _first_below(lines, eps):
    """Independently: the first round whose relative error is at most eps, and the sums
    of the cost columns over rounds 0..that round, and the time there."""
    for i, line in enumerate(lines):
        if line["relative_error"] and float(line["relative_error"]) <= eps:
            sums = {
                c: sum(int(x[c]) for x in lines[: i + 1])
                for c in ("gradients", "messages", "floats")
            }
            return int(line["round"]), sums, float(line["time"])
    return None, None, None


def test_costs_to_the_tolerance_and_to_1e8_match_the_cells_metrics(tmp_path):
    config = clocked(150)
    config["methods"] = [
        {"kind": "focus", "label": "FOCUS", "lr": 0.01},
        {"kind": "fedavg", "label": "FedAvg", "lr": 0.1},  # never reaches 1e-8
    ]
    swept = {"participation.size": [4, 6]}
    study = Study(config, sweep=swept).run(tmp_path / "s", progress=False)
    assert not study.failures
    rows = list(csv.DictReader(open(tmp_path / "s" / "study.csv")))
    checked = 0
    for row in rows:
        lines = [
            line
            for line in _metrics(tmp_path / "s" / "cells" / row["cell"] / "metrics.csv")
            if line["method"] == row["method"] and float(line["lr"]) == float(row["lr"])
        ]
        for target, eps in (("tolerance", 1e-4), ("1e-8", 1e-8)):
            hit, sums, time = _first_below(lines, eps)
            if hit is None:
                assert row[f"rounds_to_{target}"] == "" and row[f"messages_to_{target}"] == ""
                continue
            checked += 1
            assert int(row[f"rounds_to_{target}"]) == hit
            for cost in ("gradients", "messages", "floats"):
                assert int(row[f"{cost}_to_{target}"]) == sums[cost] > 0
            assert float(row[f"virtual_time_to_{target}"]) == pytest.approx(time, rel=1e-12)
    assert checked >= 4  # FOCUS reaches both targets in both cells


def test_lr_at_edge_and_diverging(tmp_path):
    Study(clocked(), sweep={"rounds": [80]}).run(tmp_path / "s", progress=False)
    rows = {r["method"]: r for r in csv.DictReader(open(tmp_path / "s" / "study.csv"))}
    lines = _metrics(tmp_path / "s" / "cells" / rows["FOCUS"]["cell"] / "metrics.csv")
    # independently: the step of each grid with the fewest rounds to the tolerance
    for method, grid in (("FOCUS", [0.003, 0.01, 0.03, 0.1]), ("FedAvg", [0.1, 1.0])):
        reach = {}
        for lr in grid:
            mine = [x for x in lines if x["method"] == method and float(x["lr"]) == lr]
            hit, _, _ = _first_below(mine, 1e-4)
            final = float(mine[-1]["relative_error"] or "inf")
            reach[lr] = (np.inf if hit is None else hit, final, lr)
        best = min(grid, key=lambda lr: reach[lr])
        assert float(rows[method]["lr"]) == best
        edge = best in (min(grid), max(grid))
        assert rows[method]["lr_at_edge"] == ("true" if edge else "false")
    assert rows["FOCUS"]["lr_at_edge"] == "false" and rows["FedAvg"]["lr_at_edge"] == "true"
    assert rows["FedAvg"]["diverging"] == rows["FOCUS"]["diverging"] == "false"
    # a step that grows far above its start below the divergence threshold: diverging
    one = clocked()
    one["methods"] = [{"kind": "fedavg", "label": "FedAvg", "lr": 1.0}]
    Study(one, sweep={"rounds": [60]}).run(tmp_path / "d", progress=False)
    (row,) = csv.DictReader(open(tmp_path / "d" / "study.csv"))
    errors = [
        float(x["relative_error"])
        for x in _metrics(tmp_path / "d" / "cells" / row["cell"] / "metrics.csv")
    ]
    assert errors[-1] > 1e3 * errors[0] and errors[-1] > errors[45]  # grows, independently
    assert row["diverged_at"] == "" and row["diverging"] == "true"
    assert row["lr_at_edge"] == ""  # one step: no grid


def test_a_geometric_sweep_is_drawn_on_a_log_axis():
    import matplotlib

    matplotlib.use("Agg")
    rows = [
        {"method": "A", "methods.A.lr": lr, "rate": rate}
        for lr, rate in ((0.01, 0.9), (0.02, 0.8), (0.04, 0.7))
    ]
    ax = plot_summary(rows, ["methods.A.lr"], y="rate")
    assert ax.get_xscale() == "log"  # a factor of 4 only, but one ratio: a log-range
    assert log_spaced([1e-3, 1e-2, 1e-1]) and not log_spaced([0.05, 0.2, 0.5])
    assert not log_spaced([1, 2, 3]) and not log_spaced([-1, 1, 100])
    linear = [{**row, "methods.A.lr": v} for row, v in zip(rows, (1, 2, 3), strict=True)]
    assert plot_summary(linear, ["methods.A.lr"], y="rate").get_xscale() == "linear"


def test_the_guide_lists_every_study_csv_column_in_order():
    import re
    from pathlib import Path

    from stochmix.studies.cells import SUMMARY_FIELDS

    page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "studies.md"
    row = next(line for line in page.read_text().splitlines() if line.startswith("| `study.csv`"))
    named = [n for n in re.findall(r"`([a-z_0-9e.-]+)`", row) if n in SUMMARY_FIELDS]
    assert list(dict.fromkeys(named)) == list(SUMMARY_FIELDS)
