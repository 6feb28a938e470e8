"""Bad inputs to a study (issue 41, item 3): each one error naming the argument and the
value, before any work (no folder written, no cell checked)."""

import time

import pytest

from stochmix.cli import main
from stochmix.config import dumps
from stochmix.studies import Study, SweepError
from stochmix.studies import cells as cells_module
from stochmix.studies.execution import check_address, check_options, connect

from .test_studies import base

SWEEP = {"participation.low": [0.1, 0.3]}


def small() -> dict:
    return {**base(rounds=10), "seeds": [0]}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"progress": "x"}, r"progress must be True, False or 'auto', got 'x'"),
        ({"jobs": 0}, r"jobs must be a positive integer, got 0"),
        ({"executor": "gpu"}, r"executor must be one of .* got 'gpu'"),
        ({"timeout": -1}, r"timeout must be a positive number of seconds, got -1"),
        ({"timeout": float("nan"), "executor": "serial"}, r"timeout .* got nan"),
        ({"address": "tcp://h:1", "executor": "process"}, r"address = 'tcp://h:1' applies to"),
        ({"address": ""}, r"address must be a Dask scheduler address .* got ''"),
        ({"address": "tcp://host:notaport"}, r"address = 'tcp://host:notaport' is not a Dask"),
        ({"address": "host"}, r"address = 'host' is not a Dask scheduler address \(it needs"),
    ],
)
def test_bad_run_options_are_refused_before_any_work(tmp_path, kwargs, match):
    study = Study(small(), sweep=SWEEP)
    with pytest.raises(SweepError, match=match):
        study.run(tmp_path / "s", **kwargs)
    assert not (tmp_path / "s").exists()


def test_addresses_checked_without_connecting():
    for good in ("tcp://host:8786", "host:8786", "tls://10.0.0.1:1", "tcp://[::1]:8786"):
        assert check_address(good) == good
    for bad in ("tcp://", "tcp://:8786", "tcp://h:0", "tcp://h:65536", "bad://h:1", 8786):
        with pytest.raises(SweepError, match=repr(bad)):
            check_address(bad)
    with pytest.raises(SweepError, match="needs address="):
        connect(None)
    # a malformed address is refused at once (it used to wait on a timeout, then in
    # Client.__del__), and the message does not blame a timeout
    start = time.perf_counter()
    with pytest.raises(SweepError) as info:
        connect("tcp://host:notaport", timeout=30)
    assert time.perf_counter() - start < 1 and "answered within" not in str(info.value)
    # an address alone means Dask
    assert check_options(address="tcp://h:1") == "dask"
    assert check_options(jobs=2) == "process" and check_options() == "serial"


def test_bad_study_arguments():
    with pytest.raises(SweepError, match=r"config must be a TOML file's path .* got 5"):
        Study(5)
    with pytest.raises(SweepError, match=r"mode = 'zip' needs swept keys"):
        Study(small(), mode="zip")
    with pytest.raises(SweepError, match=r"mode = 'zip' needs swept keys"):
        Study({**small(), "sweep": {"mode": "zip"}})
    with pytest.raises(SweepError, match=r"sweep.mode must be one of .* got 'bogus'"):
        Study(small(), mode="bogus")
    assert len(Study(small()).cells) == 1  # nothing swept: one cell per seed


def test_a_sweep_above_the_limit_is_refused_before_checking_cells(monkeypatch):
    checked = []
    real = cells_module.parse
    monkeypatch.setattr(cells_module, "parse", lambda *a, **k: checked.append(1) or real(*a, **k))
    values = [round(0.1 + 1e-7 * i, 9) for i in range(10**6)]
    start = time.perf_counter()
    with pytest.raises(SweepError, match=r"1000000 cells .* MAX_CELLS = 100000") as info:
        Study(small(), sweep={"participation.low": values})
    assert time.perf_counter() - start < 10 and len(checked) == 1  # the base only
    assert "split" in str(info.value)
    # the count is combinations x seeds (zip: the lists' length)
    two = {**small(), "seeds": [0, 1]}
    monkeypatch.setattr(cells_module, "MAX_CELLS", 7)
    with pytest.raises(SweepError, match=r"8 cells \(4 combinations x 2 seeds\)"):
        Study(two, sweep={"participation.low": [0.1, 0.2], "participation.high": [0.8, 0.9]})
    zipped = {"participation.low": [0.1, 0.2], "participation.high": [0.8, 0.9], "mode": "zip"}
    assert len(Study(two, sweep=zipped).cells) == 4


def test_the_command_refuses_an_empty_or_malformed_address(tmp_path, capsys):
    config = tmp_path / "study.toml"
    config.write_text(dumps({**small(), "sweep": SWEEP}))
    out = tmp_path / "out"
    for address, match in [("", "--address must be"), ("nohost", "--address = 'nohost'")]:
        start = time.perf_counter()
        assert main(["run", str(config), "--out", str(out), "--address", address]) != 0
        err = capsys.readouterr().err
        assert match in err and "Traceback" not in err, err
        assert time.perf_counter() - start < 5 and not out.exists()
