"""``stochmix certify``: a row per method and step with the certified rate, the tuned step,
the sigma-class on demand, and bad options refused with one line naming them."""

import re

import pytest

pytest.importorskip("cvxpy")

from stochmix.cli import main  # noqa: E402

CONFIG = """
name = "ring"
rounds = 100
[problem]
kind = "quadratic"
n_clients = 6
dim = 3
seed = 0
[graphs]
kind = "cycle"
[[methods]]
kind = "extra"
lr = [0.02, 0.05]
[[methods]]
kind = "dgd"
lr = 0.05
"""

FEDERATED = """
name = "fed"
rounds = 10
[problem]
kind = "quadratic"
n_clients = 5
dim = 2
seed = 1
[[methods]]
kind = "fedavg"
lr = 0.05
local_steps = 1
[[methods]]
kind = "scaffold"
lr = 0.02
local_steps = 2
"""


def _write(tmp_path, text, name="c.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _rows(out):
    return [
        line.split()
        for line in out.splitlines()
        if line.strip().startswith(("extra", "dgd", "fedavg", "scaffold"))
    ]


def test_certify_prints_a_rate_per_method_and_step(tmp_path, capsys):
    assert main(["certify", _write(tmp_path, CONFIG)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("class: L = ")
    rows = _rows(out)
    assert [r[0] for r in rows] == ["extra", "extra", "dgd"]
    assert rows[0][-2] == "certified" and 0 < float(rows[0][-4]) < 1
    assert rows[2][-2] == "inexact"
    assert "own graph" in out


def test_certify_tunes_and_takes_the_sigma_class(tmp_path, capsys):
    assert main(["certify", _write(tmp_path, CONFIG), "--sigma", "0.5", "--tune"]) == 0
    out = capsys.readouterr().out
    assert "sigma = 0.5, tuned" in out and "sigma = 0.5" in out
    tuned = [line for line in out.splitlines() if "tuned" in line]
    assert len(tuned) == 1  # DGD is inexact: nothing to tune


def test_certify_federated_methods(tmp_path, capsys):
    assert main(["certify", _write(tmp_path, FEDERATED), "--clients", "3"]) == 0
    out = capsys.readouterr().out
    assert "full participation, 3 clients" in out
    assert all(row[-2] == "certified" for row in _rows(out))


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--sigma", "1.5"], "--sigma"),
        (["--clients", "0"], "--clients"),
        (["--mu", "-1", "--L", "1"], "mu"),
    ],
)
def test_bad_options_are_one_line_naming_them(tmp_path, capsys, extra, match):
    assert main(["certify", _write(tmp_path, CONFIG), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stochmix: error:") and match in err and len(err.splitlines()) == 1


def test_spectrum_takes_the_fastest_rule_by_its_singular_name(capsys):
    """``stochmix spectrum --rule fastest`` (the issue's spelling; ``--rules`` takes several):
    the fastest-mixing chain on the 9-cycle has SLEM 0.784735 < Metropolis's 0.844."""
    assert main(["spectrum", "--graph", "cycle", "--nodes", "9", "--rule", "fastest"]) == 0
    out = capsys.readouterr().out
    assert "(fastest)" in out and "0.784735" in out


GOSSIP = """
name = "gossip"
rounds = 10
[problem]
kind = "quadratic"
n_clients = 6
dim = 2
seed = 0
[graphs]
kind = "cycle"
[activation]
kind = "random_edge"
[[methods]]
kind = "gradient_tracking"
lr = 0.05
"""


@pytest.mark.parametrize(
    "text,extra,match",
    [
        (GOSSIP, [], r"\[activation\] \(kind = 'random_edge'\).*synchronous"),
        (FEDERATED, ["--sigma", "0.5"], "--sigma applies to decentralized"),
        (CONFIG, ["--clients", "3"], "--clients applies"),
        (FEDERATED, ["--clients", "100000"], r"--clients must be .*\[1, 32\].*100000"),
    ],
    ids=["activation", "sigma federated", "clients decentralized", "clients bound"],
)
def test_what_the_certificates_would_ignore_is_refused(tmp_path, capsys, text, extra, match):
    """An [activation] table, --sigma without a decentralized method, --clients without a
    federated one and --clients past the bound: one line each, exit status 2, no solve."""
    assert main(["certify", _write(tmp_path, text), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stochmix: error:") and len(err.splitlines()) == 1
    assert re.search(match, err), err
