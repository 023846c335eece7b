"""Clients that start a handshake or a request and never finish it hold nothing a review needs,
and their connections are closed once past their deadline.

The server's I/O waits for their bytes without holding the event loop, so a review is answered
while any number of such clients wait; past its deadline each is closed: a handshake 10 s
after the connection opened, headers ``IDLE_TIMEOUT`` after it (or after the last answer), a
body at the review's own deadline with a 408 saying why. These tests assert what is answered
and closed, never how fast.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.helpers import Client, ServerProcess, client_context, fixture, harness_server
from webhook.server.transport import INTAKE_BUDGET, MAX_PIECES

pytestmark = pytest.mark.slow

THREADS = 4
# Shorter than the shipped 30 s, so that the tests wait for it without waiting long.
IDLE_TIMEOUT = 3.0
# Far longer than any deadline here: a stalled client is never what ends these waits.
CLIENT_TIMEOUT = 60.0


def stalled(port: int, ca: Path, data: bytes) -> ssl.SSLSocket:
    """A TLS connection that sent ``data`` and then nothing more, left open."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
    conn = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(data)
    return conn


def half_a_client_hello(port: int) -> socket.socket:
    """A connection that sent the first half of a TLS ClientHello, left open."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="x")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    hello = outgoing.read()
    conn = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
    conn.sendall(hello[: len(hello) // 2])
    return conn


def read_all(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def still_open(conn: socket.socket) -> bool:
    """Whether the server has neither sent anything on ``conn`` nor closed it."""
    conn.setblocking(False)
    try:
        conn.recv(1)
    except (BlockingIOError, ssl.SSLWantReadError):
        return True
    finally:
        conn.settimeout(CLIENT_TIMEOUT)
    return False


@contextlib.contextmanager
def serving(
    tmp_path: Path, tls_dir: Path, **options: Any
) -> Iterator[tuple[ServerProcess, list[socket.socket]]]:
    """A harness server with ``THREADS`` threads, and a list for the connections a test opens:
    they are closed, then the server is stopped, which must end cleanly and without a
    traceback in its log."""
    options.setdefault("idle_timeout", IDLE_TIMEOUT)
    server = harness_server(tls_dir, tmp_path / "server.log", threads=THREADS, **options)
    opened: list[socket.socket] = []
    try:
        yield server, opened
    finally:
        for conn in opened:
            conn.close()
        stopped = server.terminate()
    assert stopped == 0, server.logs()
    assert "Traceback" not in server.logs()


def answered(server: ServerProcess, timeout: float = CLIENT_TIMEOUT) -> None:
    """A review on a new connection gets its answer."""
    probe = Client(server.port, server.ca, timeout=timeout)
    reply = probe.post("/mutate", fixture("create-pod-sweep-mutate"))
    probe.close()
    assert reply.status == 200, server.logs()


def test_stalled_handshakes_and_requests_hold_nothing(tmp_path: Path, tls_dir: Path) -> None:
    with serving(tmp_path, tls_dir) as (server, opened):
        partial_headers = b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        partial_body = (
            b"POST /mutate?timeout=5s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"apiVersion"'
        )
        # Four times as many of each as the pool has threads: had any of them held one, or
        # the event loop, the review below would have waited for its deadline.
        hellos = [half_a_client_hello(server.port) for _ in range(THREADS * 4)]
        headers = [stalled(server.port, server.ca, partial_headers) for _ in range(THREADS * 4)]
        bodies = [stalled(server.port, server.ca, partial_body) for _ in range(THREADS * 4)]
        opened += [*hellos, *headers, *bodies]
        answered(server)
        assert all(still_open(conn) for conn in hellos + headers + bodies)

        # Past their deadlines the server closes them; a body begun gets a 408 and why.
        for conn in hellos + headers:
            assert read_all(conn) == b""
        for conn in bodies:
            answer = read_all(conn)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert answer.endswith(
                b"\r\n\r\nthe review did not arrive whole before its deadline\n"
            ), answer


def test_connections_that_send_nothing_hold_no_thread_and_are_closed(
    tmp_path: Path, tls_dir: Path
) -> None:
    with serving(tmp_path, tls_dir) as (server, opened):
        silent = [
            socket.create_connection(("127.0.0.1", server.port), timeout=CLIENT_TIMEOUT)
            for _ in range(THREADS * 5)
        ]
        opened += silent
        answered(server, timeout=4.0)
        # Still silent after the handshake timeout: closed by the server.
        for conn in silent:
            assert conn.recv(1) == b""


def test_idle_connections_at_the_limit_wait_no_longer_than_the_idle_timeout(
    tmp_path: Path, tls_dir: Path
) -> None:
    """At the connection limit a new connection waits to be accepted; handshaken connections
    that send nothing are closed after the idle timeout, the kept-alive ones after as long
    idle, so the wait is bounded and filling the limit takes a handshake per connection per
    ``IDLE_TIMEOUT``."""
    limit = 12
    with serving(tmp_path, tls_dir, workers=1, max_connections=limit) as (server, opened):
        idle = [stalled(server.port, server.ca, b"") for _ in range(limit)]
        opened += idle
        answered(server, timeout=IDLE_TIMEOUT + 10)
        assert all(read_all(conn) == b"" for conn in idle)
        # A kept-alive connection is closed after as long idle.
        kept = Client(server.port, server.ca, timeout=CLIENT_TIMEOUT)
        assert kept.post("/mutate", fixture("create-pod-sweep-mutate")).status == 200
        sock = kept.conn.sock
        assert sock is not None
        assert read_all(sock) == b""
        kept.close()


def final_response(conn: socket.socket) -> tuple[bytes, bytes]:
    """The head and body of the next final response on ``conn`` (by its Content-Length),
    past any interim (1xx) ones: a client reads any number of them before the final one
    (RFC 9110 section 15.2)."""
    data = b""
    while True:
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, data = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 1"):
            break
    length = next(
        int(line.partition(b":")[2])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(data) < length:
        data += conn.recv(65536)
    return head, data


def review_request(extra_headers: bytes = b"") -> tuple[bytes, bytes]:
    body = json.dumps(fixture("create-pod-sweep-mutate")).encode()
    head = (
        b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n%s\r\n" % (len(body), extra_headers)
    )
    return head, body


def pieces(rng: random.Random, wire: bytes) -> list[bytes]:
    """``wire`` cut at random places, in pieces from one byte to a few TLS records."""
    cuts, at = [], 0
    while at < len(wire):
        size = rng.choice([1, 2, 7, 211, 1500, 5000, 40_000])
        cuts.append(wire[at : at + size])
        at += size
    return cuts


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_requests_sent_in_pieces_are_answered(tmp_path: Path, tls_dir: Path, chunked: bool) -> None:
    """More connections than threads, each sending two pipelined reviews cut at random
    places (seeded), a piece per connection in turn: each request is read over many turns
    and answered whole, in order."""
    rng = random.Random(11 + chunked)
    with serving(tmp_path, tls_dir) as (server, opened):
        head, body = review_request()
        if chunked:
            head = head.replace(b"Content-Length: %d" % len(body), b"Transfer-Encoding: chunked")
            body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces(rng, body)) + b"0\r\n\r\n"
        conns = [stalled(server.port, server.ca, b"") for _ in range(THREADS * 3)]
        opened += conns
        plans = [pieces(rng, (head + body) * 2) for _ in conns]
        while any(plans):
            for conn, plan in zip(conns, plans, strict=True):
                if plan:
                    conn.sendall(plan.pop(0))
            time.sleep(0.001)
        for conn in conns:
            for _ in range(2):
                answer_head, answer = final_response(conn)
                assert answer_head.startswith(b"HTTP/1.1 200 "), answer_head
                response = json.loads(answer)["response"]
                assert response["allowed"] is True
                assert response["patchType"] == "JSONPatch"


def test_a_client_that_expects_100_continue_is_told_to_send_its_body(
    tmp_path: Path, tls_dir: Path
) -> None:
    with serving(tmp_path, tls_dir) as (server, opened):
        head, body = review_request(b"Expect: 100-continue\r\n")
        conn = stalled(server.port, server.ca, head)
        opened.append(conn)
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            interim += conn.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(body)
        answer_head, answer = final_response(conn)
        assert answer_head.startswith(b"HTTP/1.1 200 "), answer_head
        assert json.loads(answer)["response"]["allowed"] is True


def pipelined_until_full(port: int, ca: Path, request: bytes) -> ssl.SSLSocket:
    """A connection that sends request after request and reads no answer, until the server
    stops taking requests (its answers fill the buffers between them)."""
    raw = socket.socket()
    raw.settimeout(CLIENT_TIMEOUT)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(("127.0.0.1", port))
    conn = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1")
    conn.settimeout(1.0)
    with contextlib.suppress(TimeoutError):
        for _ in range(20_000):
            conn.sendall(request)
    conn.settimeout(CLIENT_TIMEOUT)
    return conn


def test_clients_that_do_not_read_their_answers_hold_nothing(tmp_path: Path, tls_dir: Path) -> None:
    """An answer is sent as the client takes it, by the server's I/O: a client that stops
    reading holds neither the event loop nor a thread (with gunicorn's blocking send it held
    a thread for as long as it kept the connection open)."""
    with serving(tmp_path, tls_dir, workers=1) as (server, opened):
        head, body = review_request()
        readers = [
            pipelined_until_full(server.port, server.ca, head + body) for _ in range(THREADS * 2)
        ]
        opened += readers
        answered(server)
        # Once they read, their answers come, in order and whole.
        answer_head, answer = final_response(readers[0])
        assert answer_head.startswith(b"HTTP/1.1 200 "), answer_head
        assert json.loads(answer)["response"]["allowed"] is True


def test_clients_that_keep_their_end_open_after_a_close_do_not_stall_the_worker(
    tmp_path: Path, tls_dir: Path
) -> None:
    """After an answer that closes the connection, the client may keep its end open: twenty
    such clients at once must not hold the worker's other connections (gunicorn waited up to
    2 s for each on the thread that ran its poller: 40 s)."""
    with serving(tmp_path, tls_dir, workers=1) as (server, opened):
        head, body = review_request(b"Connection: close\r\n")
        closing = [stalled(server.port, server.ca, b"") for _ in range(20)]
        opened += closing
        # All connected first, then all their requests at once: their closes come together.
        for conn in closing:
            conn.sendall(head + body)
        # Well under the 40 s the worker used to stand still: a generous bound, not a timing.
        answered(server, timeout=20.0)
        for conn in closing:
            answer = read_all(conn)
            assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_large_requests_coming_in_slowly_are_held_within_a_budget(
    tmp_path: Path, tls_dir: Path
) -> None:
    """Each connection sends most of a 7 MiB request and stops: read without limit, a
    thousand of them would hold 7 GiB until their deadline. Past INTAKE_BUDGET the ones
    coming in longest are given up with a 503, and the newest are still waited for."""
    with serving(tmp_path, tls_dir, workers=1) as (server, opened):
        head = (
            b"POST /mutate?timeout=30s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (7 * 2**20)
        )
        count = INTAKE_BUDGET // (5 * 2**20) + 2
        senders = []
        for _ in range(count):
            senders.append(stalled(server.port, server.ca, head + b" " * (5 * 2**20)))
            opened.append(senders[-1])
        answered(server)
        answer = read_all(senders[0])
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer[:200]
        assert answer.endswith(b"send a review whole, at once\n"), answer
        assert still_open(senders[-1])


def test_a_body_in_too_many_pieces_is_not_read_on(tmp_path: Path, tls_dir: Path) -> None:
    """Each piece of a body costs the event loop: a body sent a byte at a time stops being
    read after ``MAX_PIECES`` of them."""
    with serving(tmp_path, tls_dir, workers=1) as (server, opened):
        head = (
            b"POST /mutate?timeout=30s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        conn = stalled(server.port, server.ca, head)
        opened.append(conn)
        for _ in range(MAX_PIECES + 1):
            conn.sendall(b"1\r\n \r\n")
            time.sleep(0.0002)  # one TLS record, one piece, each
        answer = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer[:200]
        assert answer.endswith(b"the body came in too many pieces: send it whole, at once\n")
