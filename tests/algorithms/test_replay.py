"""Every built-in method replays the trajectories recorded before the engine's third
generation (tests/replay): rewriting methods in the equation form, and the engine's
reorganisation, changed no number beyond 1e-12 (relative to the trajectory's size)."""

from pathlib import Path

import numpy as np
import pytest

from stochmix.engine import Method
from tests.replay.cases import cases, trajectory

RECORDED = np.load(
    Path(__file__).resolve().parents[1] / "replay" / "trajectories.npz", allow_pickle=False
)
CASES = cases()


def test_every_case_is_recorded_and_every_method_has_a_case():
    import stochmix.algorithms as A

    assert sorted(RECORDED.files) == sorted(case[0] for case in CASES)
    made = {type(case[1]()).__name__ for case in CASES}
    abstract = {"DecentralizedMethod", "FedAdaptive"}
    # methods written after the recording: each matches its per-client reference instead
    newer = {"FedNova", "FedBuff", "FedAsync", "CompressedUplink"}
    newer |= {"PGEXTRA", "ProxNIDS", "DLM", "DecentralizedADMM", "FedMid", "FedDualAvg"}
    newer |= {"FedPD", "LED", "GTSVRG", "GTSARAH", "GTSAGA"}
    newer |= {"RelaxedADMM", "LTADMM", "FedLT", "AccDNGD", "Mudag", "APAPC", "OPAPC"}
    newer |= {"SSDA", "MSDA", "DAPG", "ADPSGD"}
    methods = {
        name
        for name in A.__all__
        if isinstance(getattr(A, name), type) and issubclass(getattr(A, name), Method)
    }
    assert methods - abstract - newer <= made


@pytest.mark.parametrize("compiled", [False, "auto"])
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_replays_the_recorded_trajectory(case, compiled):
    recorded = RECORDED[case[0]]
    now = trajectory(case, compiled=compiled)
    assert now.shape == recorded.shape
    scale = 1.0 + np.abs(recorded).max()
    assert np.abs(now - recorded).max() <= 1e-12 * scale
