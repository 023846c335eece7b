"""Reviews built to be slow, many at once, on one worker process as the shipped one-CPU
replica runs: every review is answered before the API server's deadline, checked or refused
as busy, and ordinary reviews arriving meanwhile are still checked.

These tests assert outcomes, never how fast (benchmarks/slow_review_bench.py measures).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import adversarial
from tests.server.helpers import ServerProcess, client_context, fixture, free_port, harness_server
from webhook.server.gate import (
    LARGE_BODY_BYTES,
    MEDIUM_BODY_BYTES,
    MEDIUM_SHARE,
    Deadline,
    thread_seconds,
    timeout_seconds,
)

pytestmark = pytest.mark.slow

BURST = 24
TIMEOUT = "3s"
TIMEOUT_MS = 3000
CLIENT_TIMEOUT = 30.0
ENGINE_REFUSAL = "class serving must run on standard nodes"
# Reviews checked in a thread, as large as they come there, built to be slow (~480 KiB).
SLOW_REVIEW = adversarial.encode(adversarial.review_of(adversarial.deep_and_dense(500 * 1024)))
# What the engine of the harness spends on each of them besides, so that the burst is more
# work than medium reviews may take on any machine, while each still costs less than expected.
EXTRA_CPU_SECONDS = 0.1


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory, tls_dir: Path) -> Iterator[ServerProcess]:
    """``preemptguard serve --workers 1``."""
    port = free_port()
    log = tmp_path_factory.mktemp("flood") / "server.log"
    args = [
        "--host", "127.0.0.1",
        "--port", str(port),
        "--metrics-port", "0",
        "--workers", "1",
        "--cert-file", str(tls_dir / "tls.crt"),
        "--key-file", str(tls_dir / "tls.key"),
    ]  # fmt: skip
    server = ServerProcess(args, ca=tls_dir / "ca.crt", log=log, port=port, metrics_port=0)
    yield server
    assert server.terminate() == 0, server.logs()


@pytest.fixture(scope="module")
def slower_engine(
    tmp_path_factory: pytest.TempPathFactory, tls_dir: Path
) -> Iterator[ServerProcess]:
    """One worker whose engine spends ``EXTRA_CPU_SECONDS`` more on each slow pod."""
    log = tmp_path_factory.mktemp("slower") / "server.log"
    server = harness_server(tls_dir, log, workers=1, cpu_seconds={"deep": EXTRA_CPU_SECONDS})
    yield server
    assert server.terminate() == 0, server.logs()


def connection(server: ServerProcess) -> http.client.HTTPSConnection:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=client_context(server.ca), timeout=CLIENT_TIMEOUT
    )
    conn.connect()
    return conn


def post(conn: http.client.HTTPSConnection, path: str, body: bytes) -> tuple[int, Any]:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    data = reply.read()
    return reply.status, json.loads(data) if reply.status == 200 else data.decode()


def with_uid(body: bytes, uid: str) -> bytes:
    """``body`` (a review of ``adversarial.review_of``) with another uid, without encoding the
    deep pod again."""
    return body.replace(b'"uid":"slow-0"', f'"uid":"{uid}"'.encode(), 1)


def ordinary_review(uid: str) -> bytes:
    review = fixture("create-pod-sweep-mutate")
    review["request"]["uid"] = uid
    return json.dumps(review).encode()


@dataclass
class Burst:
    slow: dict[str, tuple[int, Any]] = field(default_factory=dict)
    ordinary: dict[str, tuple[int, Any]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)


def burst(server: ServerProcess, tag: str, review: bytes = SLOW_REVIEW) -> Burst:
    """``BURST`` slow reviews, each on its own connection and sent at once, and ordinary
    reviews one after another on another connection until the slow ones are answered."""
    assert MEDIUM_BODY_BYTES < len(review) <= LARGE_BODY_BYTES
    slow = {f"{tag}-slow-{i}": with_uid(review, f"{tag}-slow-{i}") for i in range(BURST)}
    result = Burst()
    lock = threading.Lock()
    start = threading.Barrier(BURST + 1)
    done = threading.Event()

    def send(uid: str, body: bytes) -> None:
        try:
            conn = connection(server)
            start.wait()
            answer = post(conn, f"/mutate?timeout={TIMEOUT}", body)
            conn.close()
            with lock:
                result.slow[uid] = answer
        except BaseException as exc:  # noqa: BLE001 - every failure is reported below
            with lock:
                result.errors.append(exc)

    def ordinary() -> None:
        try:
            conn = connection(server)
            start.wait()
            for i in range(1000):
                uid = f"{tag}-ordinary-{i}"
                answer = post(conn, f"/mutate?timeout={TIMEOUT}", ordinary_review(uid))
                with lock:
                    result.ordinary[uid] = answer
                if done.wait(0.02):
                    break
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - every failure is reported below
            with lock:
                result.errors.append(exc)

    threads = [threading.Thread(target=send, args=item) for item in slow.items()]
    prober = threading.Thread(target=ordinary)
    for thread in [*threads, prober]:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    prober.join(timeout=120)
    assert result.errors == []
    assert sorted(result.slow) == sorted(slow)
    return result


def busy_or_refused(answers: dict[str, tuple[int, Any]]) -> int:
    """How many of ``answers`` to slow reviews were busy; every other one the engine's refusal,
    each a review echoing its uid."""
    busy = 0
    for uid, (status, doc) in answers.items():
        assert status == 200, doc
        assert (doc["apiVersion"], doc["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        response = doc["response"]
        assert (response["uid"], response["allowed"]) == (uid, False)
        message = response["status"]["message"]
        if response["status"]["code"] == 429:
            busy += 1
            assert "before the webhook times out: retry" in message
        else:
            assert ENGINE_REFUSAL in message
    return busy


def logged(server: ServerProcess, prefix: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` admission log lines of the reviews whose uid starts with ``prefix``."""
    deadline = time.monotonic() + 10
    while True:
        lines = [
            record
            for record in server.log_events("admission")
            if str(record.get("uid", "")).startswith(prefix)
        ]
        if len(lines) >= count or time.monotonic() > deadline:
            assert len(lines) == count
            return lines
        time.sleep(0.1)


