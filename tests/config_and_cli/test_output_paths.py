"""Run names are safe slugs, output files are never written through links, and a bad
--out or a config that is not UTF-8 is found before any work."""

import os

import pytest

from stochmix.cli import main

CONFIG = """
name = "{name}"
rounds = 3
[problem]
kind = "quadratic"
n_clients = 4
dim = 2
[[methods]]
kind = "fedavg"
lr = 0.1
"""


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a b", ".hidden", "", "x" * 65])
def test_unsafe_run_names_are_refused_naming_the_key(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(CONFIG.format(name=name))
    assert main(["run", "exp.toml", "--quiet", "--no-plot"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stochmix: error: name must be")
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


def test_a_file_name_with_odd_characters_gives_a_safe_default_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my exp!.toml").write_text(CONFIG.replace('name = "{name}"\n', ""))
    assert main(["run", "my exp!.toml", "--quiet", "--no-plot"]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("my_exp_-")


def test_output_files_are_not_written_through_links(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(CONFIG.format(name="safe"))
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious")
    os.symlink(victim, out / "config.resolved.toml")
    assert main(["run", "exp.toml", "--out", str(out), "--quiet", "--no-plot"]) != 0
    assert "is a link" in capsys.readouterr().err
    assert victim.read_text() == "precious"


def test_a_bad_out_is_found_before_the_experiment(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(CONFIG.format(name="safe"))
    blocker = tmp_path / "a file"
    blocker.write_text("")
    for out in (blocker, blocker / "below"):
        assert main(["run", "exp.toml", "--out", str(out), "--quiet"]) != 0
        err = capsys.readouterr()
        assert err.err.count("\n") == 1 and "--out" in err.err
        assert "rounds" not in err.out.split("\n", 1)[1]  # no table: nothing ran


def test_a_config_that_is_not_utf8_names_the_file(tmp_path, capsys):
    path = tmp_path / "latin.toml"
    path.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    assert main(["run", str(path)]) != 0
    err = capsys.readouterr().err
    assert "latin.toml" in err and "not UTF-8" in err and err.count("\n") == 1
