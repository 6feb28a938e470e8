"""A Dask study with a relative --out (issue 40, item 8): the paths are resolved on the
client, so cells land in the study folder whatever the workers' working directory, the
plot works and a rerun skips every cell."""

import os

import pytest

from stochmix.cli import main
from stochmix.config import dumps

from .test_studies import base


def test_a_relative_out_on_workers_elsewhere(tmp_path, monkeypatch, capsys):
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("matplotlib")
    elsewhere = tmp_path / "workers"
    elsewhere.mkdir()
    here = tmp_path / "here"
    here.mkdir()
    (here / "study.toml").write_text(
        dumps({**base(rounds=10), "seeds": [0], "sweep": {"participation.low": [0.1, 0.3]}})
    )
    monkeypatch.chdir(here)
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(os.chdir, str(elsewhere))  # the workers run in another directory
        args = ["run", "study.toml", "--out", "rel", "--address", cluster.scheduler_address]
        assert main([*args, "--quiet"]) == 0
        first = capsys.readouterr()
        assert (here / "rel" / "curves.png").is_file(), first.err
        assert len(list((here / "rel" / "cells").iterdir())) == 2
        assert not list(elsewhere.iterdir())  # nothing written where the workers run
        assert main([*args, "--quiet", "--no-plot"]) == 0
        assert "2 cell(s) already done" in capsys.readouterr().out
