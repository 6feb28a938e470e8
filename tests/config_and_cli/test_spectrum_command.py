"""``stochmix spectrum`` on time-varying sequences, and ``sequence_spectrum`` behind it.

The command must show every step of a period (not only step 0), min / median / max over
sampled steps of a random sequence, refuse weights that are not what their rule promises,
and exit non-zero on every mistake with one line naming the option.
"""

import re

import networkx as nx
import numpy as np
import pytest

from stochmix.cli import main
from stochmix.mixing import OnePeerExponential, PeriodicSequence, RandomSequence
from stochmix.mixing.spectral_sequences import (
    RULE_CLAIMS,
    SequenceSpectrum,
    check_rule,
    sequence_spectrum,
    summary_statistics,
)

COLUMNS = ("kind", "n", "rho", "SLEM", "gap", "delta", "contraction")


def table(out: str) -> dict[str, dict]:
    """The rows of the printed table: label -> {column: text}, cells split on 2+ spaces."""
    rows = {}
    for line in out.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 1 + len(COLUMNS) and not cells[0].startswith(("matrix", "-")):
            rows[cells[0]] = dict(zip(COLUMNS, cells[1:], strict=True))
    return rows


def number(cell: str) -> float | None:
    return None if cell == "-" else float(cell)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["spectrum", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def slem_by_eigvals(W: np.ndarray) -> float:
    """Second-largest eigenvalue modulus of a stochastic matrix, straight from numpy."""
    moduli = np.sort(np.abs(np.linalg.eigvals(W)))[::-1]
    return float(moduli[1])


def one_peer_matrix(n: int, m: int) -> np.ndarray:
    """``W[i, i] = W[i, (i + 2^m) mod n] = 1/2``, written out independently of the library."""
    W = 0.5 * np.eye(n)
    W[np.arange(n), (np.arange(n) + 2**m) % n] += 0.5
    return W


# ------------------------------------------------------------------------ the command


def test_one_peer_exponential_shows_every_step_of_the_period(capsys):
    code, out, err = run(capsys, "--graph", "one_peer_exponential", "--nodes", "16")
    assert code == 0 and err == ""
    assert "period 4" in out.splitlines()[0]
    rows = table(out)
    for rule in ("row", "column"):
        assert [label for label in rows if label.endswith(f"({rule})")] == [
            f"k=0 ({rule})",
            f"k=1 ({rule})",
            f"k=2 ({rule})",
            f"k=3 ({rule})",
            f"period product ({rule})",
        ]
        step0 = rows[f"k=0 ({rule})"]
        assert number(step0["SLEM"]) == pytest.approx(np.cos(np.pi / 16), abs=1e-6)
        for k in (1, 2, 3):  # 2, 4, 8 disjoint cycles: no contraction at all
            step = rows[f"k={k} ({rule})"]
            assert number(step["SLEM"]) == 1.0
            assert number(step["gap"]) == 0.0
            assert number(step["rho"]) == 1.0
        prod = rows[f"period product ({rule})"]
        assert number(prod["SLEM"]) < 1e-12  # W_3 W_2 W_1 W_0 = 11'/16 exactly
        assert number(prod["gap"]) == pytest.approx(1.0)


def test_natural_weights_of_a_01_adjacency_are_refused(capsys):
    code, out, err = run(capsys, "--graph", "erdos_renyi", "--rules", "row", "natural")
    assert code != 0
    assert out == ""  # nothing half-printed: the row rule's table is not shown either
    lines = err.strip().splitlines()
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("stochmix: error: ")
    assert "natural" in line and "step 0" in line and "row-stochastic" in line
    assert re.search(r"row \d+ sums to \d", line)


def test_metropolis_on_a_directed_graph_is_refused(capsys):
    code, out, err = run(capsys, "--graph", "random_directed", "--rules", "metropolis")
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "metropolis" in err and "step 0" in err and "undirected" in err


def test_unknown_rule_exits_non_zero(capsys):
    code, out, err = run(capsys, "--graph", "directed_ring", "--rules", "row", "sideways")
    assert code != 0 and out == ""
    assert err.strip().splitlines() == [
        "stochmix: error: --rules: unknown rule 'sideways'; choose from natural,"
        " metropolis, row, column, fastest, fdla"
    ]


@pytest.mark.parametrize("graph", [[], ["--graph", "directed_ring"]])
@pytest.mark.parametrize("nodes", ["0", "-4"])
def test_bad_nodes_names_the_option(capsys, graph, nodes):
    code, out, err = run(capsys, *graph, "--nodes", nodes)
    assert code != 0 and out == ""
    assert err.strip().splitlines() == [
        f"stochmix: error: --nodes must be a positive integer, got {nodes}"
    ]


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [
        (["--low", "0"], "--low", "0.0"),
        (["--high", "1.5"], "--high", "1.5"),
        (["--low", "0.5", "--high", "0.2"], "--high", "0.2"),
        (["--samples", "0"], "--samples", "0"),
        (["--seed", "-1"], "--seed", "-1"),
        (["--rules", "row"], "--rules", "row"),
        (["--steps", "10"], "--steps", "10"),
        (["--graph", "directed_ring", "--samples", "50"], "--samples", "50"),
        (["--graph", "directed_ring", "--low", "0.3"], "--low", "0.3"),
        (["--graph", "one_peer_exponential", "--steps", "5"], "--steps", "5"),
        (["--graph", "erdos_renyi", "--steps", "0"], "--steps", "0"),
        (["--graph", "erdos_renyi", "--window", "0"], "--window", "0"),
        (["--graph", "erdos_renyi", "--steps", "3", "--window", "5"], "--window", "5"),
        (["--graph", "directed_ring", "--window", "-2"], "--window", "-2"),
        (["--graph", "one_peer_exponential", "--nodes", "100000"], "--nodes", "100000"),
        (["--graph", "erdos_renyi", "--nodes", "1001"], "--nodes", "1001"),
    ],
)
def test_every_bad_option_is_one_line_and_a_non_zero_exit(capsys, argv, option, value):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stochmix: error: ")
    assert option in lines[0] and value in lines[0]


