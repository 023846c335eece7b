"""Seeded framing fuzz of the server's worker over TLS: every connection is answered or
closed within the request deadline, whole reviews get their 200s in order, and the server
keeps answering and logs no traceback. ``tests/fuzz/framing.py`` makes the cases."""

from __future__ import annotations

import socket
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fuzz.framing import FramingCase, framing_case
from tests.server.helpers import Client, ServerProcess, client_context, fixture, harness_server
from webhook.server import certs

pytestmark = pytest.mark.slow

SEED, CASES = 20261204, 160
# Headers not all in by then close the connection; a body not in by the review's deadline
# (the cases send ?timeout=3s) is answered 408.
IDLE_TIMEOUT = 3.0
# Far past every deadline: a connection still silent then is a hang.
CLIENT_TIMEOUT = IDLE_TIMEOUT + 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tls_dir = tmp_path_factory.mktemp("tls")
    certs.write(certs.issue(list(certs.LOCAL_HOSTS)), tls_dir)
    log = tmp_path_factory.mktemp("framing") / "server.log"
    proc = harness_server(tls_dir, log, threads=4, workers=1, idle_timeout=IDLE_TIMEOUT)
    try:
        yield proc
    finally:
        stopped = proc.terminate()
    assert stopped == 0, proc.logs()


class Answers:
    """The final answers on a connection, read as a client does (1xx skipped)."""

    def __init__(self, conn: ssl.SSLSocket) -> None:
        self.conn, self.data, self.closed = conn, b"", False

    def _more(self) -> bool:
        try:
            piece = self.conn.recv(65536)
        except (ssl.SSLError, ConnectionResetError):
            piece = b""
        self.data += piece
        self.closed = not piece
        return bool(piece)

    def next(self) -> tuple[int, bytes] | None:
        """The next final answer's status and body; None when the server closed first."""
        while True:
            while b"\r\n\r\n" not in self.data:
                if not self._more():
                    return None
            head, _, rest = self.data.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(
                (
                    int(line.partition(b":")[2])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(rest) < length:
                if not self._more():
                    return None
                rest = self.data.partition(b"\r\n\r\n")[2]
            self.data = rest[length:]
            if status >= 200:
                return status, rest[:length]


def exchange(port: int, ca: Path, case: FramingCase) -> list[int | None]:
    """The statuses of the answers to ``case`` (None: closed without one)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
    conn = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        try:
            for piece in case.pieces:
                conn.sendall(piece)
                time.sleep(0.0005)
            if case.half_close:
                socket.socket.shutdown(conn, socket.SHUT_WR)
        except (ssl.SSLError, ConnectionError):
            pass  # the server answered and closed before the rest: what it said is read below
        answers = Answers(conn)
        statuses: list[int | None] = []
        for _ in range(max(case.whole_reviews, 1)):
            answer = answers.next()
            statuses.append(None if answer is None else answer[0])
            if answer is not None and case.whole_reviews:
                assert b'"allowed":true' in answer[1].replace(b" ", b""), (case, answer)
        return statuses
    finally:
        conn.close()


@pytest.fixture(scope="module")
def outcomes(server: ServerProcess) -> list[tuple[FramingCase, list[int | None]]]:
    cases = [framing_case(SEED, n) for n in range(CASES)]
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        results = list(pool.map(lambda c: exchange(server.port, server.ca, c), cases))
    return list(zip(cases, results, strict=True))


def test_whole_reviews_are_answered_in_order(
    outcomes: list[tuple[FramingCase, list[int | None]]],
) -> None:
    whole = [(case, statuses) for case, statuses in outcomes if case.whole_reviews]
    assert len(whole) > 20
    for case, statuses in whole:
        assert statuses == [200] * case.whole_reviews, (case.number, case.mutation, statuses)


def test_every_broken_request_is_answered_or_closed(
    outcomes: list[tuple[FramingCase, list[int | None]]],
) -> None:
    """Within the deadline (a hang fails the exchange with a timeout); a request stalled in
    its body with a 408, in its headers with a close, a half-closed one with a 400 or a
    close, the others as the parser decides."""
    seen: Counter[tuple[str, int | None]] = Counter()
    for case, statuses in outcomes:
        if case.whole_reviews:
            continue
        (status,) = statuses
        seen[case.mutation, status] += 1
        if case.mutation == "stalled":
            assert status in (408, None), (case.number, statuses)
        elif case.mutation == "half-closed":
            assert status in (400, None), (case.number, statuses)
        else:
            assert status in (200, 400, 408, 417, 431, None), (case.number, case.mutation, statuses)
    # Each kind of breakage was tried.
    assert {mutation for mutation, _ in seen} >= {"stalled", "half-closed", "bad-chunk-size"}


def test_the_server_answers_and_logged_no_traceback(
    server: ServerProcess, outcomes: list[tuple[FramingCase, list[int | None]]]
) -> None:
    probe = Client(server.port, server.ca, timeout=CLIENT_TIMEOUT)
    reply = probe.post("/mutate", fixture("create-pod-sweep-mutate"))
    probe.close()
    assert reply.status == 200
    assert "Traceback" not in server.logs()
