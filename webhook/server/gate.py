"""Every review answered in time: the API server's deadline, and a gate for large reviews.

The API server gives up on a webhook after ``timeoutSeconds`` and, under ``failurePolicy:
Ignore``, admits the object unchecked: a late answer is a pass. It says how long it waits in
the ``timeout`` query parameter of every call.

A review's cost grows with its size (reading JSON, walking the pod), and a few megabyte-sized
reviews at once would share the CPU until none finishes in time, while holding threads that
ordinary reviews need. So large reviews pass a gate: a few run at a time, a few more may wait,
and one that cannot start in time is refused at once, saying why (a refusal the creator can
retry, where a timeout would have let it through).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

# Reviews above this size go through the gate; real pods are a few KiB to some 100 KiB.
LARGE_BODY_BYTES = 512 * 1024
# The API server's default timeout, when a call does not say.
DEFAULT_TIMEOUT = 10.0
# Time kept back from the API server's timeout, for the answer to travel back: this share of
# it, and at least the minimum.
ANSWER_MARGIN_SHARE = 0.15
ANSWER_MARGIN_MIN = 0.4
# What a large review costs here at most, measured with reviews built to be slow while many
# arrive at once (benchmarks/slow_review_bench.py), with room to spare: a review waits for
# the gate only while this much time would be left.
SECONDS_PER_MIB = 0.35
BASE_SECONDS = 0.15

_TIMEOUT = re.compile(r"^(\d{1,4}(?:\.\d{1,9})?)s$")


def timeout_seconds(raw: str | None) -> float:
    """The API server's ``timeout`` parameter (a Go duration in seconds, ``3s``) as a number."""
    match = _TIMEOUT.match(raw or "")
    if match is None:
        return DEFAULT_TIMEOUT
    return max(0.0, min(float(match.group(1)), 30.0))


@dataclass(frozen=True)
class Deadline:
    """When a review's answer must be sent, on the monotonic clock."""

    at: float

    @classmethod
    def after(cls, timeout: float, started: float) -> Deadline:
        margin = max(ANSWER_MARGIN_MIN, timeout * ANSWER_MARGIN_SHARE)
        return cls(started + max(0.0, timeout - margin))

    def remaining(self) -> float:
        return self.at - time.monotonic()


def expected_seconds(body_bytes: int) -> float:
    """A generous estimate of the time a review of this size takes to answer."""
    return BASE_SECONDS + SECONDS_PER_MIB * body_bytes / 2**20


class LargeReviewGate:
    """At most ``running`` large reviews at a time, and ``waiting`` more queued."""

    def __init__(self, running: int = 1, waiting: int = 4) -> None:
        self._slots = threading.BoundedSemaphore(running)
        self._lock = threading.Lock()
        self._queue_room = waiting
        self.waiting = 0

    def enter(self, body_bytes: int, deadline: Deadline) -> bool:
        """Take a slot, waiting while there is time to finish after; False: refuse now."""
        if self._slots.acquire(blocking=False):
            return True
        with self._lock:
            if self.waiting >= self._queue_room:
                return False
            self.waiting += 1
        try:
            wait = deadline.remaining() - expected_seconds(body_bytes)
            return wait > 0 and self._slots.acquire(timeout=wait)
        finally:
            with self._lock:
                self.waiting -= 1

    def leave(self) -> None:
        self._slots.release()
