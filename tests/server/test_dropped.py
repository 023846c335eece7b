"""A review the API server did not get an answer to in time let its object through unchecked
(failurePolicy Ignore): each is logged (``review_dropped``) and counted
(``preemptguard_reviews_dropped_total``), by why. An engine slowed down past the call's
timeout makes the late answer here."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import (
    Client,
    ServerProcess,
    fixture,
    harness_server,
    wait_for,
)

pytestmark = pytest.mark.slow

SLOW_SECONDS = 1.5


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory, tls_dir: Path) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("dropped") / "server.log"
    server = harness_server(
        tls_dir, log, workers=1, slow_seconds=SLOW_SECONDS, metrics_port=_free()
    )
    yield server
    assert server.terminate() == 0, server.logs()


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _review(uid: str) -> dict[str, object]:
    review = fixture("create-pod-sweep-mutate")
    review["request"]["uid"] = uid
    return review


def _dropped(server: ServerProcess, why: str) -> float:
    name = f'preemptguard_reviews_dropped_total{{hook="mutate",why="{why}"}}'
    for line in server.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_an_answer_after_the_calls_timeout_is_logged_and_counted(slow: ServerProcess) -> None:
    client = Client(slow.port, slow.ca, timeout=30)
    try:
        started = time.monotonic()
        reply = client.post("/mutate?timeout=1s", _review("late-1"))
        took = time.monotonic() - started
    finally:
        client.close()
    # The answer itself is whole; the API server had given up on it after 1 s.
    assert reply.status == 200
    assert took >= 1.0
    wait_for(lambda: _dropped(slow, "late") == 1)
    (record,) = [r for r in slow.log_events("review_dropped") if r["uid"] == "late-1"]
    assert record["why"] == "late"
    assert record["hook"] == "mutate"
    assert record["timeout_ms"] == 1000
    assert record["duration_ms"] >= 1000
    assert record["level"] == "error"


def test_an_answer_in_time_is_not_counted(slow: ServerProcess) -> None:
    before = _dropped(slow, "late")
    client = Client(slow.port, slow.ca, timeout=30)
    try:
        assert client.post("/mutate?timeout=10s", _review("in-time-1")).status == 200
    finally:
        client.close()
    assert _dropped(slow, "late") == before
    assert not [r for r in slow.log_events("review_dropped") if r["uid"] == "in-time-1"]


def test_the_work_in_hand_shows_while_a_review_is_checked(slow: ServerProcess) -> None:
    backlog = "preemptguard_review_backlog_seconds"
    wait_for(lambda: slow.metric(backlog) == 0)  # the reviews of the tests before
    assert slow.metric("preemptguard_event_loop_lag_seconds") >= 0
    client = Client(slow.port, slow.ca, timeout=30)
    replies: list[int] = []
    sender = threading.Thread(
        target=lambda: replies.append(client.post("/mutate", _review("backlog-1")).status)
    )
    sender.start()
    try:
        wait_for(lambda: slow.metric(backlog) > 0, timeout=SLOW_SECONDS)
    finally:
        sender.join()
        client.close()
    assert replies == [200]
    wait_for(lambda: slow.metric(backlog) == 0)