def test_a_burst_of_slow_reviews_is_answered_in_time(one_worker: ServerProcess) -> None:
    result = burst(one_worker, "shipped")
    busy = busy_or_refused(result.slow)
    lines = logged(one_worker, "shipped-slow-", BURST)
    assert sum(line["outcome"] == "busy" for line in lines) == busy
    assert [line for line in lines if line["duration_ms"] >= TIMEOUT_MS] == []


@pytest.mark.parametrize("shape", ["deep-chains-under-the-cut", "deep-chains-unread-fast"])
def test_a_burst_of_reviews_nested_to_be_slow_is_answered_in_time(
    one_worker: ServerProcess, shape: str
) -> None:
    """Lists nested past the depth cut cost more than their size says: each is reckoned by
    the containers it opens, and every one is answered before the API server gives up."""
    review = adversarial.encode(adversarial.review_of(adversarial.SLOW_PODS[shape](480 * 1024)))
    result = burst(one_worker, shape, review)
    assert not result.errors, result.errors
    busy = busy_or_refused(result.slow)
    assert busy < BURST  # some were read and checked in full
    lines = logged(one_worker, f"{shape}-slow-", BURST)
    assert sum(line["outcome"] == "busy" for line in lines) == busy
    assert [line for line in lines if line["duration_ms"] >= TIMEOUT_MS] == []
    ordinary = logged(one_worker, f"{shape}-ordinary-", len(result.ordinary))
    assert [line for line in ordinary if line["duration_ms"] >= TIMEOUT_MS] == []


def test_more_slow_reviews_at_once_than_their_share_of_the_time_are_refused_as_busy(
    slower_engine: ServerProcess,
) -> None:
    # Arriving together, medium reviews may take a share of the time they have, and that
    # share of the time their arrivals are spread over: about half of these fit, and even
    # spread over two seconds, not all.
    due = Deadline.after(timeout_seconds(TIMEOUT), 0.0).at
    assert MEDIUM_SHARE * (due + 2) < BURST * EXTRA_CPU_SECONDS
    assert thread_seconds(len(SLOW_REVIEW)) > EXTRA_CPU_SECONDS
    result = burst(slower_engine, "burst")
    busy = busy_or_refused(result.slow)
    assert busy >= 1
    lines = logged(slower_engine, "burst-slow-", BURST)
    assert sum(line["outcome"] == "busy" for line in lines) == busy
    assert [line for line in lines if line["duration_ms"] >= TIMEOUT_MS] == []


def test_ordinary_reviews_sent_during_the_burst_are_checked(
    slower_engine: ServerProcess,
) -> None:
    result = burst(slower_engine, "beside")
    assert result.ordinary
    for uid, (status, doc) in result.ordinary.items():
        assert status == 200, doc
        response = doc["response"]
        assert (response["uid"], response["allowed"]) == (uid, True), response.get("status")
        assert response["patchType"] == "JSONPatch"
    lines = logged(slower_engine, "beside-ordinary-", len(result.ordinary))
    assert {line["outcome"] for line in lines} == {"patched"}
    assert [line for line in lines if line["duration_ms"] >= TIMEOUT_MS] == []


def test_a_review_that_waited_for_a_thread_past_its_deadline_is_refused_at_once(
    tmp_path: Path, tls_dir: Path
) -> None:
    """The deadline runs from when the request arrived, not from when a thread took it."""
    server = harness_server(
        tls_dir, tmp_path / "server.log", workers=1, threads=1, slow_seconds=3.0
    )
    try:
        first, second = connection(server), connection(server)
        answers: dict[str, tuple[int, Any]] = {}

        def slow() -> None:
            answers["first"] = post(first, "/mutate?timeout=10s", ordinary_review("first"))

        holder = threading.Thread(target=slow)
        holder.start()
        time.sleep(0.3)  # the only thread is checking the first review for 3 s
        # Due 1.6 s after it arrives (2 s, less the margin for the answer to travel back).
        answers["second"] = post(second, "/mutate?timeout=2s", ordinary_review("second"))
        holder.join(timeout=30)
        first.close()
        second.close()
        status, doc = answers["second"]
        assert status == 200, doc
        response = doc["response"]
        assert (response["uid"], response["allowed"]) == ("second", False)
        assert response["status"]["code"] == 429
        assert "waited behind others" in response["status"]["message"]
        assert answers["first"][1]["response"]["allowed"] is True
    finally:
        assert server.terminate() == 0, server.logs()