def test_random_sequence_shows_min_median_max_and_the_sample_count(capsys):
    argv = ["--graph", "random_directed", "--nodes", "12", "--steps", "20", "--seed", "3"]
    code, out, err = run(capsys, *argv, "--rules", "row", "column")
    assert code == 0 and err == ""
    heading = out.splitlines()[0]
    assert "20 sampled steps" in heading
    assert "5 disjoint windows of 4 steps" in heading  # ceil(log2 12) = 4, 20 // 4 = 5
    rows = table(out)
    sequence = RandomSequence(12, "random_directed", seed=3)
    for rule in ("row", "column"):
        slems = [slem_by_eigvals(sequence.matrix(k, rule).toarray()) for k in range(20)]
        printed = [number(rows[f"step {s} ({rule})"]["SLEM"]) for s in ("min", "median", "max")]
        expected = [np.min(slems), np.median(slems), np.max(slems)]
        np.testing.assert_allclose(printed, expected, rtol=1e-5)
        products = [number(rows[f"product {s} ({rule})"]["SLEM"]) for s in ("min", "max")]
        assert 0 <= products[0] <= products[1] < printed[0]  # 4 steps mix more than one


def test_federated_mode_still_works(capsys):
    code, out, err = run(capsys, "--nodes", "6", "--samples", "300")
    assert code == 0 and err == ""
    rows = table(out)
    assert set(rows) == {"E[A_S] (assign)", "E[C_S] (collect)", "E[A_all average(S)]"}
    assert rows["E[A_S] (assign)"]["kind"] == "row" and rows["E[A_S] (assign)"]["n"] == "7"


# ------------------------------------------------------------------ sequence_spectrum


def test_one_peer_steps_and_period_product_match_numpy_eigvals():
    n = 16
    spectrum = sequence_spectrum(OnePeerExponential(n), "natural")
    assert isinstance(spectrum, SequenceSpectrum)
    assert (spectrum.n, spectrum.period, spectrum.window) == (n, 4, 4)
    assert [s["step"] for s in spectrum.steps] == [0, 1, 2, 3]
    matrices = [one_peer_matrix(n, m) for m in range(4)]
    for summary, W in zip(spectrum.steps, matrices, strict=True):
        assert summary["slem"] == pytest.approx(slem_by_eigvals(W), abs=1e-12)
        assert summary["spectral_radius"] == pytest.approx(np.abs(np.linalg.eigvals(W)).max())
        assert summary["spectral_gap"] == pytest.approx(1 - slem_by_eigvals(W), abs=1e-12)
        assert summary["kind"] == "doubly"
    assert [s["slem"] for s in spectrum.steps[1:]] == [1.0, 1.0, 1.0]  # clipped, not 1+2e-16
    (prod,) = spectrum.products
    assert (prod["start"], prod["length"]) == (0, 4)
    P = matrices[3] @ matrices[2] @ matrices[1] @ matrices[0]
    np.testing.assert_allclose(P, np.full((n, n), 1 / n), atol=1e-14)
    assert prod["slem"] == pytest.approx(slem_by_eigvals(P), abs=1e-12)


