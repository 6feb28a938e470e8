"""What tests of compiled gossip segments share."""

import stochmix.engine.runner.segments as segments_module


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
