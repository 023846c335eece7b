"""Bursts as the API server makes them: many keep-alive TLS connections, some left idle.

These tests assert that every request is answered, never how fast (the benchmark measures).
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from tests.server.helpers import (
    Client,
    ServerProcess,
    client_context,
    fixture,
    server_socket_option,
)

pytestmark = pytest.mark.slow

CONNECTIONS = 64
REQUESTS_EACH = 10
# Go's HTTP client dials spare connections in a burst and leaves them idle in its pool.
IDLE_CONNECTIONS = 40
CLIENT_TIMEOUT = 10.0


def idle_connections(port: int, ca: Path, count: int) -> list[ssl.SSLSocket]:
    context = client_context(ca)
    opened = []
    for _ in range(count):
        raw = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
        opened.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
    return opened


def test_idle_handshaken_connections_do_not_stall_the_server(server: ServerProcess) -> None:
    idle = idle_connections(server.port, server.ca, IDLE_CONNECTIONS)
    client = Client(server.port, server.ca, timeout=CLIENT_TIMEOUT)
    for _ in range(3):
        assert client.post("/mutate", fixture("create-pod-sweep-mutate")).status == 200
    client.close()
    # The idle ones were parked, not dropped: each still serves its first request.
    for conn in idle[:5]:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert conn.recv(64).startswith(b"HTTP/1.1 200")
    for conn in idle:
        conn.close()


def test_burst_of_keep_alive_connections_is_fully_answered(server: ServerProcess) -> None:
    idle = idle_connections(server.port, server.ca, IDLE_CONNECTIONS)
    review = fixture("create-pod-sweep-mutate")
    answered: list[int] = []
    failures: list[Exception] = []
    lock = threading.Lock()

    def burst() -> None:
        client = Client(server.port, server.ca, timeout=CLIENT_TIMEOUT)
        try:
            for _ in range(REQUESTS_EACH):
                reply = client.post("/mutate", review)
                assert reply.response["uid"] == review["request"]["uid"]
                with lock:
                    answered.append(reply.status)
        except Exception as exc:  # noqa: BLE001 - every failure is reported below
            with lock:
                failures.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=burst) for _ in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for conn in idle:
        conn.close()
    assert failures == []
    assert answered == [200] * (CONNECTIONS * REQUESTS_EACH)


def test_accepted_connections_have_tcp_nodelay(server: ServerProcess) -> None:
    # Without TCP_NODELAY, a response written in pieces waits on the client's delayed ACK
    # (40 ms and more per review). Read off the server's own socket for this connection.
    (conn,) = idle_connections(server.port, server.ca, 1)
    try:
        nodelay = server_socket_option(
            server.proc.pid, conn.getsockname()[1], socket.IPPROTO_TCP, socket.TCP_NODELAY
        )
    finally:
        conn.close()
    assert nodelay != 0
