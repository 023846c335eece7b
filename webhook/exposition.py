"""Prometheus metrics in a registry of their own, rendered and served on plain HTTP.

The admission server (``webhook.server.metrics``) and the reclaim observer
(``webhook.cluster.metrics``) expose their metrics the same way but may not import each other
(ARCHITECTURE.md), so the way is here, beside both layers.
"""

from __future__ import annotations

import socket
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app

# A scrape is one short request: a connection that has not sent it by then is closed, and
# past this many at once new ones are closed unread, so that idle or slow clients cannot
# hold a thread each without end (the endpoint has no authentication).
READ_TIMEOUT_SECONDS = 5.0
MAX_CONNECTIONS = 32


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``MAX_CONNECTIONS`` at once, each read with a
    timeout."""

    daemon_threads = True

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        request.settimeout(READ_TIMEOUT_SECONDS)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stalled past the timeout or went away is no fault of the server's.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class MetricsEndpoint:
    """A running ``/metrics`` endpoint."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server, self._thread = server, thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_registry(registry: CollectorRegistry, host: str, port: int) -> MetricsEndpoint:
    """Serve ``/metrics`` of ``registry`` over plain HTTP in a background thread."""
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (_BoundedServer,), {"address_family": family})
    server: WSGIServer = make_server(
        host, port, make_wsgi_app(registry), server_class, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return MetricsEndpoint(server, thread)


class RegistryMetrics:
    """Metrics kept in ``registry``, which is theirs alone."""

    registry: CollectorRegistry

    def render(self) -> bytes:
        """The exposition text, as a scrape sees it."""
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> MetricsEndpoint:
        """Serve ``/metrics`` over plain HTTP on ``host:port`` in a background thread."""
        return serve_registry(self.registry, host, port)
