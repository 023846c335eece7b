"""Time as the live-cluster code reads it: wall-clock seconds (comparable with the timestamps
the API server writes) and a way to wait. Tests pass a clock they move themselves."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a fake clock moves itself forward instead)."""
        ...


class SystemClock:
    """The real clock; ``sleep`` returns early once ``stop`` is set."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self._stop = stop or threading.Event()

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        self._stop.wait(max(seconds, 0.0))
