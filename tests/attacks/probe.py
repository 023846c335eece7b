"""Ordinary reviews sent as kube-apiserver sends them, each timed against its deadline.

The API server posts a review to ``/mutate?timeout=3s`` over a connection from its pool, kept
alive between reviews, and dials new ones during bursts; it gives up ``timeout`` after it
started, dial and handshake included, and with ``failurePolicy: Ignore`` a late answer lets
the object through. The probe does both: half its reviews on connections it keeps, half on a
connection of their own, at a steady rate, and records each.
"""

from __future__ import annotations

import http.client
import itertools
import json
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.attacks.floods import Target

TIMEOUT = 3.0
# Connections the probe keeps alive, as the API server keeps a few to each webhook.
KEPT = 4
FRESH_THREADS = 4


@dataclass(frozen=True)
class Answer:
    """One probe review: when it was sent (seconds from the probe's start) and how it went."""

    sent: float
    seconds: float
    fresh: bool
    # The HTTP status; 0 when nothing came back within the timeout.
    status: int
    # Answered for its uid with the policy's verdict (not refused as busy or too large).
    judged: bool

    @property
    def in_time(self) -> bool:
        return self.judged and self.seconds <= TIMEOUT

    @property
    def done(self) -> float:
        return self.sent + self.seconds


class Probe:
    """Sends ``review`` (a new uid each time) at ``rate`` a second until stopped."""

    def __init__(self, target: Target, ca: Path, review: dict[str, Any], rate: float) -> None:
        self.target, self.review, self.rate = target, review, rate
        self.context = ssl.create_default_context(cafile=str(ca))
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._uids = itertools.count()
        self._threads: list[threading.Thread] = []
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        per_thread = (KEPT + FRESH_THREADS) / self.rate
        for i in range(KEPT + FRESH_THREADS):
            fresh = i >= KEPT
            # Staggered, so that the probe's reviews are spread evenly over each interval.
            offset = per_thread * i / (KEPT + FRESH_THREADS)
            thread = threading.Thread(
                target=self._send_every, args=(per_thread, offset, fresh), daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> list[Answer]:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT + 5)
        with self._lock:
            return sorted(self.answers, key=lambda a: a.sent)

    def _send_every(self, interval: float, offset: float, fresh: bool) -> None:
        conn: http.client.HTTPSConnection | None = None
        due = self.started + offset
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            due += interval
            if conn is None or fresh:
                conn = self._connection()
            answer = self._send(conn, fresh)
            with self._lock:
                self.answers.append(answer)
            if fresh or answer.status == 0:
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _connection(self) -> http.client.HTTPSConnection:
        # Dialled lazily by the first request, so that dial and handshake count in its time.
        return http.client.HTTPSConnection(
            self.target.host, self.target.port, context=self.context, timeout=TIMEOUT
        )

    def _send(self, conn: http.client.HTTPSConnection, fresh: bool) -> Answer:
        uid = f"probe-{next(self._uids)}"
        doc = json.loads(json.dumps(self.review))
        doc["request"]["uid"] = uid
        body = json.dumps(doc).encode()
        sent = time.monotonic()
        status, judged = 0, False
        try:
            conn.request(
                "POST",
                f"/mutate?timeout={TIMEOUT:g}s",
                body,
                {"Content-Type": "application/json", "Accept": "application/json"},
            )
            reply = conn.getresponse()
            data = reply.read()
            status = reply.status
            judged = status == 200 and _judged(data, uid)
        except (OSError, http.client.HTTPException):
            pass
        return Answer(sent - self.started, time.monotonic() - sent, fresh, status, judged)


def _judged(data: bytes, uid: str) -> bool:
    try:
        response = json.loads(data)["response"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(response.get("uid") == uid and response.get("allowed") is True)
