"""``stochmix run --save-models`` and ``[output] save_models``: models.npz holds every
run's final node models, the same arrays a Python run of the resolved configuration gives;
what cannot keep them is refused before any run."""

import numpy as np
import pytest

from stochmix import run
from stochmix.cli import main
from stochmix.config import ConfigError, load, parse

CONFIG = """
name = "models"
rounds = 4
seeds = [0, 1]
{storage}
[problem]
kind = "least_squares"
n_clients = 5
dim = 3
[participation]
kind = "bernoulli"
p = 0.6
[[methods]]
kind = "fedavg"
lr = [0.01, 0.02]
local_steps = 2
{output}
"""


def _folder(tmp_path):
    (folder,) = (tmp_path / "runs").iterdir()
    return folder


def test_save_models_writes_every_runs_node_models(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(CONFIG.format(storage="", output=""))
    assert main(["run", "exp.toml", "--quiet", "--no-plot", "--save-models"]) == 0
    folder = _folder(tmp_path)
    assert "final node models:" in capsys.readouterr().out
    saved = np.load(folder / "models.npz")
    assert sorted(saved.files) == [
        f"fedavg, lr={lr}, seed={seed}" for lr in (0.01, 0.02) for seed in (0, 1)
    ]
    exp = load(folder / "config.resolved.toml")  # it says save_models = true
    assert exp.output["save_models"] is True
    spec = exp.methods[0]
    for seed in (0, 1):  # an independent run of the resolved configuration, in Python
        method = spec.build(0.02)
        res = run(method, exp.problem, exp.participation, exp.rounds, seed=seed, storage="full")
        assert saved[f"fedavg, lr=0.02, seed={seed}"].shape == (5, 3)
        np.testing.assert_array_equal(saved[f"fedavg, lr=0.02, seed={seed}"], res.node_models)


def test_the_output_table_key_saves_models_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = CONFIG.format(storage="", output="[output]\nsave_models = true")
    (tmp_path / "exp.toml").write_text(text)
    assert main(["run", "exp.toml", "--quiet", "--no-plot"]) == 0
    assert len(np.load(_folder(tmp_path) / "models.npz").files) == 4


def test_no_models_file_without_the_option(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(CONFIG.format(storage="", output=""))
    assert main(["run", "exp.toml", "--quiet", "--no-plot"]) == 0
    assert not (_folder(tmp_path) / "models.npz").exists()


def test_compact_storage_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(CONFIG.format(storage='storage = "compact"', output=""))
    assert main(["run", "exp.toml", "--quiet", "--no-plot", "--save-models"]) != 0
    err = capsys.readouterr().err
    assert "--save-models needs every node row" in err and "compact" in err
    assert not (tmp_path / "runs").exists()


def test_a_save_models_that_is_not_a_boolean_is_refused_naming_the_key():
    raw = {"problem": {"kind": "quadratic"}, "methods": [{"kind": "fedavg", "lr": 0.1}]}
    with pytest.raises(ConfigError, match="output.save_models must be true or false, got 1"):
        parse({**raw, "output": {"save_models": 1}})
