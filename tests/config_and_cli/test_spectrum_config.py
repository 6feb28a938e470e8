"""``stochmix spectrum CONFIG`` and ``stochmix run CONFIG`` describe the same graphs, every
graph kind of a configuration has a ``--graph`` of the same name, and the old spellings
still work for one release with a deprecation warning."""

import re
import warnings

import numpy as np
import pytest

from stochmix import config as configs
from stochmix.cli import build_parser, main
from stochmix.mixing import MessageDrops, RandomSequence
from stochmix.mixing.spectral_sequences import sequence_spectrum

CONFIG = """
name = "drops"
rounds = 5

[problem]
kind = "least_squares"
n_clients = 12
dim = 3
rows_per_client = 5

[graphs]
kind = "{kind}"
{extra}

[[methods]]
kind = "{method}"
lr = 0.01
"""

CASES = {
    "one_peer_exponential": ("push_sum", "drops = 0.2\ndrop_seed = 4"),
    "directed_ring": ("gradient_tracking", ""),
    "erdos_renyi": ("dgd", "p = 0.3\nseed = 7\ndrops = 0.1\ndrop_symmetric = true"),
    "random_directed": ("push_sum", "seed = 2"),
    "cycle": ("gradient_tracking", 'rule = "metropolis"'),
    "complete": ("dgd", ""),
}


def _write(tmp_path, kind: str) -> str:
    method, extra = CASES[kind]
    path = tmp_path / f"{kind}.toml"
    path.write_text(CONFIG.format(kind=kind, method=method, extra=extra), encoding="utf-8")
    return str(path)


def _spectrum_args(*argv: str):
    return build_parser().parse_args(["spectrum", *argv])


@pytest.mark.parametrize("kind", sorted(CASES))
def test_spectrum_of_a_config_is_the_run_s_graph_sequence(tmp_path, kind):
    from stochmix._spectrum_command import spectrum_sequence

    path = _write(tmp_path, kind)
    run_graphs = configs.load(path).methods[0].graphs  # what `stochmix run` mixes over
    spectrum_graphs, resolved, _ = spectrum_sequence(_spectrum_args(path))
    assert type(spectrum_graphs) is type(run_graphs)
    assert spectrum_graphs.fingerprint() == run_graphs.fingerprint()
    assert resolved == configs.load(path).tables["graphs"]
    for rule in ("row", "column"):
        for k in range(6):
            np.testing.assert_array_equal(
                spectrum_graphs.matrix(k, rule).toarray(), run_graphs.matrix(k, rule).toarray()
            )


def test_spectrum_config_prints_the_drops_and_the_run_s_figures(tmp_path, capsys):
    path = _write(tmp_path, "erdos_renyi")
    assert main(["spectrum", path, "--rules", "metropolis", "--steps", "8"]) == 0
    out = capsys.readouterr().out
    heading = out.splitlines()[0]
    assert "erdos_renyi, 12 nodes, p 0.3, seed 7, drops 0.1" in heading
    assert "8 sampled steps" in heading
    graphs = configs.load(path).methods[0].graphs
    assert isinstance(graphs, MessageDrops)
    expected = sequence_spectrum(graphs, "metropolis", steps=8)
    slem = expected.statistics()["median"]["slem"]
    row = next(line for line in out.splitlines() if "step median (metropolis)" in line)
    assert f"{slem:.6g}" in row.split()


