"""Methods, problems and participation processes of an installed package, named in a
configuration through entry points (``stochmix.config.plugins``).

Each test "installs" a small package the way an installer leaves it: its module and a
``.dist-info`` folder (``METADATA`` and ``entry_points.txt``) on a folder put on
``sys.path``, where ``importlib.metadata`` finds it; nothing is written outside
``tmp_path``.
"""

import csv
import subprocess
import sys
import textwrap

import pytest

from stochmix import config as configs
from stochmix.cli import main
from stochmix.config import ConfigError, parse, plugins
from tests import CHILD_TIMEOUT

MODULE = '''
import numpy as np
import stochmix as sm
from stochmix.engine import grad, mean

class FedAvgMomentum(sm.Method):
    """FedAvg whose server keeps a momentum m."""

    name = "FedAvg+momentum"

    def __init__(self, lr, local_steps=2, beta=0.5):
        self.lr, self.local_steps, self.beta = lr, local_steps, beta

    def blocks(self, n_clients):
        return [sm.Block("x", n_clients + 1, "model"), sm.Block("m", 1)]

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = sm.Equations(ctx)
        x, m = eq.blocks("x", "m")
        x[S] = x.server
        pull = eq.build("pull")
        x[S] -= self.lr * grad(S)
        step = eq.build("local step")
        m.server = self.beta * m.server + mean(x[S] - x.server)
        momentum = eq.build("momentum")
        x.server += m.server
        return [pull, *[step] * self.local_steps, momentum, eq.build("server step")]

class MyGT(sm.algorithms.GradientTracking):
    """A decentralized method of one's own (gradient tracking under another name)."""

def small_problem(n_clients, dim=3, seed=0):
    return sm.problems.Quadratic.random(n_clients, dim, seed=seed)

def every_other(n_clients, start=0):
    even = np.arange(n_clients) % 2 == start
    return sm.participation.Trace(np.stack([even, ~even]), repeat=True)

NOT_A_METHOD = 3

class NotAMethod:
    def __init__(self, lr):
        pass
'''


def _install(tmp_path, monkeypatch, entry_points: str, module: str = MODULE, name="myplug"):
    """Put a package ``name`` with ``entry_points.txt`` on sys.path; forget entry points read
    before (and after the test)."""
    site = tmp_path / "site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(module, encoding="utf-8")
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    plugins.refresh()
    _afresh(monkeypatch, name)
    return site


def _afresh(monkeypatch, name: str) -> None:
    """Make the package ``name`` import afresh in the test and be forgotten after it. Only
    its own entry of sys.modules changes: a copy of the whole dict would lose every module
    first imported during the test (the engine's generated programs, which compiled code
    cached by Numba finds again by name), and break later tests of the same process."""
    monkeypatch.setitem(sys.modules, name, None)  # restored (removed) after the test
    del sys.modules[name]


@pytest.fixture(autouse=True)
def _forget_entry_points():
    plugins.refresh()
    yield
    plugins.refresh()


ENTRY_POINTS = """
    [stochmix.methods]
    fedavg_momentum = myplug:FedAvgMomentum
    my_gt = myplug:MyGT
    not_a_method = myplug:NotAMethod
    a_number = myplug:NOT_A_METHOD
    broken = myplug_missing.module:Thing

    [stochmix.problems]
    small = myplug:small_problem

    [stochmix.participation]
    every_other = myplug:every_other
"""

CONFIG = """
name = "own"
rounds = 20

[problem]
kind = "small"
n_clients = 6

[participation]
kind = "every_other"

[[methods]]
kind = "fedavg_momentum"
lr = [0.01, 0.02]
beta = 0.3

[[methods]]
kind = "fedavg"
lr = 0.01
"""


