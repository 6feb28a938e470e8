"""The test suite.

``CHILD_TIMEOUT`` bounds how long a test waits for a child process (a subprocess, a forked
worker): a guard against a child that hangs, not a measure of speed. The children take
seconds on a quiet machine and up to about a minute on one busy core, so the bound is ten
times that, and a slow or loaded machine does not fail a test.
"""

CHILD_TIMEOUT = 600  # seconds
