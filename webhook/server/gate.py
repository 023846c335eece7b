"""Every review answered in time: the API server's deadline, a ledger of the work in hand, and
a gate for large reviews.

The API server gives up on a webhook after ``timeoutSeconds`` and, under ``failurePolicy:
Ignore``, admits the object unchecked: a late answer is a pass. It says how long it waits in
the ``timeout`` query parameter of every call, and its clock starts before the request
reaches the app: the transport stamps each call as it is first run, less the time work ready
for the event loop waits for it (see ``webhook.server.transport.LoopLag``), and the deadline
runs from that stamp.

A review's cost grows with its size (reading JSON, walking the pod). Reviews up to
``LARGE_BODY_BYTES`` are answered in the worker process, on its event loop or in its threads,
which share one interpreter lock: reviews checked at once take about as long as their costs
added up. So each enters a
``WorkLedger`` first, with its expected cost, and is checked only if the work in hand and its
own fit before its deadline; those above ``MEDIUM_BODY_BYTES`` (real pods are a few KiB) may
besides take only a share of the CPU, so that a flood of them leaves the rest to ordinary
reviews. Larger reviews are answered in a process of their own (``webhook.server.offload``)
and pass a gate instead: a few run at a time, a few more may wait. A review that cannot be
answered in time is refused at once, saying why (a refusal the creator can retry, where a
timeout would have let it through).
"""

from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# Reviews above this size go through the gate; real pods are a few KiB to some 100 KiB.
LARGE_BODY_BYTES = 512 * 1024
# Reviews above this size, answered in a thread, may take only this share of the CPU, so that
# a flood of them leaves room for ordinary reviews.
MEDIUM_BODY_BYTES = 64 * 1024
MEDIUM_SHARE = 0.5
# The API server's default timeout, when a call does not say.
DEFAULT_TIMEOUT = 10.0
# Time kept back from the API server's timeout, for the answer to travel back: this share of
# it, and at least the minimum.
ANSWER_MARGIN_SHARE = 0.15
ANSWER_MARGIN_MIN = 0.4
# What a review costs here at most, measured with reviews built to be slow while many arrive
# at once (benchmarks/slow_review_bench.py), with room to spare. Large reviews, in the offload
# process, cost the base besides (a process to talk to, the answer pickled back).
SECONDS_PER_MIB = 0.35
BASE_SECONDS = 0.15
# And this much for each container the body opens, whatever its size: the costliest shapes
# are containers nested past the depth the decoders go (cut in the text, bracket by bracket,
# about 1 us each alone: tests/adversarial.py), twice over for room. A review taken on in a
# thread cannot be stopped, so its estimate must hold for the worst shape; the offload
# process is stopped at the deadline, so there the estimate only decides whether to try
# (0.5 us: the slowest 3 MiB shape, 1.5 s, still tried within a 3 s timeout).
SECONDS_PER_CONTAINER = 2e-6
OFFLOADED_SECONDS_PER_CONTAINER = 0.5e-6
# Reviews answered in a thread cost this base instead: an ordinary review takes 0.2 ms; the
# slowest shapes of 40-510 KiB in tests/adversarial.py up to 0.2 s/MiB alone, and 0.1 s/MiB
# each while 16 are read at once with the collector paused (0.5 s/MiB with it on).
THREAD_BASE_SECONDS = 0.005

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
    def after(cls, timeout: float, arrived: float) -> Deadline:
        """The deadline of a request that ``arrived`` (monotonic) with this ``timeout``."""
        margin = max(ANSWER_MARGIN_MIN, timeout * ANSWER_MARGIN_SHARE)
        return cls(arrived + max(0.0, timeout - margin))

    def remaining(self) -> float:
        return self.at - time.monotonic()


def expected_seconds(body_bytes: int, containers: int = 0) -> float:
    """An estimate of the time a large review takes to answer in the offload process
    (``containers``: the lists and mappings its body opens)."""
    per_container = OFFLOADED_SECONDS_PER_CONTAINER * containers
    return BASE_SECONDS + SECONDS_PER_MIB * body_bytes / 2**20 + per_container


def thread_seconds(body_bytes: int, containers: int = 0) -> float:
    """A generous estimate of the time a review answered in a thread takes."""
    per_container = SECONDS_PER_CONTAINER * containers
    return THREAD_BASE_SECONDS + SECONDS_PER_MIB * body_bytes / 2**20 + per_container


@dataclass(frozen=True, slots=True, eq=False)
class Work:
    """A review being checked in a thread of this process: its expected cost and deadline,
    and, for a medium one, the CPU time its thread had used when it was taken on."""

    seconds: float
    medium: bool
    deadline: float
    cpu_at_start: float


class Refusal(enum.Enum):
    """Why the ledger turned a review away."""

    # Even alone, it could not be checked in the time left: it waited too long for a thread.
    LATE = "late"
    # The reviews in hand and this one could not all be checked before its deadline.
    BUSY = "busy"
    # Reviews above MEDIUM_BODY_BYTES have had their share of the CPU.
    MEDIUM = "medium"