@pytest.mark.parametrize(
    ("kind", "rules"),
    [("cycle", ["metropolis"]), ("random_directed", ["column"]), ("complete", ["metropolis"]),
     ("one_peer_exponential", ["column"])],
)  # fmt: skip
def test_spectrum_of_a_config_takes_the_rules_its_methods_mix_with(tmp_path, capsys, kind, rules):
    from stochmix._spectrum_command import methods_rules

    path = _write(tmp_path, kind)
    assert methods_rules(path) == rules
    assert main(["spectrum", path, "--steps", "4"] if kind != "cycle" and kind != "complete"
                else ["spectrum", path]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"({rules[0]})" in out and "(row)" not in out


def test_cycle_is_undirected_so_metropolis_applies(capsys):
    assert main(["spectrum", "--graph", "cycle", "--nodes", "8", "--rules", "metropolis"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "cycle, 8 nodes" in captured.out


@pytest.mark.parametrize("kind", sorted(configs.GRAPHS))
def test_every_config_graph_kind_is_a_spectrum_graph(capsys, kind):
    assert main(["spectrum", "--graph", kind, "--nodes", "6", "--rules", "row"]) == 0
    assert capsys.readouterr().err == ""


def test_flags_take_the_edge_probability_and_drops(capsys):
    argv = ["--graph", "erdos_renyi", "--nodes", "10", "--p", "0.5", "--drops", "0.2"]
    sequence, resolved, _ = __import__(
        "stochmix._spectrum_command", fromlist=["spectrum_sequence"]
    ).spectrum_sequence(_spectrum_args(*argv, "--seed", "3"))
    same, _, _ = configs.sections.graph_sequence(
        {"kind": "erdos_renyi", "p": 0.5, "seed": 3, "drops": 0.2, "drop_seed": 3}, 10
    )
    assert sequence.fingerprint() == same.fingerprint()
    assert resolved["p"] == 0.5 and resolved["drops"] == 0.2


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("one-peer-exponential", "one_peer_exponential"),
        ("ring", "directed_ring"),
        ("erdos-renyi", "erdos_renyi"),
        ("random-directed", "random_directed"),
    ],
)
def test_old_graph_spellings_warn_on_the_command_line(capsys, old, new):
    assert main(["spectrum", "--graph", old, "--nodes", "6", "--rules", "row"]) == 0
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("stochmix: warning: --graph") and repr(old) in line and repr(new) in line
    assert f"{new}, 6 nodes" in captured.out


def test_old_python_and_toml_spellings_warn_and_give_the_new_name(tmp_path):
    with pytest.warns(DeprecationWarning, match="'random_directed'"):
        old = RandomSequence(8, "directed_ring_with_random_edges", seed=1)
    assert old.kind == "random_directed"
    assert old.fingerprint() == RandomSequence(8, "random_directed", seed=1).fingerprint()
    with pytest.warns(DeprecationWarning, match="'gilbert_elliott'"):
        drops = MessageDrops(old, model="gilbert-elliott", p_good_to_bad=0.1, p_bad_to_good=0.5)
    assert drops.model == "gilbert_elliott"
    table = {"kind": "cycle", "drop_model": "gilbert-elliott", "drop_p_good_to_bad": 0.1,
             "drop_p_bad_to_good": 0.5}  # fmt: skip
    with pytest.warns(DeprecationWarning, match="graphs.drop_model 'gilbert-elliott'"):
        _, resolved, _ = configs.sections.graph_sequence(table, 8)
    assert resolved["drop_model"] == "gilbert_elliott"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RandomSequence(8, "random_directed", seed=1)  # the new names do not warn


BAD = [
    (["CONFIG", "--graph", "cycle"], "--graph", "cycle"),
    (["CONFIG", "--nodes", "8"], "--nodes", "8"),
    (["CONFIG", "--seed", "3"], "--seed", "3"),
    (["CONFIG", "--low", "0.3"], "--low", "0.3"),
    (["CONFIG", "--rules", "sideways"], "--rules", "sideways"),
    (["CONFIG", "--steps", "5"], "--steps", "5"),  # directed_ring is periodic
    (["--graph", "cycle", "--p", "0.4"], "--p", "0.4"),
    (["--graph", "erdos_renyi", "--p", "1.5"], "--p", "1.5"),
    (["--graph", "cycle", "--drops", "2"], "--drops", "2"),
    (["--drops", "0.1"], "--drops", "0.1"),
    (["missing.toml"], "missing.toml", "does not exist"),
]


@pytest.mark.parametrize(("argv", "needle", "value"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_spectrum_input_is_one_line_naming_it(tmp_path, capsys, argv, needle, value):
    path = _write(tmp_path, "directed_ring")
    argv = [path if a == "CONFIG" else str(tmp_path / a) if a.endswith(".toml") else a
            for a in argv]  # fmt: skip
    assert main(["spectrum", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("stochmix: error: ") and needle in line and value in line


def test_config_without_graphs_and_too_many_nodes_are_refused(tmp_path, capsys):
    path = tmp_path / "federated.toml"
    path.write_text(configs.dumps(configs.default_table()), encoding="utf-8")
    assert main(["spectrum", str(path)]) == 2
    assert "no [graphs] table" in capsys.readouterr().err
    big = tmp_path / "big.toml"
    big.write_text(
        CONFIG.format(kind="cycle", method="dgd", extra="").replace("12", "1200"),
        encoding="utf-8",
    )
    assert main(["spectrum", str(big)]) == 2
    assert re.search(r"problem\.n_clients must be <= 1000.*got 1200", capsys.readouterr().err)


def test_an_old_spelling_in_a_configuration_is_one_warning_line(tmp_path, capsys):
    path = tmp_path / "ge.toml"
    text = CONFIG.format(
        kind="cycle",
        method="push_sum",
        extra='drop_model = "gilbert-elliott"\ndrop_p_good_to_bad = 0.1\ndrop_p_bad_to_good = 0.5',
    )
    path.write_text(text, encoding="utf-8")
    assert main(["spectrum", str(path), "--steps", "3"]) == 0
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line == (
        "stochmix: warning: graphs.drop_model 'gilbert-elliott' is deprecated and will be "
        "refused in the next release; write 'gilbert_elliott'"
    )
    assert "gilbert_elliott drops" in captured.out
