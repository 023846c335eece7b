"""SIGTERM: stop accepting, answer every review already in flight, exit 0.

A worker stops taking new connections at once; those the kernel queues for it meanwhile are
reset when its last review in flight is answered, not left waiting for the API server's
timeout. (In a cluster the Deployment's preStop pause takes the pod out of the Service's
endpoints before the signal, so few arrive.)
"""

from __future__ import annotations

import signal
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from tests.server.helpers import Client, Reply, fixture, harness_server

pytestmark = pytest.mark.slow

SLOW_SECONDS = 1.5
IN_FLIGHT = 6


def test_sigterm_finishes_in_flight_reviews(tmp_path: Path, tls_dir: Path) -> None:
    server = harness_server(tls_dir, tmp_path / "server.log", slow_seconds=SLOW_SECONDS)
    port = server.port
    review = fixture("create-pod-sweep-mutate")
    replies: list[Reply | Exception] = []
    # Connections opened before the signal: the API server's kept-alive ones.
    clients = [Client(port, server.ca, timeout=30) for _ in range(IN_FLIGHT)]
    probe = Client(port, server.ca, timeout=30)
    for client in [*clients, probe]:
        assert client.get("/healthz").status == 200

    def send(client: Client) -> None:
        try:
            replies.append(client.post("/mutate", review))
        except Exception as exc:  # noqa: BLE001 - every failure is reported below
            replies.append(exc)

    threads = [threading.Thread(target=send, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    time.sleep(SLOW_SECONDS / 3)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=30)
    assert server.terminate() == 0, server.logs()
    assert time.monotonic() - started < SLOW_SECONDS + 5

    assert len(replies) == IN_FLIGHT
    for reply in replies:
        assert isinstance(reply, Reply), reply
        assert reply.status == 200
        assert reply.response["uid"] == review["request"]["uid"]
        assert reply.response["patchType"] == "JSONPatch"
    assert len(server.log_events("admission")) == IN_FLIGHT
    for client in [*clients, probe]:
        client.close()


def test_sigterm_does_not_wait_for_idle_handshaken_connections(
    tmp_path: Path, tls_dir: Path
) -> None:
    """Go's HTTP client parks spare connections after the handshake, before any request.

    They carry no review, so a stop must not wait the whole graceful timeout for them.
    """
    server = harness_server(tls_dir, tmp_path / "server.log", graceful_timeout=120)
    port = server.port
    used = Client(port, server.ca)
    assert used.get("/healthz").status == 200
    idle = [Client(port, server.ca) for _ in range(4)]
    for client in idle:
        client.conn.connect()  # TLS handshake, then nothing
    time.sleep(0.5)  # past the worker's wait for a first request: parked in the poller
    started = time.monotonic()
    assert server.terminate(timeout=120) == 0, server.logs()
    # Far below the 120 s graceful timeout that a stop waiting on the idle ones would take.
    assert time.monotonic() - started < 30, server.logs()
    for client in [used, *idle]:
        client.close()


def test_connections_after_sigterm_get_no_review_and_are_not_left_waiting(
    tmp_path: Path, tls_dir: Path
) -> None:
    """A stopping server answers no new connection, and refuses or resets each once the reviews
    in flight are answered: the API server then applies the webhook's failurePolicy, instead
    of waiting out its timeout on a connection that nothing will ever answer."""
    server = harness_server(
        tls_dir, tmp_path / "server.log", slow_seconds=4 * SLOW_SECONDS, graceful_timeout=120
    )
    review = fixture("create-pod-sweep-mutate")
    in_flight = Client(server.port, server.ca, timeout=30)
    replies: list[Reply | Exception] = []

    def send() -> None:
        try:
            replies.append(in_flight.post("/mutate", review))
        except Exception as exc:  # noqa: BLE001 - reported below
            replies.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    time.sleep(SLOW_SECONDS / 3)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert thread.is_alive(), "the review in flight should still be evaluated"
    try:
        late = Client(server.port, server.ca, timeout=30)
        with pytest.raises((ConnectionError, ssl.SSLError)):
            late.get("/healthz")
        late.close()
        thread.join(timeout=30)
        # Ended by the drain, not by the client's timeout.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=10).close()
    finally:
        thread.join(timeout=30)
        assert server.terminate() == 0, server.logs()
    assert len(replies) == 1
    assert isinstance(replies[0], Reply), replies[0]
    assert replies[0].status == 200
    in_flight.close()