def test_random_sequence_steps_windows_and_statistics_match_numpy():
    sequence = RandomSequence(10, "random_directed", p=0.2, seed=5)
    spectrum = sequence_spectrum(sequence, "column", steps=7, window=3)
    assert spectrum.sampled and spectrum.period is None
    assert [s["step"] for s in spectrum.steps] == list(range(7))
    matrices = [sequence.matrix(k, "column").toarray() for k in range(7)]
    slems = [slem_by_eigvals(W) for W in matrices]
    np.testing.assert_allclose([s["slem"] for s in spectrum.steps], slems, atol=1e-12)
    # two disjoint windows [0, 3) and [3, 6); W_s is applied first
    assert [(p["start"], p["length"]) for p in spectrum.products] == [(0, 3), (3, 3)]
    for prod, s in zip(spectrum.products, (0, 3), strict=True):
        P = matrices[s + 2] @ matrices[s + 1] @ matrices[s]
        assert prod["slem"] == pytest.approx(slem_by_eigvals(P), abs=1e-12)
        assert prod["kind"] == "column"
    stats = spectrum.statistics()
    assert stats["min"]["count"] == 7
    assert stats["min"]["slem"] == pytest.approx(min(slems))
    assert stats["median"]["slem"] == pytest.approx(float(np.median(slems)))
    assert stats["max"]["slem"] == pytest.approx(max(slems))
    assert stats["max"]["spectral_gap"] == pytest.approx(1 - min(slems))
    assert stats["min"]["ergodicity"] is None  # Dobrushin's coefficient needs rows
    assert spectrum.statistics("products")["min"]["count"] == 2


def test_default_window_is_log2_n_and_default_sample_is_100():
    spectrum = sequence_spectrum(RandomSequence(12, seed=0), "metropolis")
    assert len(spectrum.steps) == 100 and spectrum.window == 4
    assert len(spectrum.products) == 25


def test_rule_claims_are_checked_at_the_step_that_breaks_them():
    good = nx.DiGraph()  # W = [[1/2, 1/2], [1/2, 1/2]]: row-stochastic
    good.add_weighted_edges_from([(0, 0, 0.5), (1, 0, 0.5), (0, 1, 0.5), (1, 1, 0.5)])
    column_only = nx.DiGraph()  # W = [[1, 1/2], [0, 1/2]]: column- but not row-stochastic
    column_only.add_weighted_edges_from([(0, 0, 1.0), (1, 0, 0.5), (1, 1, 0.5)])
    sequence = PeriodicSequence([good, column_only])
    with pytest.raises(ValueError, match=r"rule='natural' at step 1: .*row 0 sums to 1\.5"):
        sequence_spectrum(sequence, "natural")
    assert RULE_CLAIMS == {
        "natural": "row-stochastic",
        "metropolis": "doubly stochastic",
        "row": "row-stochastic",
        "column": "column-stochastic",
        "fastest": "doubly stochastic",
        "fdla": "rows and columns sum to one",
    }
    W = np.array([[1.0, 0.5], [0.0, 0.5]])
    check_rule(W, "column", 4)  # column-stochastic: what "column" promises
    with pytest.raises(ValueError, match=r"rule='row' at step 4: W_4 is not row-stochastic"):
        check_rule(W, "row", 4)
    with pytest.raises(ValueError, match="doubly stochastic"):
        check_rule(W, "metropolis", 0)


def test_natural_rule_on_01_adjacency_is_refused():
    with pytest.raises(ValueError, match=r"rule='natural' at step 0: W_0 is not row-stoch"):
        sequence_spectrum(RandomSequence(8, seed=1), "natural", steps=3)


def test_bad_steps_and_window_are_refused():
    with pytest.raises(ValueError, match="steps is for sequences without a period"):
        sequence_spectrum(OnePeerExponential(8), "row", steps=5)
    with pytest.raises(ValueError, match="window must be <= steps = 3, got 4"):
        sequence_spectrum(RandomSequence(8, seed=0), "row", steps=3, window=4)
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        sequence_spectrum(RandomSequence(8, seed=0), "row", steps=0)
    with pytest.raises(ValueError, match="rule"):
        sequence_spectrum(OnePeerExponential(8), "diagonal")


def test_summary_statistics_marks_columns_that_disagree():
    stats = summary_statistics(
        [
            {"kind": "row", "n": 3, "slem": 0.2, "ergodicity": 0.5},
            {"kind": "doubly", "n": 3, "slem": 0.6, "ergodicity": None},
            {"kind": "row", "n": 3, "slem": 0.4, "ergodicity": 0.1},
        ]
    )
    assert [stats[s]["slem"] for s in ("min", "median", "max")] == pytest.approx([0.2, 0.4, 0.6])
    assert stats["min"]["kind"] == "mixed" and stats["max"]["n"] == 3
    assert stats["median"]["ergodicity"] is None  # does not apply at one step
