"""Write ``trajectories.npz``: every case of ``cases.py`` on the current code.

Run once, on the code whose trajectories are to be kept (it was run on main at b88c97f,
before the engine's third generation): ``python -m tests.replay.record``. The file is
plain arrays (loaded with ``allow_pickle=False``).
"""

from pathlib import Path

import numpy as np

from tests.replay.cases import cases, trajectory

if __name__ == "__main__":
    arrays = {}
    for case in cases():
        arrays[case[0]] = trajectory(case, compiled=False)
        print(case[0], arrays[case[0]][-1])
    np.savez(Path(__file__).with_name("trajectories.npz"), **arrays)
