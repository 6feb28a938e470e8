"""The x axis of the command's plots (issue 40, item 6): --x and [output] x, one name in
Python, TOML and the command; time without a clock is one error before any run."""

import csv

import numpy as np
import pytest

from stochmix import config, experiments
from stochmix.cli import build_parser, main
from stochmix.config import ConfigError, dumps

RAW = {
    "name": "axis",
    "rounds": 12,
    "seeds": [0],
    "problem": {"kind": "quadratic", "n_clients": 6, "dim": 3},
    "participation": {"kind": "uniform_sample", "size": 3},
    "methods": [{"kind": "focus", "label": "FOCUS", "lr": 0.01}],
}


def _captured(monkeypatch):
    """The x data of the lines of every figure saved."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    seen = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        seen.append(
            [(line.get_xdata(), self.axes[0].get_xlabel()) for line in self.axes[0].get_lines()]
        )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return seen


@pytest.mark.parametrize("where", ["option", "table"])
def test_error_against_messages(tmp_path, monkeypatch, where):
    seen = _captured(monkeypatch)
    path = tmp_path / "exp.toml"
    raw = dict(RAW) if where == "option" else {**RAW, "output": {"x": "messages"}}
    path.write_text(dumps(raw))
    extra = ["--x", "messages"] if where == "option" else []
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet", *extra]) == 0
    ((xdata, label),) = seen[-1]
    with open(tmp_path / "o" / "metrics.csv") as handle:
        messages = [int(line["messages"]) for line in csv.DictReader(handle)]
    assert label == "messages" and np.array_equal(xdata, np.cumsum(messages))  # independent
    assert messages[1] > 0


def test_time_needs_a_clock_before_any_run(tmp_path, capsys):
    path = tmp_path / "exp.toml"
    path.write_text(dumps(RAW))
    out = tmp_path / "never"
    assert main(["run", str(path), "--out", str(out), "--x", "time"]) == 2
    err = capsys.readouterr().err
    assert "--x = 'time'" in err and "[clock]" in err and "FOCUS" in err
    assert not out.exists()
    with pytest.raises(ConfigError, match=r"output\.x = 'time' needs simulated time.*\[clock\]"):
        config.parse({**RAW, "output": {"x": "time"}})
    with pytest.raises(ConfigError, match=r"output\.x must be one of .*got 'wall'"):
        config.parse({**RAW, "output": {"x": "wall"}})
    with pytest.raises(ConfigError, match=r"unknown key output\.y"):
        config.parse({**RAW, "output": {"y": "round"}})
    clocked = config.parse({**RAW, "clock": {"compute": 0.5}, "output": {"x": "time"}})
    assert clocked.plot_x == "time" and clocked.resolved()["output"] == {"x": "time"}
    assert "output" not in config.parse(RAW).resolved()  # the resolved text of old runs stays


def test_result_plot_time_without_a_clock_says_to_pass_one():
    import stochmix as sm

    exp = config.parse(RAW)
    (outcome,) = experiments.run_experiment(exp, progress=False, log=None)
    with pytest.raises(ValueError, match=r"x='time'.*pass a clock.*clock="):
        outcome.best[0].plot(x="time")
    assert sm.timing.Clock  # the name the message gives exists


def test_help_describes_the_option(capsys):
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    axes = "--x {round,gradients,messages,floats,sample_gradients,time}"
    assert axes in text and "[output] x" in text