def test_a_configuration_runs_an_installed_method_problem_and_process(
    tmp_path, monkeypatch, capsys
):
    _install(tmp_path, monkeypatch, ENTRY_POINTS)
    path = tmp_path / "own.toml"
    path.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "run"
    code = main(["run", str(path), "--out", str(out), "--no-plot", "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    with open(out / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["method"] for row in rows} == {"fedavg_momentum", "fedavg"}
    resolved = (out / "config.resolved.toml").read_text()
    assert 'kind = "fedavg_momentum"' in resolved and "local_steps = 2" in resolved
    assert 'kind = "small"' in resolved and 'kind = "every_other"' in resolved
    # the resolved configuration runs again, to the same numbers
    again = tmp_path / "again"
    assert main(["run", str(out / "config.resolved.toml"), "--out", str(again), "--no-plot",
                 "--quiet"]) == 0  # fmt: skip
    assert (again / "metrics.csv").read_bytes() == (out / "metrics.csv").read_bytes()


def test_an_installed_decentralized_method_gets_the_graphs(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, ENTRY_POINTS)
    exp = parse(
        {
            "rounds": 3,
            "problem": {"kind": "quadratic", "n_clients": 6, "dim": 2},
            "graphs": {"kind": "cycle"},
            "methods": [{"kind": "my_gt", "lr": 0.05}],
        }
    )
    (spec,) = exp.methods
    assert spec.options["rule"] == "metropolis"  # its `needs` say doubly stochastic
    assert spec.build(0.05).graphs is spec.graphs


def test_entry_points_are_read_once_and_loaded_only_when_named(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, ENTRY_POINTS)
    calls = []
    original = plugins.metadata.entry_points

    def counting(**kwargs):
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(plugins.metadata, "entry_points", counting)
    builtin = {"problem": {"kind": "quadratic", "n_clients": 4, "dim": 2},
               "methods": [{"kind": "fedavg", "lr": 0.1}]}  # fmt: skip
    parse(builtin)
    assert calls == [] and "myplug" not in sys.modules  # built-in kinds read nothing
    for _ in range(3):
        parse({**builtin, "methods": [{"kind": "fedavg_momentum", "lr": 0.1}]})
    assert calls == [{"group": "stochmix.methods"}]
    assert "myplug" in sys.modules


@pytest.mark.parametrize(
    ("kind", "needles"),
    [
        ("broken", ["entry point broken", "myplug_missing.module:Thing", "myplug 0.1",
                    "does not load", "ModuleNotFoundError"]),
        ("not_a_method", ["entry point not_a_method", "not a subclass of stochmix.Method"]),
        ("a_number", ["entry point a_number", "is a int, not a class or function"]),
        ("no_such_kind", ["methods[0].kind must be one of", "fedavg_momentum", "no_such_kind"]),
    ],
)  # fmt: skip
def test_a_bad_entry_point_is_one_error_naming_it(tmp_path, monkeypatch, kind, needles):
    _install(tmp_path, monkeypatch, ENTRY_POINTS)
    table = {"problem": {"kind": "quadratic", "n_clients": 4, "dim": 2},
             "methods": [{"kind": kind, "lr": 0.1}]}  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        parse(table)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message


def test_a_name_that_a_built_in_kind_has_is_refused_naming_the_distribution(
    tmp_path, monkeypatch, capsys
):
    _install(tmp_path, monkeypatch, "[stochmix.methods]\nfocus = myplug:FedAvgMomentum\n")
    table = {"problem": {"kind": "quadratic", "n_clients": 4, "dim": 2},
             "methods": [{"kind": "fedavg_momentum", "lr": 0.1}]}  # fmt: skip
    with pytest.raises(ConfigError, match=r"entry point focus = 'myplug:FedAvgMomentum' \("
                       r"group stochmix.methods, the distribution myplug 0.1\) is refused: "
                       r"'focus' is a built-in methods kind"):  # fmt: skip
        parse(table)
    path = tmp_path / "c.toml"
    path.write_text(configs.dumps(table), encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("stochmix: error: entry point focus") and "myplug 0.1" in line


def test_a_built_problem_or_process_of_the_wrong_type_is_refused(tmp_path, monkeypatch):
    _install(
        tmp_path,
        monkeypatch,
        "[stochmix.problems]\nwrong = myplug:small_problem\n"
        "[stochmix.participation]\nwrong = myplug:small_problem\n",
    )
    table = {"problem": {"kind": "quadratic", "n_clients": 4, "dim": 2},
             "participation": {"kind": "wrong"},
             "methods": [{"kind": "fedavg", "lr": 0.1}]}  # fmt: skip
    with pytest.raises(ConfigError, match="participation.kind = 'wrong' built a Quadratic, not"
                       " a stochmix ParticipationProcess"):  # fmt: skip
        parse(table)


PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "myplug"
version = "0.1"

[project.entry-points."stochmix.methods"]
fedavg_momentum = "myplug:FedAvgMomentum"

[project.entry-points."stochmix.problems"]
small = "myplug:small_problem"

[project.entry-points."stochmix.participation"]
every_other = "myplug:every_other"
"""


def test_a_package_built_by_pip_from_its_pyproject_extends_the_command(
    tmp_path, monkeypatch, capsys
):
    """The declaration the guide shows, built and installed by pip (into a folder put on
    sys.path: the test leaves the environment as it found it; offline, no build isolation)."""
    pytest.importorskip("setuptools")
    source = tmp_path / "myplug"
    (source / "src" / "myplug").mkdir(parents=True)
    (source / "src" / "myplug" / "__init__.py").write_text(MODULE, encoding="utf-8")
    (source / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    site = tmp_path / "site"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
               "--no-build-isolation", "--target", str(site), str(source)]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, cwd=tmp_path
    )
    if done.returncode != 0 and "No module named pip" in done.stderr:
        pytest.skip("pip is not installed")
    assert done.returncode == 0, done.stderr
    monkeypatch.syspath_prepend(str(site))
    _afresh(monkeypatch, "myplug")
    plugins.refresh()
    assert "fedavg_momentum" in plugins.installed("methods")
    path = tmp_path / "own.toml"
    path.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--no-plot", "--quiet"]) == 0
    assert "fedavg_momentum" in (out / "metrics.csv").read_text()
