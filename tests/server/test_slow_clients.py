"""Clients that start a handshake or a request and never finish it must not hold the server's
threads, and their connections are closed once past their deadline.

A thread reads only the bytes that have arrived and parks the connection until more come, so a
review is answered while any number of such clients wait; past its deadline
(``HANDSHAKE_TIMEOUT``, ``REQUEST_READ_TIMEOUT``) each is closed, a request begun with a 408
saying why. These tests assert what is answered and closed, never how fast.
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
from webhook.server.gunicorn import INTAKE_BUDGET, REQUEST_READ_TIMEOUT
from webhook.server.intake import MAX_CHUNKS

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


def test_stalled_handshakes_and_requests_hold_no_thread(tmp_path: Path, tls_dir: Path) -> None:
    with serving(tmp_path, tls_dir) as (server, opened):
        partial_headers = b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        partial_body = (
            b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"apiVersion"'
        )
        # Four times as many of each as there are threads: each would hold a thread until its
        # deadline if a thread waited for its bytes.
        hellos = [half_a_client_hello(server.port) for _ in range(THREADS * 4)]
        requests = [stalled(server.port, server.ca, partial_headers) for _ in range(THREADS * 4)]
        requests += [stalled(server.port, server.ca, partial_body) for _ in range(THREADS * 4)]
        opened += [*hellos, *requests]
        answered(server)
        # Answered while every stalled connection was still open: none of them held a thread
        # (had they, the review would have waited for one to be given up on and closed).
        assert all(still_open(conn) for conn in hellos + requests)

        # Past their deadlines the server closes them, a request begun with a 408 and why.
        for hello in hellos:
            assert read_all(hello) == b""
        for conn in requests:
            answer = read_all(conn)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert answer.endswith(
                f"\r\n\r\nthe request was not complete within {DEADLINE} s\n".encode()
            ), answer


def test_connections_that_send_nothing_hold_no_thread_and_are_closed(
    tmp_path: Path, tls_dir: Path
) -> None:
    with serving(tmp_path, tls_dir) as (server, opened):
        # More silent connections than threads: gthread's own wait would hold each thread 5 s.
        silent = [
            socket.create_connection(("127.0.0.1", server.port), timeout=CLIENT_TIMEOUT)
            for _ in range(THREADS * 5)
        ]
        opened += silent
        # Answered at once: well inside the time one silent connection used to hold a thread.
        answered(server, timeout=4.0)
        # Still silent after the handshake timeout: closed by the server.
        for conn in silent:
            assert conn.recv(1) == b""


def test_idle_connections_at_the_limit_make_room_for_new_ones(
    tmp_path: Path, tls_dir: Path
) -> None:
    limit = 12
    with serving(tmp_path, tls_dir, workers=1, max_connections=limit) as (server, opened):
        # Twice the limit of handshaken connections that never send a request: kept for the
        # keep-alive time, they would fill the worker and keep every new connection out.
        idle = [stalled(server.port, server.ca, b"") for _ in range(limit * 2)]
        opened += idle
        for _ in range(3):
            answered(server, timeout=10.0)
        # The oldest idle connections were closed to make room.
        assert read_all(idle[0]) == b""


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
    places (seeded), a piece per connection in turn: each request is gathered over many turns
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


def test_clients_that_do_not_read_their_answers_hold_no_thread(
    tmp_path: Path, tls_dir: Path
) -> None:
    """gunicorn writes an answer with a blocking send: a client that stops reading held the
    thread for as long as it kept the connection open (here, for good: the review below
    was never answered). An answer is now sent as the client takes it."""
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
    """After an answer that closes the connection, gunicorn waits up to 2 s for the client to
    close too, on the thread that runs the poller: twenty such clients held every other
    connection of the worker for 40 s. The wait is now the poller's."""
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
    """Each connection sends most of a 7 MiB request and stops: gathered without limit, a
    thousand of them would hold 7 GiB. Past INTAKE_BUDGET the ones coming in longest are
    closed with a 503, and the newest are still waited for."""
    with serving(tmp_path, tls_dir, workers=1) as (server, opened):
        head = (
            b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (7 * 2**20)
        )
        count = INTAKE_BUDGET // (5 * 2**20) + 2
        senders = [stalled(server.port, server.ca, head + b" " * (5 * 2**20)) for _ in range(count)]
        opened += senders
        answered(server)
        answer = read_all(senders[0])
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer[:200]
        assert answer.endswith(b"the one coming in longest is closed to make room\n"), answer
        assert still_open(senders[-1])


def test_a_body_in_too_many_chunks_is_refused_before_it_is_parsed(
    tmp_path: Path, tls_dir: Path
) -> None:
    with serving(tmp_path, tls_dir, workers=1) as (server, opened):
        head = (
            b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        conn = stalled(server.port, server.ca, head + b"1\r\n \r\n" * (MAX_CHUNKS + 1))
        opened.append(conn)
        answer = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer[:200]
        assert answer.endswith(
            f"a chunked body in more than {MAX_CHUNKS} chunks is not read; send it whole\n".encode()
        ), answer
