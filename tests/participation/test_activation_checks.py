"""Rates that would make a clock never tick (issue 41): subnormal PoissonClocks rates, a
rate whose share of the sum underflows, a subnormal RandomEdge rate; each one error
naming the argument and the value."""

import networkx as nx
import numpy as np
import pytest

from stochmix import participation

PC, RE = participation.PoissonClocks, participation.RandomEdge
BAD = [
    ("one subnormal rate for all", lambda: PC(5e-324, 3), r"rates.*5e-324"),
    ("a subnormal entry", lambda: PC([1.0, 1e-320]), r"rates: entry 1.*1e-320"),
    ("a share that underflows", lambda: PC([1e300, 1e-10]), r"rates: entry 1 is 1e-10"),
    ("a subnormal RandomEdge rate", lambda: RE(nx.cycle_graph(4), rate=5e-324), r"rate.*5e-324"),
]


@pytest.mark.parametrize(("what", "call", "needle"), BAD, ids=[row[0] for row in BAD])
def test_rates_that_never_tick_are_refused(what, call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_small_normal_rates_are_accepted_and_their_ticks_are_finite():
    clocks = participation.PoissonClocks([1e-300, 2e-300])
    np.testing.assert_allclose(clocks.probabilities, [1 / 3, 2 / 3])
    record = next(clocks.activations(0))
    assert np.isfinite(record.time) and record.time > 0
