"""DecentralizedADMM's arguments (issue 41): local_lr only with the gradient solver."""

import networkx as nx
import pytest

from stochmix import algorithms as alg
from stochmix import mixing

GRAPHS = mixing.StaticSequence(nx.cycle_graph(4), 4)


def test_local_lr_with_the_exact_solver_is_refused():
    with pytest.raises(ValueError, match=r'local_lr must be None with solver="exact".*0\.1'):
        alg.DecentralizedADMM(0.5, GRAPHS, solver="exact", local_lr=0.1)
    with pytest.raises(ValueError, match=r"local_lr must be None.*0\.1"):
        alg.DecentralizedADMM(0.5, GRAPHS, local_lr=0.1)  # exact by default


def test_local_lr_with_the_gradient_solver_is_taken():
    method = alg.DecentralizedADMM(0.5, GRAPHS, solver="gradient", local_lr=0.1)
    assert method.local_lr == 0.1
    assert alg.DecentralizedADMM(0.5, GRAPHS).local_lr is None
