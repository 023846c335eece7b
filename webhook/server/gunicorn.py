"""The production server: gunicorn's threaded worker over TLS, fixed for the API server's client.

One worker process with a pool of threads: the engine needs microseconds per review, so one
process serves thousands of reviews a second, and the caches, the reloader and the metrics
live in one place. Scale out with replicas behind the Service.

Stock gthread hands a new TLS connection to a pool thread that completes the handshake and
then blocks reading the first request. Go's HTTP client, which the API server uses, dials
spare connections during bursts and parks them idle in its pool; each one then holds a thread
until it is used or closed, and once they hold every thread the server stops answering (seen
here: 20 s hangs with 2 workers x 4 threads at 16 connections; 4 idle connections stall 4
threads for good). ``WebhookWorker`` gives the thread back when a handshake is not followed
by a request at once, as gthread already does for idle kept-alive connections.

Once a thread reads a request, stock gthread makes the socket blocking with no timeout, so a
client that sends part of a ClientHello or of a request and keeps the connection open holds
that thread for good; enough of them stop the server, and the API server then lets pods
through unchecked (failurePolicy Ignore). ``WebhookWorker`` reads neither in a blocking way:
a thread takes a connection when bytes have arrived, advances the handshake or gathers the
request's bytes as far as they go (``intake``), and parks the connection in the poller until
more come. A handshake must be done within ``HANDSHAKE_TIMEOUT`` of the connection's opening
and a request be all in within ``REQUEST_READ_TIMEOUT`` of its first bytes, or the connection
is closed; the bytes held for requests still coming in stay within ``INTAKE_BUDGET``.

Writing is the same story: gthread sends an answer with blocking writes, and closes a
connection by waiting up to 2 s for the client's own close on the poller's thread. A client
that does not read, or does not close, would hold a thread or the whole worker. Answers are
kept (``Outbox``) and sent as far as the client takes them, the rest from the poller within
``RESPONSE_WRITE_TIMEOUT``; the wait for a client's close is the poller's too.

The API server's clock for a review starts before any thread here reads it: a request may
wait in gthread's queue for a free thread. ``WebhookWorker`` stamps each connection when it
queues it for a thread, and the app gets that stamp (``ARRIVED`` in the environ), so that a
review's deadline runs from its arrival and one that waited too long is refused at once.
"""

from __future__ import annotations

import contextlib
import os
import queue
import selectors
import signal
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from gunicorn import glogging, http, sock
from gunicorn.app.base import BaseApplication
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers import gthread

from webhook.server.app import ARRIVED, CLOSE_CONNECTION, MAX_BODY_BYTES
from webhook.server.intake import Gathering, Next
from webhook.server.logs import stdlib_config

WSGIApp = Callable[..., Any]


class TLSSource(Protocol):
    """Where new connections get their TLS context (``reload.CertStore`` swaps it on change)."""

    cert_file: Path
    key_file: Path

    @property
    def context(self) -> ssl.SSLContext: ...


# A client that opens a connection sends its ClientHello at once; one that has not finished
# the handshake in this time is not the API server.
HANDSHAKE_TIMEOUT = 10.0
# How long a thread waits for a new connection's first bytes before handing it to the poller:
# a thread held by a connection that sends nothing is one fewer for reviews (gthread's own
# wait is 5 s), and a connection still silent after HANDSHAKE_TIMEOUT is closed there.
FIRST_DATA_WAIT = 0.005
# How long a thread waits for the first request after a handshake before handing the
# connection to the poller; a client that will send one has usually sent it already.
FIRST_REQUEST_WAIT = 0.005
# How long a request may take to come in, headers and body together, from its first bytes.
# The API server sends a review (3 MiB at most) at once; a client still sending after this is
# stalled or hostile. It is one deadline for the whole request, not one per read, so a client
# trickling a byte at a time cannot stretch it.
REQUEST_READ_TIMEOUT = 10.0
# Sent for a request whose headers ask for it before its body is sent (Expect: 100-continue).
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def closing_answer(status: str, reason: str) -> bytes:
    """An answer saying ``reason``, after which the connection is closed."""
    body = f"{reason}\n".encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


