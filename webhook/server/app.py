"""The admission HTTP app: ``/mutate``, ``/validate``, ``/healthz`` and ``/readyz``.

The policy, the namespace annotations and the engine are passed in, so the same app serves
production (reloaded policy, watched namespaces) and tests (fakes).

The two hooks are answered straight from the WSGI environ (``HookRoutes``), ahead of Flask:
every pod create calls them, and Flask's request context, routing and response objects cost
about as much per call as judging the pod. Flask serves everything else (health, readiness,
unknown paths and methods).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import parse_qsl

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook import engine
from webhook.admission.core import Evaluator
from webhook.admission.hooks import Hook
from webhook.admission.namespaces import NamespaceLookup, no_namespaces
from webhook.admission.review import ECHO_CHARS
from webhook.engine.findings import shorten
from webhook.engine.scheduling import PriorityLookup
from webhook.server import offload
from webhook.server.gate import LargeReviewGate, WorkLedger
from webhook.server.handler import (
    TEXT,
    HookRequest,
    PolicySource,
    Reply,
    ReviewHandler,
    text_reply,
)
from webhook.server.logs import get_logger
from webhook.server.metrics import Metrics

# The API server caps a request body at 3 MiB, and a review carries at most two objects
# (object and oldObject, on UPDATE); 7 MiB leaves room for JSON escaping without letting a
# stray client make the server buffer an arbitrary amount.
MAX_BODY_BYTES = 7 * 1024 * 1024

# Set in a request's WSGI environ when its connection must close after the answer (the WSGI
# server in webhook.server.gunicorn honours it; an app cannot set Connection itself).
CLOSE_CONNECTION = "preemptguard.close_connection"
# Set in a request's WSGI environ by the WSGI server in webhook.server.gunicorn: when the
# request arrived (``time.monotonic()``), which may be well before a thread picks it up.
ARRIVED = "preemptguard.arrived"

ReadinessCheck = Callable[[], str | None]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

log = get_logger("webhook.server.app")

INTERNAL_ERROR = "internal error; see the preemptguard log"


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
) -> Flask:
    """The WSGI app; ``readiness`` returns why the server is not ready, or ``None``."""
    app = Flask("webhook")
    handler = ReviewHandler(
        policy,
        namespaces,
        priority_classes,
        evaluate,
        metrics or Metrics(),
        max_body_bytes,
        gate or LargeReviewGate(),
        offloaded or offload.Offload(),
        ledger or WorkLedger(),
    )
    app.add_url_rule("/healthz", "healthz", lambda: _text(200, "ok"))
    app.add_url_rule("/readyz", "readyz", lambda: _ready(policy, readiness))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    app.wsgi_app = HookRoutes(handler, app.wsgi_app)  # type: ignore[method-assign]
    return app


class HookRoutes:
    """``POST /mutate`` and ``POST /validate`` answered by ``handler``; other calls go on to
    ``fallback``."""

    ROUTES: ClassVar[dict[str, Hook]] = {"/mutate": Hook.MUTATE, "/validate": Hook.VALIDATE}

    def __init__(self, handler: ReviewHandler, fallback: WSGIApp) -> None:
        self.handler, self.fallback = handler, fallback

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        hook = self.ROUTES.get(path)
        if hook is None:
            return self.fallback(environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST":
            reply = text_reply(405, "405 Method Not Allowed")
            return _send(reply, start_response, [("Allow", "POST")])
        try:
            reply = self.handler.handle(hook, hook_request(environ))
        except Exception:  # a review never ends in a traceback sent back
            log.exception("request_failed", path=shorten(path, ECHO_CHARS))
            reply = text_reply(500, INTERNAL_ERROR)
        if reply.close:
            environ[CLOSE_CONNECTION] = True
        return _send(reply, start_response)


def hook_request(environ: dict[str, Any]) -> HookRequest:
    """The parts of a WSGI request a review call uses (as werkzeug would read them)."""
    query = environ.get("QUERY_STRING", "")
    timeout = _timeout_parameter(query) if query else None
    length = _content_length(environ)
    # PEP 3333: a body with neither a length nor an end the server marks is not read.
    unbounded = length is None and not environ.get("wsgi.input_terminated")
    arrived = environ.get(ARRIVED)
    return HookRequest(
        path=environ.get("PATH_INFO", ""),
        timeout=timeout,
        mimetype=environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower(),
        content_length=length,
        body=io.BytesIO() if unbounded else environ["wsgi.input"],
        arrived=arrived if isinstance(arrived, float) else None,
        encoding=environ.get("HTTP_CONTENT_ENCODING", "").strip().lower(),
    )


# What the API server sends, and all it sends: read without the general query parser, which
# costs more than the rest of reading the request.
_PLAIN_TIMEOUT = re.compile(r"timeout=([0-9]{1,6}s)")


def _timeout_parameter(query: str) -> str | None:
    plain = _PLAIN_TIMEOUT.fullmatch(query)
    if plain is not None:
        return plain.group(1)
    return dict(parse_qsl(query)).get("timeout")


def _content_length(environ: dict[str, Any]) -> int | None:
    raw = environ.get("CONTENT_LENGTH")
    if not raw or environ.get("HTTP_TRANSFER_ENCODING", "") == "chunked":
        return None
    # A length that is not a number reads no body, as werkzeug does.
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def _send(
    reply: Reply, start_response: StartResponse, extra: list[tuple[str, str]] | None = None
) -> list[bytes]:
    status = f"{reply.status} {HTTPStatus(reply.status).phrase}"
    headers = [("Content-Type", reply.content_type), ("Content-Length", str(len(reply.body)))]
    start_response(status, headers + (extra or []))
    return [reply.body]


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
