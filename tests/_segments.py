"""What tests of compiled gossip segments share."""

import numpy as np

import stochmix.engine.runner.segments as segments_module

#: the cost columns of a Result, which a batched run must give exactly
COST_COLUMNS = ("participants", "gradients", "messages", "floats", "sample_gradients")


def batch_sizes(monkeypatch) -> list:
    """The sizes of the batches of ticks that runs execute in compiled segments (filled
    as the runs go)."""
    found: list = []
    original = segments_module.Segmenter.run

    def counted(self, z, nodes, programs, *rest):
        found.append(programs.size)
        return original(self, z, nodes, programs, *rest)

    monkeypatch.setattr(segments_module.Segmenter, "run", counted)
    return found


def assert_same_run(plain, fast, consensus: bool = False) -> None:
    """A batched run (``fast``) against the run made round by round (``plain``): the
    reported and node models to 1e-10 of their scale, ``distance`` (and ``consensus``)
    to rounding, every cost column exactly."""
    scale = np.abs(plain.server).max()
    np.testing.assert_allclose(fast.server, plain.server, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(fast.node_models, plain.node_models, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(fast.distance, plain.distance, rtol=1e-9, atol=1e-12)
    if consensus:
        np.testing.assert_allclose(fast.consensus, plain.consensus, rtol=1e-8, atol=1e-14)
    for column in COST_COLUMNS:
        np.testing.assert_array_equal(getattr(fast, column), getattr(plain, column))