# The answer to a request that missed its deadline, sent as its connection is closed.
REQUEST_TIMED_OUT = closing_answer(
    "408 Request Timeout", f"the request was not complete within {REQUEST_READ_TIMEOUT:g} s"
)
# How long a client may take to read an answer (a review's is a few KiB): the answer is sent as
# the client takes it, from the poller, and a client that stops reading is closed after this.
RESPONSE_WRITE_TIMEOUT = 10.0
# A connection closed on this side waits this long, reading at most this much, for its client
# to close too (gunicorn's own figures; see WebhookWorker._linger).
LINGER = 2.0
LINGER_DRAIN_BYTES = 65536
# Connections a worker keeps lingering at most; past this a connection is closed at once, so
# that clients closing nothing cannot make the worker hold sockets beyond its connection limit.
MAX_LINGERING = 256
# What a thread's turn returns when the client has yet to take the rest of its answer.
_WRITING = object()
# The bytes a worker holds for requests still coming in. The API server sends a review whole
# (3 MiB at most) within milliseconds; past this, the requests that have been coming in longest
# are closed with BUSY_GATHERING to make room, so that clients sending large requests slowly
# cannot make a worker hold more memory than this.
INTAKE_BUDGET = 32 * 1024 * 1024
BUSY_GATHERING = closing_answer(
    "503 Service Unavailable",
    f"this server holds {INTAKE_BUDGET // 2**20} MiB of requests still coming in; the one "
    "coming in longest is closed to make room",
)
# How often the worker looks for parked connections past their deadline.
SWEEP_INTERVAL = 0.25


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    host: str = "0.0.0.0"
    port: int = 8443
    # Worker processes; 0: one per CPU this process may use (see available_cpus).
    workers: int = 0
    threads: int = 16
    # Longer than the idle timeout of Go's HTTP client (90 s), so the API server closes idle
    # connections first: when the server closes them, a review sent at that moment fails.
    keepalive: int = 120
    graceful_timeout: int = 30
    backlog: int = 2048
    log_level: str = "info"
    # Connections one worker process keeps open; at the limit it closes idle ones to accept
    # more (see WebhookWorker.set_accept_enabled).
    max_connections: int = 1000


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """Called in each worker process after it starts, when asked to stop, and as it exits;
    and in the arbiter once it is ready, and when a worker has exited (with its pid)."""

    started: Callable[[], None] = lambda: None
    stopping: Callable[[], None] = lambda: None
    exited: Callable[[], None] = lambda: None
    ready: Callable[[], None] = lambda: None
    worker_gone: Callable[[int], None] = lambda pid: None


