"""Every key of a configuration can be swept (issue 40, item 7): [clock] keys at any
depth, activation.kind and its keys, graphs.*, whole tables (readable cell names and
plots); an asynchronous method and a deadline share no [clock]: one error says how to
compare them, and the study it names runs."""

import csv

import pytest

from stochmix.config import ConfigError, parse
from stochmix.studies import Study, SweepError

DECENTRALIZED = {
    "name": "dec",
    "rounds": 15,
    "problem": {"kind": "quadratic", "n_clients": 8, "dim": 3},
    "graphs": {"kind": "cycle"},
    "activation": {"kind": "random_edge"},
    "methods": [{"kind": "dgd", "label": "DGD", "lr": 0.05}],
}

CLOCKED = {
    "name": "clocked",
    "rounds": 10,
    "problem": {"kind": "quadratic", "n_clients": 10, "dim": 3},
    "participation": {"kind": "full"},
    "clock": {"compute": {"kind": "exponential", "mean": 0.1}, "deadline": 2.0},
    "methods": [{"kind": "fedavg", "label": "FedAvg", "lr": 0.01}],
}


def test_clock_activation_and_graph_keys_are_sweepable():
    study = Study(
        CLOCKED,
        sweep={
            "clock.deadline": [0.5, 1.0],
            "clock.compute.mean": [0.2],
            "clock.partial_work": [True],
        },
    )
    clocks = [parse(_raw(c)).clock for c in study.cells]
    assert [c.deadline for c in clocks] == [0.5, 1.0] and all(c.partial_work for c in clocks)
    assert all(parse(_raw(c)).tables["clock"]["compute"]["mean"] == 0.2 for c in study.cells)
    swept = {
        "activation.kind": ["random_edge", "poisson_clocks"],
        "graphs.kind": ["cycle", "complete"],
    }
    study = Study(DECENTRALIZED, sweep=swept)
    kinds = [
        (parse(_raw(c)).tables["participation"]["kind"], parse(_raw(c)).tables["graphs"]["kind"])
        for c in study.cells
    ]
    assert kinds == [
        ("random_edge", "cycle"),
        ("random_edge", "complete"),
        ("poisson_clocks", "cycle"),
        ("poisson_clocks", "complete"),
    ]
    assert Study(DECENTRALIZED, sweep={"activation.rate": [2.0]}).cells  # a key of the kind
    with pytest.raises(
        SweepError, match=r"no key 'clock\.dedline'.*close keys: \['clock\.deadline'"
    ):
        Study(CLOCKED, sweep={"clock.dedline": [1.0]})
    with pytest.raises(SweepError, match=r"'activation\.rat'.*unknown key 'rat'"):
        Study(DECENTRALIZED, sweep={"activation.rat": [1.0]})


def _raw(cell):
    from stochmix._toml import tomllib

    return tomllib.loads(cell.text)


def test_a_whole_table_sweep_has_readable_cells_and_plots(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    tables = [{"kind": "poisson_clocks"}, {"kind": "random_edge", "rate": 2.0}]
    study = Study({**DECENTRALIZED, "seeds": [0, 1]}, sweep={"activation": tables})
    assert [c.name for c in study.cells[::2]] == [
        "activation=poisson_clocks__seed=0",
        "activation=random_edge_rate=2.0__seed=0",
    ]
    study.run(tmp_path / "s", progress=False)
    assert not study.failures
    ax = study.plot(y="final_relative_error")  # no "unhashable dict"
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "poisson_clocks",
        "random_edge(rate=2.0)",
    ]
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0.0, 1.0]
    rows = list(csv.DictReader(open(tmp_path / "s" / "study.csv")))
    for position, table in enumerate(tables):  # the median over seeds, independently
        mine = [float(r["final_relative_error"]) for r in rows if r["activation"] == _json(table)]
        assert len(mine) == 2
        assert line.get_ydata()[position] == pytest.approx(
            sorted(mine)[0] / 2 + sorted(mine)[1] / 2
        )
    panels = study.plot_curves(x="time")
    assert [p.get_title() for p in panels] == [
        "activation = poisson_clocks",
        "activation = random_edge(rate=2.0)",
    ]


def _json(value):
    import json

    return json.dumps(value, separators=(",", ":"))


def test_fedbuff_and_a_deadline_one_error_then_the_study_it_names():
    raw = {
        **CLOCKED,
        "methods": [
            {"kind": "fedavg", "label": "FedAvg", "lr": 0.01},
            {"kind": "fedbuff", "label": "FedBuff", "lr": 0.01, "buffer": 2, "concurrency": 3},
        ],
    }
    with pytest.raises(ConfigError) as error:
        parse(raw)
    message = str(error.value)
    assert "deadline" in message and 'mode = "zip"' in message and "\n" not in message
    fedavg, fedbuff = raw["methods"]
    study = Study(
        {**CLOCKED, "seeds": [0]},
        sweep={
            "mode": "zip",
            "clock": [{"compute": 0.1, "deadline": 2.0}, {"compute": 0.1}],
            "methods": [[fedavg], [fedbuff]],
        },
    )
    assert [c.name for c in study.cells] == [
        "clock=compute=0.1_deadline=2.0__methods=FedAvg_lr=0.01__seed=0",
        "clock=compute=0.1__methods=FedBuff_lr=0.01_buffer=2_concurrency=3__seed=0",
    ]


def test_the_guide_comparison_of_fedbuff_and_a_deadline_reads_as_it_says():
    import re
    from pathlib import Path

    from stochmix._toml import tomllib

    page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "studies.md"
    block = next(
        b for b in re.findall(r"```toml\n(.*?)```", page.read_text(), re.S) if "fedbuff" in b
    )
    study = Study({**CLOCKED, "seeds": [0], **tomllib.loads(block)})
    labels = [[m["label"] for m in _raw(c)["methods"]] for c in study.cells]
    assert labels == [["FedAvg"], ["FedBuff"]]
    assert [_raw(c)["clock"].get("deadline") for c in study.cells] == [2.0, None]
