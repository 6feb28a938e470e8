"""Checkpoints: a run killed mid-way and resumed gives the uninterrupted run's numbers."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import FedAvg, FedStale
from stochmix.participation import Bernoulli
from stochmix.problems import LeastSquares
from tests import CHILD_TIMEOUT

SETUP = """
import numpy as np
from stochmix.algorithms import FedStale
from stochmix.participation import Bernoulli
from stochmix.problems import LeastSquares
problem = LeastSquares.random(30, 4, rows_per_client=6, seed=1).minibatch(2, seed=3)
participation = Bernoulli.heterogeneous(30, 0.1, 0.9, seed=2)
method = FedStale(0.02, 3, beta=0.5, probabilities="fedau", cutoff=7)
"""


def reference(**options):
    """The SETUP run of 200 rounds from fresh objects (``options``: e.g. a checkpoint)."""
    namespace = {}
    exec(SETUP, namespace)
    return run(
        namespace["method"],
        namespace["problem"],
        namespace["participation"],
        200,
        seed=11,
        progress=False,
        **options,
    )


def test_killed_run_resumes_to_the_same_trajectory(tmp_path):
    path = tmp_path / "run.ckpt"
    script = SETUP + textwrap.dedent(
        f"""
        import os, signal
        from stochmix import run
        def crash(r, z, ctx):
            if r == 130:  # after the checkpoint of round 120, before the one of round 140
                os.kill(os.getpid(), signal.SIGKILL)
        run(method, problem, participation, 200, seed=11, progress=False,
            checkpoint={str(path)!r}, checkpoint_every=20, callback=crash)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=CHILD_TIMEOUT
    )
    assert done.returncode == -signal.SIGKILL
    assert path.exists() and not list(tmp_path.glob("*.tmp"))  # no half-written file
    resumed = reference(checkpoint=path, checkpoint_every=20)
    whole = reference()
    np.testing.assert_array_equal(resumed.server, whole.server)
    np.testing.assert_array_equal(resumed.distance, whole.distance)
    np.testing.assert_array_equal(resumed.participants, whole.participants)


def test_checkpoint_of_another_run_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    problem = LeastSquares.random(5, 2, seed=0)
    part = Bernoulli(np.full(5, 0.5))
    run(FedAvg(0.1, 2), problem, part, 10, checkpoint=path, checkpoint_every=5)
    with pytest.raises(ValueError, match="different run.*method"):
        run(FedAvg(0.2, 2), problem, part, 10, checkpoint=path)
    with pytest.raises(ValueError, match="seed"):
        run(FedAvg(0.1, 2), problem, part, 10, checkpoint=path, seed=1)
    # the same run finds its finished checkpoint and returns at once, with the same numbers
    again = run(FedAvg(0.1, 2), problem, part, 10, checkpoint=path)
    np.testing.assert_array_equal(again.server, run(FedAvg(0.1, 2), problem, part, 10).server)
    assert os.path.getsize(path) > 0
    with pytest.raises(ValueError, match="checkpoint_every"):
        run(FedStale(0.1, 1, 0.5), problem, part, 3, checkpoint=tmp_path / "x", checkpoint_every=0)


# ------------------------------------------------------------ the file format and identity
from stochmix.engine import CheckpointWarning  # noqa: E402
from stochmix.engine.runner import checkpoint as checkpoints  # noqa: E402
from stochmix.engine.runner.checkpoint import CheckpointError  # noqa: E402
from stochmix.participation import Full  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402


def _small(tmp_path, **kwargs):
    path = tmp_path / "run.ckpt"
    problem = LeastSquares.random(6, 3, seed=0)
    part = Bernoulli.heterogeneous(6, 0.2, 0.8, seed=0)
    method = FedAvg(0.05, 2, weights="fedau")
    res = run(method, problem, part, 10, checkpoint=path, checkpoint_every=5, **kwargs)
    return path, problem, part, method, res


def test_a_crafted_pickle_is_refused_without_running_it(tmp_path):
    import pickle

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "run.ckpt"
    path.write_bytes(pickle.dumps({"format": 1, "identity": {}, "payload": Evil()}))
    with pytest.raises(CheckpointError, match=r"run\.ckpt.*cannot be used"):
        run(FedAvg(0.1, 1), LeastSquares.random(4, 2, seed=0), Full(4), 3, checkpoint=path)
    assert not marker.exists()