def available_cpus() -> int:
    """The CPUs this process may use: its affinity, and the cgroup's quota where there is one
    (a pod's CPU limit), rounded up."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(count, quota)) if quota else max(1, count)


def _cgroup_quota() -> int | None:
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except OSError:
        return None
    if len(text) != 2 or text[0] == "max":
        return None
    try:
        quota, period = int(text[0]), int(text[1])
    except ValueError:
        return None
    return -(-quota // period) if period > 0 else None


class ReadTimeout(http.errors.NoMoreData):  # type: ignore[misc]
    """A request was not read in full within ``REQUEST_READ_TIMEOUT``.

    A ``NoMoreData`` so that gthread closes the connection quietly, as for a client gone.
    """

    def __str__(self) -> str:
        return f"the request was not complete within {REQUEST_READ_TIMEOUT:g} s"


class DeadlineUnreader(SocketUnreader):  # type: ignore[misc]
    """gunicorn's socket reader, bounding every read by the deadline of the current request.

    gthread makes the socket blocking again each time a thread takes the connection (and
    around its own drains), so the deadline is applied here, just before each read.
    """

    deadline: float | None = None
    expired = False

    def chunk(self, size_hint: int | None = None) -> bytes:
        if self.deadline is None:
            data: bytes = super().chunk(size_hint)
            return data
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.expired = True
            raise ReadTimeout()
        prior = self.sock.gettimeout()
        # A shorter timeout already set (gthread's bounded body drain) still applies.
        bounded = prior is not None and prior <= remaining
        self.sock.settimeout(prior if bounded else remaining)
        try:
            data = super().chunk(size_hint)
        except TimeoutError:
            if bounded:
                raise
            self.expired = True
            raise ReadTimeout() from None
        finally:
            with contextlib.suppress(OSError):  # closed meanwhile
                self.sock.settimeout(prior)
        return data


class _Serving(threading.local):
    """What the thread serving a request knows of it beyond the WSGI environ."""

    # When gthread queued its connection for a thread (``time.monotonic()``).
    arrived: float | None = None


_serving = _Serving()


class WebhookWorker(gthread.ThreadWorker):  # type: ignore[misc]
    """gthread whose threads never wait on an idle, freshly handshaken TLS connection, nor
    longer than ``REQUEST_READ_TIMEOUT`` on a request that is not coming in; and whose app
    knows when each request arrived."""

    nr_conns: int
    worker_connections: int
    pending_conns: deque[gthread.TConn]
    keepalived_conns: deque[gthread.TConn]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Connections given up on (a missed read deadline, a failed handshake), to close
        # without lingering: see finish_request().
        self._stalled: set[gthread.TConn] = set()
        # Connections whose answer waits for the client to take it, and connections closed
        # on this side whose client has yet to close its own (see _linger).
        self._writing: set[gthread.TConn] = set()
        self._lingering: set[gthread.TConn] = set()
        # The bytes held for each request still coming in, and their sum (see INTAKE_BUDGET).
        self._held: dict[gthread.TConn, int] = {}
        self._held_total = 0
        self._next_sweep = 0.0

    def enqueue_req(self, conn: gthread.TConn) -> None:
        # gthread queues a connection for a thread when it accepts it (the API server dials one
        # for a review and sends it at once) and when a kept-alive or parked one becomes
        # readable: a request has arrived (or more of one), and waits here for a thread from
        # now on. A request's stamp is its first bytes' arrival, kept while it comes in.
        now = time.monotonic()
        if not hasattr(conn, "opened"):
            # What the worker tracks of a connection, set once, when it is first queued.
            conn.opened, conn.handshaken, conn.intake, conn.continued = now, False, None, False
        if conn.intake is None:
            conn.arrived = now
        super().enqueue_req(conn)

    def handle(self, conn: gthread.TConn) -> Any:
        if not self.cfg.is_ssl:
            return self._serve(conn)
        if not conn.handshaken:
            if not conn.data_ready and not conn.wait_for_data(FIRST_DATA_WAIT):
                return gthread._DEFER
            step = self._handshake(conn)
            if step is not True:
                return step
            conn.data_ready = bool(conn.sock.pending())
            if not conn.wait_for_data(FIRST_REQUEST_WAIT):
                # finish_request() parks a deferred connection in the poller until readable.
                return gthread._DEFER
        return self._serve(conn)

    def _serve(self, conn: gthread.TConn) -> Any:
        """Answer the request on ``conn`` once its bytes are all in (see ``_gather``), telling
        the app when it arrived (see ``stamped_with_arrival``).

        The parser of a TLS connection is made in ``_handshake``; the server always serves
        TLS. The parser's reads keep the request's deadline, for what it reads beyond the
        bytes gathered (a request it refuses, a body it drains).
        """
        step = self._gather(conn)
        if step is not True:
            return step
        _serving.arrived = conn.arrived
        unreader = getattr(conn.parser, "unreader", None)
        if isinstance(unreader, DeadlineUnreader):
            unreader.deadline = conn.arrived + REQUEST_READ_TIMEOUT
        real = conn.sock
        outbox = Outbox(real)
        conn.sock = outbox
        try:
            result = super().handle(conn)
        finally:
            conn.sock = real
            _serving.arrived = None
            if isinstance(unreader, DeadlineUnreader) and unreader.expired:
                self._stalled.add(conn)
        return self._answered(conn, bytes(outbox.data), result)

    def _answered(self, conn: gthread.TConn, answer: bytes, result: Any) -> Any:
        """Send ``answer`` as far as the client takes it now: ``result`` once all is sent,
        ``_WRITING`` to send the rest from the poller (see finish_request)."""
        if not answer:
            return result
        sent = _send_now(conn.sock, answer)
        if sent < 0:
            self._stalled.add(conn)
            return False
        if sent == len(answer):
            return result
        # A view: what a slow reader leaves is sliced on, never copied again and again.
        conn.outbox, conn.after_write = memoryview(answer)[sent:], result
        return _WRITING

    def _gather(self, conn: gthread.TConn) -> Any:
        """Read what the client has sent of its request, without waiting for more: True when
        the parser has what it needs (``intake.Gathering``), ``_DEFER`` to wait in the poller
        for more, False to close (the client closed, or missed the request's deadline)."""
        unreader = getattr(conn.parser, "unreader", None)
        if not isinstance(unreader, DeadlineUnreader):
            return True
        held: Gathering = conn.intake or Gathering(MAX_BODY_BYTES)
        held.add(unreader.take_buffered())
        step = held.step()
        ended = False
        conn.sock.setblocking(False)
        # Past a size limit the step is PARSE, so this reads a bounded amount. Reading stops
        # once the socket would block: no byte then waits inside TLS, unseen by the poller.
        while step is not Next.PARSE and step is not Next.REFUSE:
            piece = _received(conn.sock)
            if not piece:
                ended = piece is not None
                break
            held.add(piece)
            step = held.step()
        if step is Next.REFUSE:
            _sent(conn.sock, closing_answer("400 Bad Request", held.why()))
            self._stalled.add(conn)
            return False
        # A request cut short by the client's close goes to the parser too: the app says what
        # was missing, in an answer a half-closed client still reads.
        if step is Next.PARSE or (ended and held):
            conn.intake, conn.continued = None, False
            unreader.unread(bytes(held.data))
            return True
        if ended:
            self._stalled.add(conn)
            return False
        if time.monotonic() > conn.arrived + REQUEST_READ_TIMEOUT:
            _sent(conn.sock, REQUEST_TIMED_OUT)
            self._stalled.add(conn)
            return False
        if step is Next.CONTINUE and not conn.continued:
            conn.continued = _sent(conn.sock, CONTINUE)
        # Nothing read (a TLS record without data) leaves no request begun.
        conn.intake = held or None
        return gthread._DEFER

    def _handshake(self, conn: gthread.TConn) -> Any:
        """Advance the TLS handshake with what the client has sent, without waiting for more:
        True once done (the connection gets its parser), ``_DEFER`` to wait in the poller
        for more, False when it failed."""
        try:
            if not conn.initialized:
                conn.initialized = True
                conn.sock = sock.ssl_wrap_socket(conn.sock, self.cfg)
            conn.sock.setblocking(False)
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            return gthread._DEFER
        except (OSError, ssl.SSLError) as exc:
            # SSLWantWriteError too: a ServerHello does not fill a new socket's send buffer
            # unless the client stopped reading.
            self.log.debug("TLS handshake with %s failed: %s", conn.client, exc)
            self._stalled.add(conn)
            return False
        conn.handshaken = True
        conn.sock.setblocking(True)
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader = DeadlineUnreader(conn.sock)
        return True

    def finish_request(self, conn: gthread.TConn, fs: Any) -> None:
        """Runs on the thread of the poller, which must never wait on a client: every
        other connection's turn waits behind it."""
        self._account(conn)
        if conn in self._stalled:
            self._stalled.discard(conn)
            self.nr_conns -= 1
            conn.close()
            return
        try:
            result = False if fs.cancelled() else fs.result()
        except Exception:  # noqa: BLE001 - handle() answers its errors; closed as gthread does
            result = False
        if result is _WRITING:
            self._await_writable(conn)
            return
        if not result or (result is gthread._DEFER and not self.alive):
            # gthread's graceful close waits up to 2 s here for the client to close too;
            # a client that keeps its end open would stop the worker for that long.
            self.nr_conns -= 1
            self._linger(conn)
            return
        # One finished request closes at most one connection. gthread counts a close twice
        # when closing raises, and a count below the truth ends a graceful shutdown before
        # the reviews still in flight are answered.
        floor = self.nr_conns - 1
        super().finish_request(conn, fs)
        self.nr_conns = max(self.nr_conns, floor)

    def _account(self, conn: gthread.TConn) -> None:
        """Count what ``conn`` holds of a request still coming in; over INTAKE_BUDGET, close
        the parked requests that have been coming in longest until the rest fit."""
        size = len(conn.intake) if conn.intake else 0
        before = self._held.pop(conn, 0)
        if size:
            self._held[conn] = size
        self._held_total += size - before
        if self._held_total <= INTAKE_BUDGET:
            return
        self._forget_closed_intakes()
        parked = set(self.pending_conns)
        for oldest in sorted((c for c in self._held if c in parked), key=lambda c: c.arrived):
            if self._held_total <= INTAKE_BUDGET:
                break
            _sent(oldest.sock, BUSY_GATHERING)
            self._held_total -= self._held.pop(oldest)
            oldest.intake = None
            self._drop(oldest, self.pending_conns)

    def _forget_closed_intakes(self) -> None:
        """Stop counting the requests of connections closed meanwhile (by any path)."""
        for conn in [c for c in self._held if c.sock.fileno() < 0]:
            self._held_total -= self._held.pop(conn)

    def _await_writable(self, conn: gthread.TConn) -> None:
        """Park ``conn`` until its client takes the rest of the answer (``conn.outbox``)."""
        conn.write_until = time.monotonic() + RESPONSE_WRITE_TIMEOUT
        self._writing.add(conn)
        self.poller.register(conn.sock, selectors.EVENT_WRITE, partial(self._on_writable, conn))

    def _on_writable(self, conn: gthread.TConn, _: Any) -> None:
        sent = _send_now(conn.sock, conn.outbox)
        if sent == len(conn.outbox):
            self._writing.discard(conn)
            self.poller.unregister(conn.sock)
            conn.outbox = memoryview(b"")
            self.finish_request(conn, _done(conn.after_write))
        elif sent < 0:
            self._drop(conn, self._writing)
        else:
            conn.outbox = conn.outbox[sent:]

    def _linger(self, conn: gthread.TConn) -> None:
        """Close ``conn`` as gthread does (RFC 9112 section 9.6: half-close, then read what
        the client still sends until it closes, at most ``LINGER`` s), waiting in the poller
        instead of on this thread. ``conn`` is no longer counted in ``nr_conns``."""
        if len(self._lingering) >= MAX_LINGERING:
            conn.close()
            return
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
            conn.linger_until, conn.drained = time.monotonic() + LINGER, 0
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_lingering, conn))
        except (OSError, ValueError, KeyError):
            conn.close()
            return
        self._lingering.add(conn)

    def _on_lingering(self, conn: gthread.TConn, _: Any) -> None:
        while conn.drained < LINGER_DRAIN_BYTES:
            piece = _received(conn.sock)
            if piece is None:
                return
            if not piece:
                break
            conn.drained += len(piece)
        self._drop(conn, self._lingering, counted=False)

    def murder_pending(self) -> None:
        # A stopping worker lingers on kept-alive connections only briefly; connections that
        # were handshaken but never sent a request carry no review either, yet stock gthread
        # keeps them for the whole keep-alive time, which holds the stop for the full graceful
        # timeout whenever the API server has spare connections parked here.
        if not self.alive:
            deadline = time.monotonic() + gthread.STOP_KEEPALIVE_LINGER
            for conn in self.pending_conns:
                conn.timeout = min(conn.timeout, deadline)
        super().murder_pending()
        self._close_stalled()

    def _close_stalled(self) -> None:
        """Close the parked connections that missed a deadline: a handshake not done within
        HANDSHAKE_TIMEOUT of the connection's opening, a request not all in within
        REQUEST_READ_TIMEOUT of its first bytes.

        gthread keeps a parked connection for the keep-alive time, which a client that opens
        connections and sends nothing, or a few bytes now and then, would fill with sockets
        for free; the API server sends its ClientHello as soon as it connects, and each
        review at once."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_INTERVAL
        silent: list[gthread.TConn] = []
        late: list[gthread.TConn] = []
        for c in self.pending_conns:
            if not c.handshaken and c.opened < now - HANDSHAKE_TIMEOUT:
                silent.append(c)
            elif c.intake is not None and c.arrived < now - REQUEST_READ_TIMEOUT:
                late.append(c)
        for conn in late:
            _sent(conn.sock, REQUEST_TIMED_OUT)
        for conn in silent + late:
            self._drop(conn, self.pending_conns)
        self._forget_closed_intakes()
        for conn in [c for c in self._writing if c.write_until < now]:
            self._drop(conn, self._writing)
        for conn in [c for c in self._lingering if c.linger_until < now]:
            self._drop(conn, self._lingering, counted=False)

    def set_accept_enabled(self, enabled: bool) -> None:
        if not enabled and self.alive and self._room_made():
            return  # still accepting: idle connections were closed instead
        super().set_accept_enabled(enabled)
        if not enabled and not self.alive:
            # Stopping: the arbiter has closed its copies of the listening sockets, so
            # closing these makes the kernel refuse new connections at once. Left open, they
            # would queue in the backlog, never accepted, until the client's timeout; refused,
            # the API server applies the webhook's failurePolicy straight away. Connections
            # already accepted are still served.
            for listener in self.sockets:
                listener.close()

    def _room_made(self) -> bool:
        """At the connection limit, close idle connections, those that never sent a request
        first and the longest idle after, until there is room for a new one.

        gthread stops accepting at the limit, so connections opened and left idle (for free:
        an idle TLS connection is kept for the keep-alive time) would keep the API server's
        new connections out, each a review timed out."""
        pending, kept = self.pending_conns, self.keepalived_conns
        idle = [
            *((c, pending) for c in pending if not c.handshaken),
            *((c, pending) for c in pending if c.handshaken),
            *((c, kept) for c in kept),
        ]
        for conn, held in idle:
            if self.nr_conns < self.worker_connections:
                break
            self._drop(conn, held)
        return self.nr_conns < self.worker_connections

    def _drop(
        self,
        conn: gthread.TConn,
        held: deque[gthread.TConn] | set[gthread.TConn],
        *,
        counted: bool = True,
    ) -> None:
        """Close a connection parked in the poller at once, taken out of ``held``;
        ``counted``: it is still counted in ``nr_conns`` (a lingering one is not)."""
        if isinstance(held, set):
            held.discard(conn)
        else:
            held.remove(conn)
        with contextlib.suppress(OSError, KeyError, ValueError):
            self.poller.unregister(conn.sock)
        if counted:
            self.nr_conns -= 1
        conn.close()

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.alive:
            self.app.hooks.stopping()
        super().handle_exit(sig, frame)

    def init_signals(self) -> None:
        inherited = signal.getsignal(signal.SIGTERM)
        super().init_signals()
        if stop_was_asked(inherited):
            self.handle_exit(signal.SIGTERM, None)


_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def stop_was_asked(inherited: Any) -> bool:
    """Whether the arbiter told this new worker to stop before it had handlers of its own.

    A worker forked while the arbiter is told to stop gets that signal from the arbiter
    between the fork and its own handlers: the arbiter's handler, inherited, only queues it
    in the worker's copy of the arbiter's queue, and the worker would serve on until the
    arbiter gave up waiting for it (the graceful timeout) and killed it. The queue is read
    here instead, from the handler ``inherited`` from the arbiter.
    """
    queued = getattr(getattr(inherited, "__self__", None), "SIG_QUEUE", None)
    if queued is None:
        return False
    asked = False
    with contextlib.suppress(queue.Empty):
        while True:
            asked |= queued.get_nowait() in _STOPS
    return asked


def _received(conn_sock: Any) -> bytes | None:
    """The next bytes ``conn_sock`` has received, without waiting: None when there are none
    yet, empty when the client has closed (or broken) the connection."""
    try:
        return bytes(conn_sock.recv(256 * 1024))
    except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
        return None
    except OSError:  # ssl.SSLError included
        return b""


def _send_now(conn_sock: Any, data: bytes | memoryview) -> int:
    """How much of ``data`` ``conn_sock`` takes without waiting; -1 when the connection is
    broken."""
    conn_sock.setblocking(False)
    sent = 0
    view = memoryview(data)
    while sent < len(data):
        try:
            sent += conn_sock.send(view[sent : sent + 256 * 1024])
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            break
        except OSError:
            return -1
    return sent


def _done(result: Any) -> futures.Future[Any]:
    done: futures.Future[Any] = futures.Future()
    done.set_result(result)
    return done


class Outbox:
    """A connection's socket to gunicorn's response code, keeping what is written to it.

    gunicorn writes an answer with blocking ``sendall`` calls, on a socket without a timeout:
    a client that stops reading would hold the thread for as long as it keeps the connection
    open. The worker sends what is kept here as the client takes it (``_answered``)."""

    def __init__(self, conn_sock: Any) -> None:
        self._sock = conn_sock
        self.data = bytearray()

    def sendall(self, data: bytes) -> None:
        self.data += data

    def send(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _sent(conn_sock: Any, data: bytes) -> bool:
    """Whether ``data`` went out whole without waiting (a few bytes on a socket whose client
    reads what it is sent)."""
    return _send_now(conn_sock, data) == len(data)


class _Application(BaseApplication):  # type: ignore[misc]
    def __init__(
        self, app: WSGIApp, tls: TLSSource, settings: ServerSettings, hooks: Hooks
    ) -> None:
        self.wsgi_app, self.tls, self.settings, self.hooks = app, tls, settings, hooks
        super().__init__()

    def load_config(self) -> None:
        for key, value in gunicorn_options(self.settings, self.tls, self.hooks).items():
            self.cfg.set(key, value)

    def load(self) -> WSGIApp:
        return closing_when_asked(stamped_with_arrival(self.wsgi_app))


def stamped_with_arrival(app: WSGIApp) -> WSGIApp:
    """``app``, told in the environ (``ARRIVED``) when ``WebhookWorker`` queued the request."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        if _serving.arrived is not None:
            environ[ARRIVED] = _serving.arrived
        return app(environ, start_response)

    return wrapped


