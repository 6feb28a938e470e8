"""The test suite.

``CHILD_TIMEOUT`` bounds how long a test waits for a child process (a subprocess, a forked
worker): a guard against a child that hangs, not a measure of speed. The children take
seconds on a quiet machine and up to about a minute on one busy core, so the bound is ten
times that, and a slow or loaded machine does not fail a test.
"""

CHILD_TIMEOUT = 600  # seconds

#: The hypothesis profile of this run (tests/conftest.py): "default" for every run,
#: "thorough" for CI's second pass (``HYPOTHESIS_PROFILE=thorough pytest -m "slow or
#: hypothesis"``), "explore" for fresh randomness.
PROFILE = __import__("os").environ.get("HYPOTHESIS_PROFILE", "default")


def examples(n: int) -> int:
    """The examples a property test that was sized at ``n`` draws in this run: half of them
    (at least 3) in the default profile, twice as many in "thorough"."""
    if PROFILE == "thorough":
        return 2 * n
    return max(3, n // 2)


def documented_arguments(func) -> tuple[set[str], set[str]]:
    """The Google-style sections of ``func``'s docstring ("Args:", "Returns:" ...) and the
    names its "Args:" section documents (lines ``name (type): ...`` or ``name: ...``)."""
    import inspect
    import re

    doc = inspect.getdoc(func) or ""
    sections = set(re.findall(r"^(Args|Returns|Raises|Yields|Example)::?$", doc, re.M))
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    args = re.split(r"^\S.*:$", args, maxsplit=1, flags=re.M)[0]  # up to the next section
    return sections, set(re.findall(r"^    (\w+)(?: \([^)]*\))?:", args, re.M))
