"""Prometheus metrics in a registry of their own, rendered and served on plain HTTP.

The admission server (``webhook.server.metrics``) and the reclaim observer
(``webhook.cluster.metrics``) expose their metrics the same way but may not import each other
(ARCHITECTURE.md), so the way is here, beside both layers.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server


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
    server, thread = start_http_server(port, addr=host, registry=registry)
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