class WorkLedger:
    """The expected seconds of the reviews this process is checking in its threads right now.

    Threads share one interpreter lock, so the reviews in hand finish about when their costs
    added up have passed: a review is taken on only if they and it fit before its deadline.

    Reviews above ``medium_bytes`` may besides take only ``medium_share`` of the CPU. Each
    adds its cost to a backlog that drains at that share of a second per second, and one is
    taken on only if the backlog, its own cost included, drains in time: before its deadline
    and that of every other such review in hand. Once answered, it is charged the CPU time its
    thread spent on it instead of its expected cost (threads waiting for the interpreter lock
    spend none). However many arrive, and however fast, they get no more than that share of
    the CPU, and ordinary reviews queued behind them for a thread get the rest.
    """

    def __init__(
        self,
        medium_bytes: int = MEDIUM_BODY_BYTES,
        medium_share: float = MEDIUM_SHARE,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.medium_bytes, self.medium_share = medium_bytes, medium_share
        self._clock, self._cpu_clock = clock, cpu_clock
        self._lock = threading.Lock()
        self._in_hand: list[Work] = []
        self._medium_backlog = 0.0
        self._drained_at = clock()

    def enter(self, body_bytes: int, deadline: Deadline, containers: int = 0) -> Work | Refusal:
        """Take on a review of ``body_bytes`` (opening ``containers``) due by ``deadline``, or
        say why not; the thread that takes it on leaves with it."""
        medium = body_bytes > self.medium_bytes
        cost = thread_seconds(body_bytes, containers)
        # Only a medium review is charged what it used: reading the thread's CPU clock is a
        # system call, which ordinary reviews are spared.
        work = Work(cost, medium, deadline.at, self._cpu_clock() if medium else 0.0)
        with self._lock:
            now = self._clock()
            left = work.deadline - now
            if work.seconds > left:
                return Refusal.LATE
            if sum(w.seconds for w in self._in_hand) + work.seconds > left:
                return Refusal.BUSY
            if work.medium:
                # The earliest deadline of them all: one taken on now must not make one in
                # hand late.
                earliest = min([w.deadline for w in self._in_hand if w.medium] + [work.deadline])
                backlog = self._drained(now) + work.seconds
                if backlog > self.medium_share * (earliest - now):
                    return Refusal.MEDIUM
                self._medium_backlog = backlog
            self._in_hand.append(work)
            return work

    def never_fits(self, body_bytes: int, containers: int, seconds: float) -> bool:
        """Whether a review would be turned away with nothing else in hand, given ``seconds``
        in all: no retry can get it in."""
        cost = thread_seconds(body_bytes, containers)
        share = self.medium_share if body_bytes > self.medium_bytes else 1.0
        return cost > share * seconds

    def leave(self, work: Work) -> None:
        """The review taken on as ``work`` is answered (or failed)."""
        used = self._cpu_clock() - work.cpu_at_start if work.medium else 0.0
        with self._lock:
            self._in_hand.remove(work)
            if work.medium:
                backlog = self._drained(self._clock()) - work.seconds + used
                self._medium_backlog = max(0.0, backlog)

    def in_hand(self) -> float:
        """The expected seconds of the reviews in hand."""
        with self._lock:
            return sum(w.seconds for w in self._in_hand)

    def _drained(self, now: float) -> float:
        elapsed, self._drained_at = now - self._drained_at, now
        self._medium_backlog = max(0.0, self._medium_backlog - self.medium_share * elapsed)
        return self._medium_backlog


class LargeReviewGate:
    """At most ``running`` large reviews at a time, and ``waiting`` more queued."""

    def __init__(self, running: int = 1, waiting: int = 4) -> None:
        self._slots = threading.BoundedSemaphore(running)
        self._lock = threading.Lock()
        self._queue_room = waiting
        self.waiting = 0

    def enter(self, body_bytes: int, deadline: Deadline, containers: int = 0) -> bool:
        """Take a slot, waiting while there is time to finish after; False: refuse now."""
        cost = expected_seconds(body_bytes, containers)
        if deadline.remaining() <= cost:
            # Too late to finish even now: the offload process would be stopped mid-review
            # (and started again) for an answer that could not be used.
            return False
        if self._slots.acquire(blocking=False):
            return True
        with self._lock:
            if self.waiting >= self._queue_room:
                return False
            self.waiting += 1
        try:
            wait = deadline.remaining() - cost
            return wait > 0 and self._slots.acquire(timeout=wait)
        finally:
            with self._lock:
                self.waiting -= 1

    def never_fits(self, body_bytes: int, containers: int, seconds: float) -> bool:
        """Whether a review would not finish in ``seconds`` even with the offload process to
        itself: no retry can get it in."""
        return expected_seconds(body_bytes, containers) > seconds

    def leave(self) -> None:
        self._slots.release()
