"""The command runs as a new user would run it (the guide's code: tests/docs/test_docs.py)."""

import csv
import re
import subprocess
import sys

import pytest

from stochmix.cli import main
from stochmix.engine.runner.result import COLUMNS
from tests import CHILD_TIMEOUT


def test_stochmix_run_prints_the_table_and_writes_csv_and_png(capsys, tmp_path):
    assert main(["run", "--rounds", "300", "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "final rel. error" in out and "rounds to 1e-8" in out and "linear rate" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert float(rows["FOCUS"][2]) < 1e-10  # FOCUS reaches the minimiser
    assert float(rows["FedAvg"][2]) > 1e-3  # FedAvg stalls
    assert (tmp_path / "error.png").stat().st_size > 1000
    with open(tmp_path / "metrics.csv") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0]) == list(COLUMNS)
    assert len(table) == 2 * 301 and {r["method"] for r in table} == {"FedAvg", "FOCUS"}


CONFIG = """
name = "small"
rounds = 60
seeds = [0, 1]

[problem]
kind = "quadratic"
n_clients = 8
dim = 3
seed = 1

[participation]
kind = "uniform_sample"
size = 3

[[methods]]
kind = "fedavg"
lr = [0.05, 0.2]
local_steps = 2

[[methods]]
kind = "focus"
label = "FOCUS"
lr = 0.02
local_steps = 2
"""


def test_toml_config_end_to_end(tmp_path, capsys):
    path = tmp_path / "experiment.toml"
    path.write_text(CONFIG)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "fedavg: best lr" in out and "FOCUS" in out  # which step won, and why
    with open(tmp_path / "out" / "metrics.csv") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0]) == list(COLUMNS)
    # 2 lrs x 2 seeds for fedavg, 1 x 2 for FOCUS, 61 rows each
    assert len(table) == (4 + 2) * 61
    assert {r["seed"] for r in table} == {"0", "1"}
    assert (tmp_path / "out" / "error.png").exists()


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (('kind = "uniform_sample"', 'kind = "sometimes"'), "participation.kind"),
        (("size = 3", "size = 30"), "participation"),
        (("local_steps = 2\n\n[[methods]]", "local_step = 2\n\n[[methods]]"), "local_step"),
        (("lr = 0.02", "lr = -1"), "methods[1].lr"),
        (("rounds = 60", 'rounds = "many"'), "rounds"),
        (("dim = 3", "dimension = 3"), "dimension"),
    ],
)
def test_bad_config_gives_one_line_naming_the_key(tmp_path, capsys, change, key):
    path = tmp_path / "bad.toml"
    path.write_text(CONFIG.replace(*change))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stochmix: error:") and key in err and "\n" not in err


def test_module_entry_point_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "stochmix", "run", "--rounds", "50"],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "FOCUS" in done.stdout


def test_cli_errors_are_one_line(capsys):
    assert main(["run", "--rounds", "-3", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stochmix: error:") and "rounds" in err


def test_spectrum_command(capsys):
    assert main(["spectrum", "--nodes", "6", "--samples", "300"]) == 0
    out = capsys.readouterr().out
    assert "SLEM" in out and "E[q_i]" in out and "E[A_S] (assign)" in out
    assert (
        main(["spectrum", "--graph", "one_peer_exponential", "--nodes", "8", "--rules", "natural"])
        == 0
    )
    out = capsys.readouterr().out
    assert "period product (natural)" in out


def test_run_help_lists_every_registered_kind(capsys):
    """``stochmix run --help`` lists the kinds from the registry itself: every method,
    problem, participation process and graph a configuration takes (kgt included)."""
    from stochmix import config

    with pytest.raises(SystemExit) as stop:
        main(["run", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    words = set(re.findall(r"[\w-]+", text))
    for registry in (config.DECENTRALIZED, config.FEDERATED, config.PROBLEMS):
        assert set(registry) <= words, sorted(set(registry) - words)
    assert set(config.PROCESSES) | set(config.GRAPHS) <= words
    decentralized = re.search(r"decentralized methods \(.*?\): (.*?)\n  participation", text, re.S)
    listed = re.findall(r"\w+", decentralized.group(1))
    assert listed == list(config.DECENTRALIZED)  # in the registry's order, kgt among them


def test_config_docstring_names_every_decentralized_method():
    from stochmix import config

    names = set(re.findall(r"``(\w+)``", config.__doc__))
    assert set(config.DECENTRALIZED) <= names, sorted(set(config.DECENTRALIZED) - names)
