"""Participation plugins may not take the names a configuration already gives a meaning
(issue 41): the activation kinds of decentralized methods, and old spellings (aliases)."""

import pytest

from stochmix.config import ConfigError, parse, plugins
from tests.config_and_cli.test_entry_points import _install

TABLE = {  # a federated configuration that names an installed participation kind
    "problem": {"kind": "quadratic", "n_clients": 4, "dim": 2},
    "participation": {"kind": "every_other"},
    "methods": [{"kind": "fedavg", "lr": 0.1}],
}


@pytest.fixture(autouse=True)
def _forget_entry_points():
    plugins.refresh()
    yield
    plugins.refresh()


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("random_edge", r"'random_edge' is a built-in participation kind"),
        ("poisson_clocks", r"'poisson_clocks' is a built-in participation kind"),
        ("uniform", r"'uniform' is an old spelling of the built-in participation kind "
                    r"'uniform_sample'"),
        ("weighted", r"'weighted' is an old spelling .* 'weighted_sample'"),
    ],
)  # fmt: skip
def test_a_participation_plugin_named_like_a_built_in_meaning_is_refused(
    tmp_path, monkeypatch, name, needle
):
    _install(
        tmp_path, monkeypatch,
        f"[stochmix.participation]\nevery_other = myplug:every_other\n"
        f"{name} = myplug:every_other\n",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=rf"entry point {name} = 'myplug:every_other'.*{needle}"):
        parse(TABLE)
    with pytest.raises(ConfigError, match="myplug 0.1"):
        plugins.installed("participation")
    with pytest.raises(ConfigError, match=needle):  # named itself: refused, no AttributeError
        parse({**TABLE, "participation": {"kind": name}})


def test_a_plugin_of_its_own_name_is_still_read(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, "[stochmix.participation]\nevery_other = myplug:every_other\n")
    assert plugins.installed("participation") == ["every_other"]