def closing_when_asked(app: WSGIApp) -> WSGIApp:
    """``app``, closing the connection after a request whose environ asks for it.

    gunicorn drops a Connection header set by the app and keeps the connection alive; the
    response object behind ``start_response`` can be told to close it instead.
    """

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        body = app(environ, start_response)
        if environ.get(CLOSE_CONNECTION):
            response = getattr(start_response, "__self__", None)
            force_close = getattr(response, "force_close", None)
            if force_close is not None:
                force_close()
        return body

    return wrapped


def gunicorn_options(settings: ServerSettings, tls: TLSSource, hooks: Hooks) -> dict[str, Any]:
    """The gunicorn settings of the webhook server."""

    def ssl_context(config: Any, default_factory: Any) -> ssl.SSLContext:
        # Without ALPN h2 on our context, gthread never pins a thread to an HTTP/2 connection.
        return tls.context

    def post_worker_init(worker: Any) -> None:
        hooks.started()

    def worker_exit(server: Any, worker: Any) -> None:
        hooks.exited()

    def when_ready(server: Any) -> None:
        hooks.ready()

    def child_exit(server: Any, worker: Any) -> None:
        hooks.worker_gone(worker.pid)

    options: dict[str, Any] = {
        "bind": [
            f"[{settings.host}]:{settings.port}"
            if ":" in settings.host
            else f"{settings.host}:{settings.port}"
        ],
        "workers": settings.workers or available_cpus(),
        "worker_class": WebhookWorker,
        "threads": settings.threads,
        "worker_connections": settings.max_connections,
        "keepalive": settings.keepalive,
        "graceful_timeout": settings.graceful_timeout,
        "backlog": settings.backlog,
        # These switch gunicorn to TLS; the context itself comes from ``tls`` on each connection.
        "certfile": str(tls.cert_file),
        "keyfile": str(tls.key_file),
        "ssl_context": ssl_context,
        "post_worker_init": post_worker_init,
        "worker_exit": worker_exit,
        "when_ready": when_ready,
        "child_exit": child_exit,
        "accesslog": None,
        "logger_class": _Logger,
        "logconfig_dict": stdlib_config(settings.log_level),
        "loglevel": settings.log_level,
        "proc_name": "preemptguard",
        "preload_app": True,
        # gunicorn's runtime control socket would write into $HOME; nothing here uses it.
        "control_socket_disable": True,
    }
    if os.path.isdir("/dev/shm"):
        # gunicorn's heartbeat file; a read-only root filesystem may have no writable /tmp.
        options["worker_tmp_dir"] = "/dev/shm"
    return options


class _Logger(glogging.Logger):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn's logger without access logs: the app writes one line per admission, and
    gunicorn would build its access-log fields for every request (a logging configuration
    turns them on) only for a logger that drops them."""

    def _compute_access_log_enabled(self) -> bool:
        return False

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        return None


def run(app: WSGIApp, tls: TLSSource, settings: ServerSettings, hooks: Hooks) -> None:
    """Serve ``app`` over TLS until SIGTERM or SIGINT; returns after a graceful stop."""
    try:
        _Application(app, tls, settings, hooks).run()
    except SystemExit as done:
        if done.code not in (0, None):
            raise
