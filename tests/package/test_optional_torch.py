"""Torch is an optional extra: without it the core imports, runs, and says what is missing
(the ``Array`` of the annotations included, which never imports torch itself)."""

import subprocess
import sys
import textwrap

from tests import CHILD_TIMEOUT


def test_core_works_without_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any "import torch" now fails
        import numpy as np
        import stochmix as sm
        from stochmix.algorithms import FOCUS
        from stochmix.participation import Bernoulli
        from stochmix.problems import LeastSquares
        p = LeastSquares.random(6, 3, seed=0)
        r = sm.run(FOCUS(0.1 / (6 * p.smoothness), 2), p, Bernoulli(np.full(6, 0.5)), 50)
        assert np.isfinite(r.server).all()
        try:
            sm.run(FOCUS(0.01, 1), p, Bernoulli(np.full(6, 0.5)), 2, backend="torch")
        except ValueError as error:
            assert "stochmix[torch]" in str(error)
        else:
            raise AssertionError("torch backend ran without torch")
        from stochmix._arrays import Array
        from stochmix.problems import TorchModel
        assert isinstance(np.zeros(2), Array) and not isinstance([0.0], Array)
        for build in (lambda: TorchModel(None, []), lambda: TorchModel.flatten(None)):
            try:
                build()
            except ImportError as error:
                assert "stochmix[torch]" in str(error)
            else:
                raise AssertionError("TorchModel worked without torch")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
