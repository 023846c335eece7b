"""Time as the cluster code reads it: wall-clock seconds (comparable with the timestamps the
API server writes), a way to wait, and the API server's own notation of times. Tests pass a
clock they move themselves."""

from __future__ import annotations

import datetime as dt
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


def parse_time(value: object) -> float | None:
    """An RFC 3339 time as the API server writes it (seconds or microseconds), in Unix seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def format_time(seconds: float, *, micro: bool = False) -> str:
    """Unix seconds as the API server writes times (``MicroTime`` with ``micro``)."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC)
    if micro:
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
