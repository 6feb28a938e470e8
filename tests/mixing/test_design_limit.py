"""The semidefinite rules refuse graphs above MAX_SDP_NODES before building the program
(issue 41: ``spectrum --rule fastest`` at 300 nodes asked for 16 GB and aborted)."""

import networkx as nx
import pytest

from stochmix.cli import main
from stochmix.mixing import fastest_mixing_weights, fdla_weights
from stochmix.mixing.design import MAX_SDP_NODES


@pytest.mark.parametrize("rule", [fastest_mixing_weights, fdla_weights])
def test_a_graph_above_the_limit_is_refused_with_the_limit(rule):
    with pytest.raises(ValueError, match=rf"graph has {MAX_SDP_NODES + 1} nodes, above the "
                       rf"{MAX_SDP_NODES} that rule="):  # fmt: skip
        rule(nx.cycle_graph(MAX_SDP_NODES + 1))


def test_the_spectrum_command_refuses_it_in_one_line(capsys):
    assert main(["spectrum", "--graph", "cycle", "--nodes", "300", "--rules", "fastest"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "graph has 300 nodes, above the 64" in line and "rule='metropolis'" in line
