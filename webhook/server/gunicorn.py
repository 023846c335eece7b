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
client that sends part of a request and keeps the connection open holds that thread for good;
enough of them stop the server. ``WebhookWorker`` gives each request a read deadline instead.

The API server's clock for a review starts before any thread here reads it: a request may
wait in gthread's queue for a free thread. ``WebhookWorker`` stamps each connection when it
queues it for a thread, and the app gets that stamp (``ARRIVED`` in the environ), so that a
review's deadline runs from its arrival and one that waited too long is refused at once.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gunicorn import glogging, http, sock
from gunicorn.app.base import BaseApplication
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers import gthread

from webhook.server.app import ARRIVED, CLOSE_CONNECTION
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
# How long a thread waits for one request, headers and body together, once it has started
# reading it. The API server sends a review (3 MiB at most) at once; a client still sending
# after this is stalled or hostile, and would otherwise hold a pool thread for as long as it
# keeps the connection open. It is one deadline for the whole request, not one per read, so
# a client trickling a byte at a time cannot stretch it.
REQUEST_READ_TIMEOUT = 10.0


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

    def enqueue_req(self, conn: gthread.TConn) -> None:
        # gthread queues a connection for a thread when it accepts it (the API server dials one
        # for a review and sends it at once) and when a kept-alive or parked one becomes
        # readable: the request has arrived, and waits here for a thread from now on.
        conn.arrived = time.monotonic()
        super().enqueue_req(conn)

    def handle(self, conn: gthread.TConn) -> Any:
        if conn.initialized or not self.cfg.is_ssl:
            return self._serve(conn)
        if not conn.data_ready and not conn.wait_for_data(FIRST_DATA_WAIT):
            return gthread._DEFER
        if not self._handshake(conn):
            return False
        conn.data_ready = bool(conn.sock.pending())
        if conn.wait_for_data(FIRST_REQUEST_WAIT):
            return self._serve(conn)
        # finish_request() parks a deferred connection in the poller until it is readable.
        return gthread._DEFER

    def _serve(self, conn: gthread.TConn) -> Any:
        """Read and answer one request, starting its read deadline now, and telling the app
        when the request arrived (see ``stamped_with_arrival``).

        A thread takes a connection only once it is readable, so the read clock starts when
        the request does (a kept-alive connection waits in the poller, not here). The parser
        of a TLS connection is made in ``_handshake``; the server always serves TLS.
        """
        _serving.arrived = getattr(conn, "arrived", None)
        unreader = getattr(conn.parser, "unreader", None)
        if isinstance(unreader, DeadlineUnreader):
            unreader.deadline = time.monotonic() + REQUEST_READ_TIMEOUT
        try:
            return super().handle(conn)
        finally:
            _serving.arrived = None
            if isinstance(unreader, DeadlineUnreader) and unreader.expired:
                self._stalled.add(conn)

    def _handshake(self, conn: gthread.TConn) -> bool:
        conn.initialized = True
        conn.sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            conn.sock = sock.ssl_wrap_socket(conn.sock, self.cfg)
            conn.sock.do_handshake()
        except (OSError, ssl.SSLError) as exc:
            self.log.debug("TLS handshake with %s failed: %s", conn.client, exc)
            self._stalled.add(conn)
            return False
        conn.sock.settimeout(None)
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader = DeadlineUnreader(conn.sock)
        return True

    def finish_request(self, conn: gthread.TConn, fs: Any) -> None:
        if conn in self._stalled:
            # A graceful close lingers up to 2 s for the client to close too, here on the
            # thread that runs the poller; a stalled client never does. Close at once.
            self._stalled.discard(conn)
            self.nr_conns -= 1
            conn.close()
            return
        # One finished request closes at most one connection. gthread counts a close twice
        # when closing raises, and a count below the truth ends a graceful shutdown before
        # the reviews still in flight are answered.
        floor = self.nr_conns - 1
        super().finish_request(conn, fs)
        self.nr_conns = max(self.nr_conns, floor)

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
        self._close_silent()

    def _close_silent(self) -> None:
        """Close the parked connections that never began a handshake in HANDSHAKE_TIMEOUT.

        gthread keeps a parked connection for the keep-alive time, which a client that
        opens connections and sends nothing would fill with sockets for free; the API server
        sends its ClientHello as soon as it connects."""
        limit = time.monotonic() - HANDSHAKE_TIMEOUT
        silent = [
            c
            for c in self.pending_conns
            if not c.initialized and getattr(c, "arrived", limit) < limit
        ]
        for conn in silent:
            self._drop_idle(conn, self.pending_conns)

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
            *((c, pending) for c in pending if not c.initialized),
            *((c, pending) for c in pending if c.initialized),
            *((c, kept) for c in kept),
        ]
        for conn, held in idle:
            if self.nr_conns < self.worker_connections:
                break
            self._drop_idle(conn, held)
        return self.nr_conns < self.worker_connections

    def _drop_idle(self, conn: gthread.TConn, held: deque[gthread.TConn]) -> None:
        """Close an idle connection parked in the poller, taken out of ``held``."""
        held.remove(conn)
        with contextlib.suppress(OSError, KeyError, ValueError):
            self.poller.unregister(conn.sock)
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
