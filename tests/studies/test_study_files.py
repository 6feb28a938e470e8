"""A study's files on a shared folder and on resume (issue 41, items 1 and 2): no write
through a planted link, folders that are not this user's own refused, and a resumed study
that re-runs (with a warning naming the cell and why) every cell whose files do not check
out, the cell's identity always from the cell."""

import csv
import json
import os
import shutil
import stat

import pytest

from stochmix.studies import Study, SweepError
from stochmix.studies.cells import check_done, read_summary, run_cell
from stochmix.studies.table import study_rows, timing_rows

from .test_studies import base

SWEEP = {"participation.low": [0.1, 0.3]}


def small() -> dict:
    return {**base(rounds=10), "seeds": [0]}


def first_run(folder) -> tuple[Study, bytes]:
    study = Study(small(), sweep=SWEEP).run(folder, progress=False)
    return study, (folder / "study.csv").read_bytes()


def again(folder, **kwargs) -> Study:
    return Study(small(), sweep=SWEEP).run(folder, progress=False, **kwargs)


def victim_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    return victim


# ----------------------------------------------------------------- item 1: links, owners
def test_links_planted_at_scratch_and_summary_names_are_not_followed(tmp_path):
    folder = tmp_path / "s"
    study, text = first_run(folder)
    victim = victim_file(tmp_path)
    cell = folder / "cells" / study.cells[1].name
    (cell / "done").unlink()  # the cell runs again
    for name in (f".summary.json.{os.getpid()}.tmp", f".done.{os.getpid()}.tmp"):
        (cell / name).symlink_to(victim)
    (cell / "summary.json").unlink()
    (cell / "summary.json").symlink_to(victim)
    resumed = again(folder)
    assert resumed.skipped == 1 and not resumed.failures
    assert victim.read_text() == "secret"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (cell / "summary.json").is_symlink()
    assert json.loads((cell / "summary.json").read_text())["digest"] == study.cells[1].digest
    assert (folder / "study.csv").read_bytes() == text


def test_a_cell_folder_that_is_a_link_is_refused_before_any_work(tmp_path):
    folder = tmp_path / "s"
    study, _ = first_run(folder)
    cell = folder / "cells" / study.cells[0].name
    outside = tmp_path / "outside"
    shutil.move(str(cell), str(outside))
    (outside / "done").unlink()
    cell.symlink_to(outside, target_is_directory=True)
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(SweepError, match=r"cell folder .*is refused: it is a link") as info:
        again(folder)
    assert str(cell) in str(info.value)
    assert sorted(p.name for p in outside.iterdir()) == before  # nothing written there
    # a worker given such a folder (a Dask one) refuses it too, as the cell's error
    outcome = run_cell(study.cells[0].text, str(cell), study.cells[0].digest)
    assert "is a link" in outcome["error"] and not (outside / "done").exists()


@pytest.mark.parametrize("which", ["study", "cells", "cell"])
def test_folders_others_may_write_to_are_refused(tmp_path, which):
    folder = tmp_path / "s"
    study, _ = first_run(folder)
    path = {
        "study": folder,
        "cells": folder / "cells",
        "cell": folder / "cells" / study.cells[1].name,
    }[which]
    path.chmod(0o777)
    with pytest.raises(SweepError, match=r"others may write to it \(mode 777") as info:
        again(folder)
    assert repr(str(path)) in str(info.value)
    path.chmod(0o755)
    assert again(folder).skipped == 2


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown")
def test_a_cell_folder_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "s"
    study, _ = first_run(folder)
    cell = folder / "cells" / study.cells[0].name
    os.chown(cell, 4242, -1)
    with pytest.raises(SweepError, match="belongs to user id 4242") as info:
        again(folder)
    assert str(cell) in str(info.value)


def test_new_folders_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0o002)  # a group-writable umask: the study's own folders are still 0755
    try:
        given = Study(small(), sweep=SWEEP).run(tmp_path / "new" / "s", progress=False)
        default = Study(small(), sweep=SWEEP).run(root=tmp_path / "runs", progress=False)
    finally:
        os.umask(old)
    for study in (given, default):
        for path in (
            study.folder,
            study.folder / "cells",
            study.folder / "cells" / study.cells[0].name,
        ):
            assert stat.S_IMODE(os.lstat(path).st_mode) & 0o022 == 0, path


