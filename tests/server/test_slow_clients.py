"""Clients that start a request and never finish it must not hold the server's threads.

Every request gets a read deadline (``serving.REQUEST_READ_TIMEOUT``); these tests assert that
the server answers again and closes the stalled connections, never how fast.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from tests.server.helpers import Client, client_context, fixture, harness_server
from webhook.server.gunicorn import REQUEST_READ_TIMEOUT

THREADS = 4
# Far longer than the read deadline: a stalled client is never what ends these waits.
CLIENT_TIMEOUT = 60.0
DEADLINE = f"{REQUEST_READ_TIMEOUT:g}"


def stalled(port: int, ca: Path, data: bytes) -> ssl.SSLSocket:
    """A TLS connection that sent ``data`` and then nothing more, left open."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
    conn = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(data)
    return conn


def read_all(conn: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def test_stalled_requests_do_not_hold_the_threads(tmp_path: Path, tls_dir: Path) -> None:
    server = harness_server(tls_dir, tmp_path / "server.log", threads=THREADS)
    partial_headers = b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    partial_body = (
        b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"apiVersion"'
    )
    held = [stalled(server.port, server.ca, partial_headers) for _ in range(THREADS // 2)]
    held += [stalled(server.port, server.ca, partial_body) for _ in range(THREADS // 2)]

    # Every thread is now reading a request that will never be complete; this review is
    # answered once they give up on them (without a deadline, never).
    probe = Client(server.port, server.ca, timeout=CLIENT_TIMEOUT)
    reply = probe.post("/mutate", fixture("create-pod-sweep-mutate"))
    assert reply.status == 200, server.logs()
    probe.close()

    # The stalled connections were closed by the server, a partial body with a reason why.
    for conn in held[: THREADS // 2]:
        assert read_all(conn) == b""
    for conn in held[THREADS // 2 :]:
        answer = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        reason = f"body could not be read: the request was not complete within {DEADLINE} s"
        assert answer.endswith(f"\r\n\r\n{reason}\n".encode()), answer
    for conn in held:
        conn.close()
    assert server.terminate() == 0, server.logs()
    assert "Traceback" not in server.logs()


def test_connections_that_send_nothing_hold_no_thread_and_are_closed(
    tmp_path: Path, tls_dir: Path
) -> None:
    server = harness_server(tls_dir, tmp_path / "server.log", threads=THREADS)
    # More silent connections than threads: gthread's own wait would hold each thread 5 s.
    silent = [
        socket.create_connection(("127.0.0.1", server.port), timeout=CLIENT_TIMEOUT)
        for _ in range(THREADS * 5)
    ]
    try:
        # Answered at once: well inside the time one silent connection used to hold a thread.
        probe = Client(server.port, server.ca, timeout=4.0)
        reply = probe.post("/mutate", fixture("create-pod-sweep-mutate"))
        probe.close()
        assert reply.status == 200, server.logs()
        # Still silent after the handshake timeout: closed by the server.
        for conn in silent:
            assert conn.recv(1) == b""
    finally:
        for conn in silent:
            conn.close()
        stopped = server.terminate()
    assert stopped == 0, server.logs()
    assert "Traceback" not in server.logs()


def test_idle_connections_at_the_limit_make_room_for_new_ones(
    tmp_path: Path, tls_dir: Path
) -> None:
    limit = 12
    server = harness_server(
        tls_dir, tmp_path / "server.log", threads=THREADS, workers=1, max_connections=limit
    )
    # Twice the limit of handshaken connections that never send a request: kept for the
    # keep-alive time, they would fill the worker and keep every new connection out.
    idle = [stalled(server.port, server.ca, b"") for _ in range(limit * 2)]
    try:
        for _ in range(3):
            probe = Client(server.port, server.ca, timeout=10.0)
            reply = probe.post("/mutate", fixture("create-pod-sweep-mutate"))
            probe.close()
            assert reply.status == 200, server.logs()
        # The oldest idle connections were closed to make room.
        assert read_all(idle[0]) == b""
    finally:
        for conn in idle:
            conn.close()
        stopped = server.terminate()
    assert stopped == 0, server.logs()
    assert "Traceback" not in server.logs()
