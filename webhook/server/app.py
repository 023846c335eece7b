"""The admission app put together: the hooks' reviewer behind the ASGI transport, and the Flask
app for everything else (``/healthz``, ``/readyz``, unknown paths and methods, errors).

The policy, the namespace annotations and the engine are passed in, so the same app serves
production (reloaded policy, watched namespaces) and tests (fakes).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, cast

from a2wsgi import WSGIMiddleware
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook import engine
from webhook.admission.core import Evaluator
from webhook.admission.lookups import no_namespaces
from webhook.admission.review import ECHO_CHARS
from webhook.engine.decision import NamespaceLookup
from webhook.engine.findings import shorten
from webhook.engine.scheduling import PriorityLookup
from webhook.server import offload
from webhook.server.gate import MEDIUM_BODY_BYTES, LargeReviewGate, WorkLedger
from webhook.server.logs import get_logger
from webhook.server.metrics import Metrics
from webhook.server.reviewer import (
    INTERNAL_ERROR,
    MAX_BODY_BYTES,
    TEXT,
    Lookups,
    PolicySource,
    Reviewer,
)
from webhook.server.transport import ASGIApp, Lifespan, LoopLag, Transport

ReadinessCheck = Callable[[], str | None]

log = get_logger("webhook.server.app")

# Threads of the Flask app: health and readiness probes, a few at a time.
FLASK_THREADS = 4


def always_ready() -> str | None:
    return None


def create_app(
    policy: PolicySource,
    namespaces: NamespaceLookup = no_namespaces,
    *,
    priority_classes: PriorityLookup | None = None,
    evaluate: Evaluator = engine.evaluate,
    metrics: Metrics | None = None,
    readiness: ReadinessCheck = always_ready,
    max_body_bytes: int = MAX_BODY_BYTES,
    gate: LargeReviewGate | None = None,
    offloaded: offload.Offload | None = None,
    ledger: WorkLedger | None = None,
    threads: Executor | None = None,
    cached: Lookups | None = None,
    inline_bytes: int = MEDIUM_BODY_BYTES,
    lifespan: Lifespan | None = None,
    lag: LoopLag | None = None,
) -> Transport:
    """The ASGI app; ``readiness`` returns why the server is not ready, or ``None``."""
    reviewer = Reviewer(
        policy,
        namespaces,
        priority_classes,
        evaluate,
        metrics or Metrics(),
        max_body_bytes=max_body_bytes,
        gate=gate,
        offloaded=offloaded,
        ledger=ledger,
        threads=threads,
        cached=cached,
        inline_bytes=inline_bytes,
    )
    return Transport(reviewer, health_asgi(policy, readiness), lifespan, lag)


def health_asgi(policy: PolicySource, readiness: ReadinessCheck = always_ready) -> ASGIApp:
    """The Flask app (``health_app``) as the transport calls it, on a few threads of its own."""
    flask: Any = health_app(policy, readiness)
    return cast(ASGIApp, WSGIMiddleware(flask, workers=FLASK_THREADS))


def health_app(policy: PolicySource, readiness: ReadinessCheck = always_ready) -> Flask:
    """The Flask app: health, readiness, and the answers to every other path."""
    app = Flask("webhook")
    app.add_url_rule("/healthz", "healthz", lambda: _text(200, "ok"))
    app.add_url_rule("/readyz", "readyz", lambda: _ready(policy, readiness))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    return app


def _ready(policy: PolicySource, readiness: ReadinessCheck) -> Response:
    if policy() is None:
        return _text(503, "not ready: no policy loaded")
    problem = readiness()
    if problem is not None:
        return _text(503, f"not ready: {problem}")
    return _text(200, "ok")


def _http_error(exc: HTTPException) -> Response:
    return _text(exc.code or 500, f"{exc.code} {exc.name}")


def _unexpected(exc: Exception) -> Response:
    log.exception("request_failed", path=shorten(request.path, ECHO_CHARS))
    return _text(500, INTERNAL_ERROR)


def _text(status: int, line: str) -> Response:
    return Response(f"{line}\n", status, content_type=TEXT)