# ----------------------------------------------------------------- item 2: resumed cells
def test_a_swapped_summary_is_not_another_cells_numbers(tmp_path):
    folder = tmp_path / "s"
    study, text = first_run(folder)
    one, two = (folder / "cells" / cell.name for cell in study.cells)
    shutil.copy(one / "summary.json", two / "summary.json")
    with pytest.warns(RuntimeWarning, match=rf"{study.cells[1].name}.*another configuration"):
        resumed = again(folder)
    assert resumed.skipped == 1
    assert (folder / "study.csv").read_bytes() == text


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda s: "{not json", "is not JSON"),
        (lambda s: json.dumps({k: v for k, v in s.items() if k != "digest"}), "older stochmix"),
        (lambda s: json.dumps([s]), "is not an object"),
        (lambda s: json.dumps({**s, "rows": [{**s["rows"][0], "rate": "fast"}]}), "wrong type"),
        (lambda s: json.dumps({**s, "rows": [{**s["rows"][0], "cell": "x"}]}), "a row that is not"),
        (lambda s: json.dumps({**s, "timing": [{"method": "m"}]}), "timing entry"),
        (lambda s: json.dumps({**s, "seconds": "1"}), "seconds = '1'"),
        (lambda s: json.dumps({**s, "files": {}}), "does not list the files"),
    ],
)
def test_a_summary_that_does_not_check_out_runs_the_cell_again(tmp_path, damage, why):
    folder = tmp_path / "s"
    study, text = first_run(folder)
    cell = folder / "cells" / study.cells[0].name
    summary = json.loads((cell / "summary.json").read_text())
    (cell / "summary.json").write_text(damage(summary))
    with pytest.warns(RuntimeWarning, match=rf"{study.cells[0].name}'?: its summary.json .*{why}"):
        resumed = again(folder)
    assert resumed.skipped == 1 and not resumed.failures
    assert (folder / "study.csv").read_bytes() == text
    assert check_done(study.cells[0], cell)[1] is None  # whole again


def test_a_changed_metrics_file_runs_the_cell_again(tmp_path):
    folder = tmp_path / "s"
    study, _ = first_run(folder)
    metrics = folder / "cells" / study.cells[1].name / "metrics.csv"
    good = metrics.read_bytes()
    metrics.write_bytes(good)  # the same bytes written again: still done
    assert again(folder).skipped == 2
    other = folder / "cells" / study.cells[0].name / "metrics.csv"
    shutil.copy(other, metrics)
    with pytest.warns(RuntimeWarning, match="its metrics.csv is not the file"):
        assert again(folder).skipped == 1
    assert metrics.read_bytes() == good


def test_identity_columns_come_from_the_cell(tmp_path):
    folder = tmp_path / "s"
    study, _ = first_run(folder)
    cell = study.cells[1]
    # what a cell returned cannot rename it, re-seed it or move it in the sweep
    outcome = {
        "rows": [{"cell": "evil", "seed": 99, "participation.low": 7, "method": "m"}],
        "timing": [{"cell": "evil", "seed": 99, "method": "m", "seconds": 1.0}],
    }
    (row,) = study_rows([cell], {cell.index: outcome})
    assert (row["cell"], row["seed"], row["participation.low"]) == (cell.name, 0, 0.3)
    (timing,) = timing_rows([cell], {cell.index: outcome})
    assert (timing["cell"], timing["seed"]) == (cell.name, 0)
    # nor can columns of its metrics.csv named cell, seed or a swept key
    metrics = folder / "cells" / cell.name / "metrics.csv"
    with open(metrics, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {row["seed"] for row in rows} == {"0"}
    with open(metrics, "w", newline="") as handle:
        writer = csv.DictWriter(handle, [*rows[0], "cell", "participation.low"])
        writer.writeheader()
        writer.writerows(
            {**row, "seed": "99", "cell": "evil", "participation.low": "7"} for row in rows
        )
    n = len(rows)
    table = study.rounds(frame=False)
    mine = [i for i, name in enumerate(table["cell"]) if name == cell.name]
    assert len(mine) == n and "evil" not in table["cell"]
    assert {table["participation.low"][i] for i in mine} == {0.3}
    assert {table["seed"][i] for i in mine} == {0}


def test_read_summary_names_a_malformed_file(tmp_path):
    (tmp_path / "summary.json").write_text("{")
    with pytest.raises(ValueError, match="summary.json' cannot be read as JSON"):
        read_summary(tmp_path)
