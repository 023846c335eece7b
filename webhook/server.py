"""The admission HTTP app: ``/mutate``, ``/validate``, ``/healthz`` and ``/readyz``.

The policy, the namespace annotations and the engine are passed in, so the same app serves
production (reloaded policy, watched namespaces) and tests (fakes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping

from flask import Flask, Response, request
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import ClientDisconnected, HTTPException

from webhook import engine
from webhook.admit import (
    Admission,
    Evaluator,
    Hook,
    Outcome,
    admit,
    internal_error,
    unavailable,
)
from webhook.logs import get_logger
from webhook.metrics import Metrics
from webhook.policy import Policy
from webhook.review import BadReview, Request, clip, loads, parse_review

# The API server caps a request body at 3 MiB, and a review carries at most two objects
# (object and oldObject, on UPDATE); 7 MiB leaves room for JSON escaping without letting a
# stray client make the server buffer an arbitrary amount.
MAX_BODY_BYTES = 7 * 1024 * 1024

PolicySource = Callable[[], Policy | None]
AnnotationLookup = Callable[[str | None], Mapping[str, str]]
ReadinessCheck = Callable[[], str | None]

log = get_logger("webhook.server")


def no_annotations(namespace: str | None) -> Mapping[str, str]:
    """The namespace lookup when no cluster is configured."""
    return {}


def always_ready() -> str | None:
    return None


def create_app(
    policy: PolicySource,
    namespace_annotations: AnnotationLookup = no_annotations,
    *,
    evaluate: Evaluator = engine.evaluate,
    metrics: Metrics | None = None,
    readiness: ReadinessCheck = always_ready,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Flask:
    """The WSGI app; ``readiness`` returns why the server is not ready, or ``None``."""
    app = Flask("webhook")
    handler = _Handler(
        policy, namespace_annotations, evaluate, metrics or Metrics(), max_body_bytes
    )
    app.add_url_rule("/mutate", "mutate", lambda: handler.handle(Hook.MUTATE), methods=["POST"])
    app.add_url_rule(
        "/validate", "validate", lambda: handler.handle(Hook.VALIDATE), methods=["POST"]
    )
    app.add_url_rule("/healthz", "healthz", lambda: _text(200, "ok"))
    app.add_url_rule("/readyz", "readyz", lambda: _ready(policy, readiness))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    return app


class _Handler:
    def __init__(
        self,
        policy: PolicySource,
        namespace_annotations: AnnotationLookup,
        evaluate: Evaluator,
        metrics: Metrics,
        max_body_bytes: int,
    ) -> None:
        self.policy, self.namespace_annotations = policy, namespace_annotations
        self.evaluate, self.metrics, self.max_body_bytes = evaluate, metrics, max_body_bytes

    def handle(self, hook: Hook) -> Response:
        started = time.perf_counter()
        try:
            req = parse_review(loads(self._body()))
        except BadReview as exc:
            self.metrics.bad_requests.labels(hook=hook.value).inc()
            log.warning("bad_request", hook=hook.value, reason=str(exc), path=clip(request.path))
            return _text(400, str(exc))
        try:
            admission = self._admit(hook, req)
        except Exception:  # noqa: BLE001 - logged with its traceback by _failed()
            return self._failed(hook, req, time.perf_counter() - started)
        seconds = time.perf_counter() - started
        self._record(hook, req, admission, seconds)
        body = json.dumps(admission.review, separators=(",", ":"))
        return Response(body, 200, mimetype="application/json")

    def _body(self) -> bytes:
        if request.mimetype != "application/json":
            raise BadReview(
                f"content type must be application/json, not {request.mimetype or 'none'!r}"
            )
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            raise BadReview(f"body of {length} bytes is over the {self._limit()} limit")
        try:
            body = request.stream.read(self.max_body_bytes + 1)
        except (ParseException, OSError, ClientDisconnected) as exc:
            # A malformed chunk, a client gone or stalled: a bad request, not a server fault.
            raise BadReview(f"body could not be read: {clip(_read_error(exc))}") from None
        if len(body) > self.max_body_bytes:
            raise BadReview(f"body is over the {self._limit()} limit")
        if length is not None and len(body) < length:
            raise BadReview(
                f"body ended after {len(body)} of the {length} bytes of its Content-Length"
            )
        return body

    def _limit(self) -> str:
        return f"{self.max_body_bytes / 2**20:g} MiB"

    def _admit(self, hook: Hook, req: Request) -> Admission:
        policy = self.policy()
        if policy is None:
            return unavailable(req, "preemptguard has no policy loaded yet; retry shortly")
        annotations = self.namespace_annotations(req.namespace)
        return admit(hook, req, policy, annotations, self.evaluate)

    def _failed(self, hook: Hook, req: Request, seconds: float) -> Response:
        """An HTTP 500, so that the API server applies the webhook's failurePolicy."""
        self._count(hook, Outcome.ERROR, None, seconds)
        log.exception("admission_failed", **_request_fields(hook, req, seconds))
        return _text(500, internal_error(req))

    def _record(self, hook: Hook, req: Request, admission: Admission, seconds: float) -> None:
        decision = admission.decision
        wclass = decision.workload_class if decision else None
        self._count(hook, admission.outcome, wclass, seconds)
        response = admission.review["response"]
        log.info(
            "admission",
            **_request_fields(hook, req, seconds),
            user=clip(req.user),
            dry_run=req.dry_run,
            workload_class=wclass,
            source=decision.classification.source if decision else None,
            outcome=admission.outcome.value,
            allowed=response["allowed"],
            patch_ops=admission.patch_ops,
            warnings=len(response.get("warnings", ())),
            detail=admission.detail or None,
        )

    def _count(self, hook: Hook, outcome: Outcome, wclass: str | None, seconds: float) -> None:
        self.metrics.admissions.labels(
            hook=hook.value, outcome=outcome.value, workload_class=wclass or "none"
        ).inc()
        self.metrics.admission_seconds.labels(hook=hook.value).observe(seconds)


def _request_fields(hook: Hook, req: Request, seconds: float) -> dict[str, object]:
    """What every log line about one review says, values from the request cut short."""
    return {
        "uid": clip(req.uid),
        "hook": hook.value,
        "operation": req.operation,
        "kind": clip(req.kind),
        "namespace": clip(req.namespace) if req.namespace else None,
        "name": clip(req.name),
        "duration_ms": round(seconds * 1000, 3),
    }


def _read_error(exc: Exception) -> str:
    if type(exc) is NoMoreData or isinstance(exc, ClientDisconnected):
        return "the client closed the connection before the end of the body"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


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
    log.exception("request_failed", path=clip(request.path))
    return _text(500, "internal error; see the preemptguard log")


def _text(status: int, line: str) -> Response:
    return Response(f"{line}\n", status, mimetype="text/plain")
