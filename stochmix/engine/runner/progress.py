"""A quiet progress line for long runs: shown on a terminal only, after a couple of seconds."""

from __future__ import annotations

import sys
import time

__all__ = [
    "Progress",
]


class Progress:
    """Callable ``(r, z, ctx)`` that redraws ``label: round r/R`` on stderr.

    Nothing is printed unless stderr is a terminal (or ``force``), nor before ``delay``
    seconds have passed, so short runs and logs stay clean.
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        delay: float = 2.0,
        force: bool = False,
        stream=None,
        unit: str = "rounds",
    ):
        self.total, self.label, self.delay, self.unit = total, label, delay, unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.shown = False
        self._last = 0.0

    def __call__(self, r, z=None, ctx=None) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        done = r + 1
        if now - self.start < self.delay or (now - self._last < 0.1 and done < self.total):
            return
        self._last = now
        width = 30
        filled = int(width * done / max(self.total, 1))
        rate = done / (now - self.start)
        left = (self.total - done) / rate if rate > 0 else 0.0
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {done}/{self.total} {self.unit}, {left:5.1f}s left "
        )
        self.stream.flush()
        self.shown = True

    def note(self, text: str) -> None:
        """Write ``label: text`` on a line of its own, where the progress line is shown
        (a terminal, or ``force``); nothing otherwise. A bar already drawn is ended first."""
        if not self.enabled:
            return
        if self.shown:
            self.stream.write("\n")
            self.shown = False
        self.stream.write(f"{self.label}: {text}\n" if self.label else f"{text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
