"""The public API changes only on purpose.

Every documented name's signature, and those of the public methods of every documented
class (the extension points a user's subclass overrides), are recorded in
``tests/public_api.txt``; a change to any of them fails here until the record is rewritten
(``python -m tests.api_surface --write``) in the same commit, with a CHANGELOG line. A
changed extension point keeps its old form working for one release, with a
``DeprecationWarning`` (see tests/algorithms/test_extension_points.py).
"""

import difflib

from tests.api_surface import RECORD, surface


def test_the_public_api_is_the_recorded_one():
    found = surface()
    recorded = RECORD.read_text().splitlines()
    diff = list(difflib.unified_diff(recorded, found, "tests/public_api.txt", "now", lineterm=""))
    assert not diff, (
        "the public API changed; if on purpose, run `python -m tests.api_surface --write` "
        "and add a CHANGELOG line:\n" + "\n".join(diff[:80])
    )


def test_the_record_covers_the_extension_points():
    recorded = RECORD.read_text()
    for hook in (
        "stochmix.Method.round_phases(",
        "stochmix.algorithms.FedAvg.aggregate(",
        "stochmix.algorithms.DecentralizedMethod.round_equations(",
        "stochmix.problems.Problem.gradients(",
        "stochmix.participation.ParticipationProcess.masks(",
    ):
        assert hook in recorded, hook