def test_every_corruption_gets_one_error_naming_the_file(tmp_path):
    path, problem, part, method, _ = _small(tmp_path)
    good = path.read_bytes()
    rng = np.random.default_rng(0)
    damaged = [good[: len(good) // 2], good[:10], b"", b"not a checkpoint at all"]
    for position in rng.choice(len(good), size=12, replace=False):
        flipped = bytearray(good)
        flipped[position] ^= 0xFF
        damaged.append(bytes(flipped))
    for data in damaged:
        path.write_bytes(data)
        with pytest.raises(CheckpointError, match=r"run\.ckpt"):
            checkpoints.load(path)


def test_a_checkpoint_of_another_version_says_so(tmp_path, monkeypatch):
    path, *_ = _small(tmp_path)
    monkeypatch.setattr(checkpoints, "FORMAT", 99)
    with pytest.raises(CheckpointError, match="format 2, this version reads format 99"):
        checkpoints.load(path)


def test_resume_refuses_any_other_run_and_names_what_differs(tmp_path):
    path, problem, part, method, _ = _small(tmp_path)
    other_data = LeastSquares.random(6, 3, seed=1)  # same shape, other numbers
    same_range = Bernoulli(part.p[::-1].copy())  # same min and max, other order
    cases = {
        "problem": dict(problem=other_data),
        "participation": dict(participation=same_range),
        "seed": dict(seed=np.random.SeedSequence(5)),
        "dtype": dict(dtype=np.float32),
        "compiled": dict(compiled=False),
        "x0": dict(x0=np.ones(3)),
        "metrics": dict(metrics=("distance",)),
    }
    for what, change in cases.items():
        args = {"problem": problem, "participation": part, **change}
        with pytest.raises(ValueError, match=f"different run.*{what}"):
            run(method, args.pop("problem"), args.pop("participation"), 10,
                checkpoint=path, **args)  # fmt: skip
    again = run(method, problem, part, 10, checkpoint=path)  # the same run resumes
    assert again.rounds == 10


def test_seed_sequences_are_told_apart(tmp_path):
    path = tmp_path / "run.ckpt"
    problem, part = LeastSquares.random(6, 3, seed=0), Bernoulli(np.full(6, 0.5))
    run(FedAvg(0.1, 1), problem, part, 4, seed=np.random.SeedSequence(1), checkpoint=path)
    with pytest.raises(ValueError, match="seed"):
        run(FedAvg(0.1, 1), problem, part, 4, seed=np.random.SeedSequence(2), checkpoint=path)
    run(FedAvg(0.1, 1), problem, part, 4, seed=np.random.SeedSequence(1), checkpoint=path)


def test_checkpoint_paths_are_checked_before_the_first_round(tmp_path):
    rounds_run = []
    problem, part = LeastSquares.random(4, 2, seed=0), Full(4)

    def count(r, z, ctx):
        rounds_run.append(r)

    with pytest.raises(ValueError, match="checkpoint must be a file path, got the folder"):
        run(FedAvg(0.1, 1), problem, part, 5, checkpoint=tmp_path, callback=count)
    blocker = tmp_path / "a file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot be written"):
        run(FedAvg(0.1, 1), problem, part, 5, checkpoint=blocker / "run.ckpt", callback=count)
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        run(FedAvg(0.1, 1), problem, part, 5, checkpoint=3, callback=count)
    with pytest.raises(TypeError, match="callback must be callable"):
        run(FedAvg(0.1, 1), problem, part, 5, callback=5)
    with pytest.raises(ValueError, match="checkpoint needs a fixed seed"):
        run(FedAvg(0.1, 1), problem, part, 5, seed=None, checkpoint=tmp_path / "x.ckpt")
    assert rounds_run == []
    nested = tmp_path / "new" / "folder" / "run.ckpt"  # missing folders are made
    run(FedAvg(0.1, 1), problem, part, 5, checkpoint=nested)
    assert nested.is_file()


def test_a_failed_save_keeps_the_previous_checkpoint_and_returns_the_result(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    problem, part = Quadratic.random(5, 2, seed=0), Full(5)
    real_save, calls = checkpoints.save, []

    def full_disk(p, payload):
        calls.append(payload["done"])
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        real_save(p, payload)

    monkeypatch.setattr(checkpoints, "save", full_disk)
    with pytest.warns(CheckpointWarning, match=r"run\.ckpt.*after round 4.*No space left"):
        res = run(FedAvg(0.1, 1), problem, part, 8, checkpoint=path, checkpoint_every=2)
    assert res.rounds == 8 and calls == [2, 4, 6, 8]
    assert checkpoints.load(path)["done"] == 2
    assert not list(tmp_path.glob(".*.tmp"))


def test_orphan_scratch_files_are_removed(tmp_path):
    orphan = tmp_path / ".run.ckpt.abc123.tmp"
    orphan.write_bytes(b"half a checkpoint")
    _small(tmp_path)
    assert not orphan.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]


def test_scheduled_metrics_resume_with_their_schedule(tmp_path):
    from stochmix.problems import Logistic

    problem, part = Logistic.random(20, 3, seed=0), Bernoulli(np.full(20, 0.5))
    method = FedAvg(0.3, 1)
    whole = run(method, problem, part, 12, evaluate_every=5)
    path = tmp_path / "run.ckpt"
    run(method, problem, part, 7, evaluate_every=5, checkpoint=path, checkpoint_every=7)
    resumed = run(method, problem, part, 12, evaluate_every=5, checkpoint=path)
    np.testing.assert_array_equal(resumed.objective_gap[:7], whole.objective_gap[:7])
    np.testing.assert_array_equal(resumed.server, whole.server)
    assert np.flatnonzero(~np.isnan(resumed.objective_gap[8:])).tolist() == [2, 4]


def test_killed_while_writing_a_checkpoint_resumes_to_the_same_trajectory(tmp_path):
    """SIGKILL after the scratch file of round 140's checkpoint is written, before it is
    renamed: the checkpoint of round 120 stays whole, the orphan is cleared on resume, and
    the resumed run is the uninterrupted one, bit for bit."""
    path = tmp_path / "run.ckpt"
    script = SETUP + textwrap.dedent(
        f"""
        import os, signal
        from stochmix import run
        from stochmix.engine.runner import checkpoint
        real_replace = os.replace
        def replace(src, dst):
            saved = checkpoint.load({str(path)!r})
            if saved is not None and saved["done"] == 120:
                os.kill(os.getpid(), signal.SIGKILL)  # scratch written, not renamed
            real_replace(src, dst)
        checkpoint.os.replace = replace
        run(method, problem, participation, 200, seed=11, progress=False,
            checkpoint={str(path)!r}, checkpoint_every=20)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=CHILD_TIMEOUT
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert checkpoints.load(path)["done"] == 120
    assert list(tmp_path.glob(".run.ckpt.*.tmp"))  # the scratch file of round 140
    resumed = reference(checkpoint=path, checkpoint_every=20)
    assert not list(tmp_path.glob(".run.ckpt.*.tmp"))
    whole = reference()
    np.testing.assert_array_equal(resumed.server, whole.server)
    np.testing.assert_array_equal(resumed.distance, whole.distance)


def test_decentralized_runs_resume_from_fresh_objects_and_refuse_another_graph(tmp_path):
    import networkx as nx

    from stochmix.algorithms import DGD
    from stochmix.mixing import StaticSequence

    path, problem = tmp_path / "run.ckpt", Quadratic.random(6, 2, seed=0)
    ring = lambda: DGD(0.05, StaticSequence(nx.cycle_graph(6)))  # noqa: E731
    run(ring(), problem, Full(6), 6, checkpoint=path)
    assert run(ring(), problem, Full(6), 10, checkpoint=path).rounds == 10
    complete = DGD(0.05, StaticSequence(nx.complete_graph(6)))
    with pytest.raises(ValueError, match="differs in method_parameters"):
        run(complete, problem, Full(6), 12, checkpoint=path)


def test_private_parameters_such_as_fedau_cutoff_are_part_of_the_identity(tmp_path):
    path, problem = tmp_path / "run.ckpt", Quadratic.random(6, 2, seed=0)
    part = Bernoulli(np.full(6, 0.5))
    run(FedAvg(0.05, 1, weights="fedau", cutoff=50), problem, part, 6, checkpoint=path)
    with pytest.raises(ValueError, match="method_parameters"):
        run(FedAvg(0.05, 1, weights="fedau", cutoff=2), problem, part, 10, checkpoint=path)


def test_a_checkpoint_beyond_the_rounds_asked_is_refused_and_extending_matches(tmp_path):
    from stochmix.problems import Logistic

    problem, part = Logistic.random(20, 3, seed=0), Bernoulli(np.full(20, 0.5))
    path, method = tmp_path / "run.ckpt", FedAvg(0.3, 1)
    run(method, problem, part, 7, evaluate_every=3, checkpoint=path, checkpoint_every=7)
    extended = run(method, problem, part, 17, evaluate_every=3, checkpoint=path)
    whole = run(method, problem, part, 17, evaluate_every=3)
    assert extended.csv_rows() == whole.csv_rows()  # round 7 is no longer a "last" round
    with pytest.raises(ValueError, match="at round 17, beyond rounds=5"):
        run(method, problem, part, 5, evaluate_every=3, checkpoint=path)
    again = run(method, problem, part, 17, evaluate_every=3, checkpoint=path)
    assert again.consensus is None  # a federated method has none, resumed or not


def test_scratch_names_are_matched_as_text_not_as_wildcards(tmp_path):
    other = tmp_path / ".run1.ck.abc123.tmp"  # another run's scratch file
    other.write_bytes(b"")
    checkpoints.check_writable(tmp_path / "run[1].ck")
    assert other.exists()


def test_torch_model_fingerprint_is_stable_and_sees_the_network():
    torch = pytest.importorskip("torch")
    from stochmix.problems import TorchModel

    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((5, 3)), rng.integers(0, 2, 5)) for _ in range(4)]

    def net(activation):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(3, 4), activation(), torch.nn.Linear(4, 2)]
        return torch.nn.Sequential(*layers).double()

    tanh = TorchModel(net(torch.nn.Tanh), data)
    before = tanh.fingerprint()
    tanh.gradients(np.arange(2), np.tile(tanh.initial_point(), (2, 1)))
    assert tanh.fingerprint() == before
    assert TorchModel(net(torch.nn.ReLU), data).fingerprint() != before


def test_a_resumed_run_says_from_which_round_and_a_finished_one_that_nothing_runs(
    tmp_path, caplog, capsys
):
    import logging

    problem, part = Quadratic.random(5, 2, seed=0), Full(5)
    path, method = tmp_path / "run.ckpt", FedAvg(0.1, 1)
    with caplog.at_level(logging.INFO, logger="stochmix"):
        first = run(method, problem, part, 6, checkpoint=path, checkpoint_every=3)
    assert "resumed_from" not in first.config and not caplog.records  # nothing to resume
    with caplog.at_level(logging.INFO, logger="stochmix"):
        resumed = run(method, problem, part, 10, checkpoint=path, progress=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"resumed from round 6 of 10 (checkpoint {path})"
    ]
    assert caplog.records[0].levelno == logging.INFO
    assert resumed.config["resumed_from"] == 6 and resumed.rounds == 10
    assert f"FedAvg: resumed from round 6 of 10 (checkpoint {path})\n" in capsys.readouterr().err
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="stochmix"):
        again = run(method, problem, part, 10, checkpoint=path, progress=True)
    message = f"checkpoint {path} is already complete (10 of 10 rounds); nothing to run"
    assert [r.getMessage() for r in caplog.records] == [message]
    assert f"FedAvg: {message}\n" in capsys.readouterr().err
    np.testing.assert_array_equal(again.server, resumed.server)  # the Result, returned
    assert again.config["resumed_from"] == 10
    run(method, problem, part, 10, checkpoint=path, progress=False)
    assert capsys.readouterr().err == ""  # progress=False: quiet on stderr
