"""The production server: granian running the ASGI transport over TLS.

granian's I/O is Rust (tokio, hyper, rustls) on threads of its own: TLS handshakes, reading
requests and writing answers never hold the interpreter, so no number of handshakes queues
ahead of a review on a kept-alive connection, and rustls offers no finite-field key exchange
(a ClientHello naming ``ffdhe8192`` is refused in microseconds, where OpenSSL spends 120 ms of
CPU on it). Each worker process runs the app on one asyncio event loop.

HTTP/1.1 only, as the API server speaks to webhooks: with HTTP/2 offered, the server reads a
connection's first bytes to tell the two apart without any deadline, and a handshaken
connection that sends nothing would be kept for good. With HTTP/1.1, a connection's request
headers must arrive within ``idle_timeout`` of its opening or of its last answer, or it is
closed; a handshake not done within 10 s is dropped (rustls' listener); a body not in by the
review's deadline is answered 408 by the transport.

Each worker listens on a socket of its own (``SO_REUSEPORT``). When a worker stops (a new
certificate respawns them all, new before old), the connections the kernel queued on its socket
are reset, unless ``net.ipv4.tcp_migrate_req`` is 1, which moves them to another worker's
socket: the server warns at start when it is not.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from granian import Granian
from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.http import HTTP1Settings
from granian.log import LogLevels

from webhook.server.gate import MEDIUM_BODY_BYTES
from webhook.server.logs import get_logger, stdlib_config
from webhook.server.transport import ASGIApp

log = get_logger("webhook.server.serving")

MIGRATE_REQ = Path("/proc/sys/net/ipv4/tcp_migrate_req")


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    host: str = "0.0.0.0"
    port: int = 8443
    # Worker processes; 0: one per CPU this process may use (see available_cpus).
    workers: int = 0
    # Threads per worker for reviews not checked on its event loop: those over
    # ``inline_review_bytes``, and those needing a read of the cluster.
    threads: int = 16
    # Reviews up to this size are checked on the worker's event loop (see
    # ``webhook.server.reviewer``); 0 sends every one to a thread.
    inline_review_bytes: int = MEDIUM_BODY_BYTES
    graceful_timeout: int = 30
    backlog: int = 2048
    log_level: str = "info"
    # Connections one worker keeps open at once; past this, new ones wait to be accepted until
    # one closes. Idle ones are closed after ``idle_timeout``: a client holding this many
    # would have to open them again and again, a TLS handshake each.
    max_connections: int = 8192
    # Seconds a connection may wait before its request's headers are all in: from its opening,
    # and from its last answer when kept alive. The API server sends a review as soon as it
    # has dialled, and keeps idle connections up to 90 s: those it has not used for this long
    # are closed here first, and it dials again.
    idle_timeout: float = 30.0


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


@dataclass(frozen=True)
class MainCallbacks:
    """Called in the main process: once the workers are started, and once they have all
    stopped."""

    ready: Callable[[], None] = lambda: None
    stopped: Callable[[], None] = lambda: None


class PortInUse(OSError):
    pass


def run(
    app_loader: Callable[[], ASGIApp],
    cert_file: Path,
    key_file: Path,
    settings: ServerSettings,
    callbacks: MainCallbacks,
) -> None:
    """Serve the app ``app_loader`` builds in each worker until SIGTERM or SIGINT; returns
    after a graceful stop. ``app_loader`` is called in the worker process, and must pickle
    (a worker may be spawned rather than forked). Raises ``PortInUse``."""
    _check_port_free(settings.host, settings.port)
    reset = respawn_resets_connections(MIGRATE_REQ)
    if reset is not None:
        log.warning(
            "respawn_resets_queued_connections",
            sysctl=f"net.ipv4.tcp_migrate_req={reset}",
            effect="when a new certificate respawns the workers, connections queued on a "
            "stopping worker are reset (those reviews fail open)",
            fix="set net.ipv4.tcp_migrate_req=1 in the pod's network namespace "
            "(docs/operations.md#certificates)",
        )
    server = Granian(
        "preemptguard",  # a name only: the loader below makes the app
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        http=HTTPModes.http1,
        websockets=False,
        workers=settings.workers or available_cpus(),
        runtime_threads=1,
        backlog=max(128, settings.backlog),
        backpressure=settings.max_connections,
        http1_settings=HTTP1Settings(
            header_read_timeout=max(1, round(settings.idle_timeout * 1000)), keep_alive=True
        ),
        log_level=LogLevels(settings.log_level),
        log_dictconfig=stdlib_config(settings.log_level),
        ssl_cert=cert_file,
        ssl_key=key_file,
        ssl_protocol_min=SSLProtocols.tls12,
        respawn_failed_workers=True,
        workers_kill_timeout=max(1, settings.graceful_timeout),
    )
    server.on_startup(callbacks.ready)
    server.on_shutdown(callbacks.stopped)
    server.serve(target_loader=partial(_load, app_loader))


def respawn_resets_connections(sysctl: Path) -> str | None:
    """The value of ``sysctl`` (``net.ipv4.tcp_migrate_req``) when it leaves the connections
    queued on a stopping worker to be reset; ``None`` when they move to another worker, or
    the kernel (before 5.14, or not Linux) has no such setting."""
    try:
        value = sysctl.read_text().strip()
    except OSError:
        return None
    return None if value == "1" else value


def _load(app_loader: Callable[[], ASGIApp], _target: str) -> Any:
    return app_loader()


def _check_port_free(host: str, port: int) -> None:
    """Every worker listens with SO_REUSEPORT, which would share the port with another server
    started the same way instead of failing: a plain bind says whether it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Connections of an earlier server still closing (TIME_WAIT) do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} on {host} is in use") from None
            raise
        with contextlib.suppress(OSError):
            probe.listen(1)
