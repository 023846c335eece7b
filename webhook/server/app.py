"""The admission HTTP app: ``/mutate``, ``/validate``, ``/healthz`` and ``/readyz``.

The policy, the namespace annotations and the engine are passed in, so the same app serves
production (reloaded policy, watched namespaces) and tests (fakes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flask import Flask, Response, request
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import ClientDisconnected, HTTPException

from webhook import engine
from webhook.admission import priorities, review
from webhook.admission.core import Evaluator
from webhook.admission.hooks import Admission, Hook, Outcome, answer, internal_error, unavailable
from webhook.admission.namespaces import NamespaceLookup, no_namespaces
from webhook.admission.review import ECHO_CHARS, Request, loads, parse_review
from webhook.engine.findings import shorten
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.errors import BadReview, ClusterStateUnknown, OffloadFailed
from webhook.loading import jsondoc
from webhook.server import offload
from webhook.server.gate import LARGE_BODY_BYTES, Deadline, LargeReviewGate, timeout_seconds
from webhook.server.logs import get_logger
from webhook.server.metrics import Metrics

# The API server caps a request body at 3 MiB, and a review carries at most two objects
# (object and oldObject, on UPDATE); 7 MiB leaves room for JSON escaping without letting a
# stray client make the server buffer an arbitrary amount.
MAX_BODY_BYTES = 7 * 1024 * 1024

# Set in a request's WSGI environ when its connection must close after the answer (the WSGI
# server in webhook.server.gunicorn honours it; an app cannot set Connection itself).
CLOSE_CONNECTION = "preemptguard.close_connection"

PolicySource = Callable[[], Policy | None]
ReadinessCheck = Callable[[], str | None]

log = get_logger("webhook.server.app")


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
) -> Flask:
    """The WSGI app; ``readiness`` returns why the server is not ready, or ``None``."""
    app = Flask("webhook")
    handler = _Handler(
        policy,
        namespaces,
        priority_classes or priorities.offline(),
        evaluate,
        metrics or Metrics(),
        max_body_bytes,
        gate or LargeReviewGate(),
        offloaded or offload.Offload(),
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
        namespaces: NamespaceLookup,
        priority_classes: PriorityLookup,
        evaluate: Evaluator,
        metrics: Metrics,
        max_body_bytes: int,
        gate: LargeReviewGate,
        offloaded: offload.Offload,
    ) -> None:
        self.policy, self.namespaces = policy, namespaces
        self.priority_classes = priority_classes
        self.evaluate, self.metrics, self.max_body_bytes = evaluate, metrics, max_body_bytes
        self.gate, self.offload = gate, offloaded

    def handle(self, hook: Hook) -> Response:
        started = time.perf_counter()
        deadline = Deadline.after(timeout_seconds(request.args.get("timeout")), time.monotonic())
        try:
            body = self._body()
        except BadReview as exc:
            return self._bad_request(hook, exc)
        if len(body) <= LARGE_BODY_BYTES:
            return self._review(hook, body, started)
        if not self.gate.enter(len(body), deadline):
            return self._busy(hook, body, started)
        try:
            return self._large_review(hook, body, started, deadline)
        finally:
            self.gate.leave()

    def _large_review(
        self, hook: Hook, body: bytes, started: float, deadline: Deadline
    ) -> Response:
        """A review answered by the offload process (see ``offload``)."""
        policy = self.policy()
        if policy is None:
            return self._review(hook, body, started)
        env = review.envelope(body)
        namespace = env.namespace if env is not None else None
        if namespace in policy.excluded_namespaces:
            namespace = None  # the engine skips it without asking
        try:
            outcome = self.offload.run(
                hook,
                body,
                policy,
                self.namespaces,
                self.priority_classes,
                timeout=deadline.remaining(),
                namespace=namespace,
            )
        except OffloadFailed as exc:
            log.warning("large_review_failed", hook=hook.value, error=str(exc))
            return self._busy(hook, body, started)
        except ClusterStateUnknown as exc:
            seconds = time.perf_counter() - started
            self._count(hook, Outcome.ERROR, None, seconds)
            uid = env.uid if env is not None else "?"
            uid = shorten(uid, ECHO_CHARS)
            # A known failure: its reason, not a traceback.
            log.error("admission_failed", uid=uid, hook=hook.value, error=str(exc))  # noqa: TRY400
            return _text(500, f"cannot check the object of review {uid}: {exc}")
        seconds = time.perf_counter() - started
        if isinstance(outcome, offload.BadBody):
            return self._bad_request(hook, BadReview(outcome.reason))
        if isinstance(outcome, offload.Failed):
            return self._failed(hook, outcome.request, seconds, internal=outcome.error)
        if isinstance(outcome, offload.NeedsNamespace):  # looked up once already
            raise TypeError("the offload process asked twice for a namespace")
        self._record(hook, outcome.request, outcome.admission, seconds)
        return _json(outcome.admission.review)

    def _review(self, hook: Hook, body: bytes, started: float) -> Response:
        try:
            req = parse_review(loads(body))
        except BadReview as exc:
            return self._bad_request(hook, exc)
        try:
            admission = self._admit(hook, req)
        except ClusterStateUnknown as exc:
            return self._failed(hook, req, time.perf_counter() - started, str(exc))
        except Exception:  # noqa: BLE001 - logged with its traceback by _failed()
            return self._failed(hook, req, time.perf_counter() - started)
        seconds = time.perf_counter() - started
        self._record(hook, req, admission, seconds)
        return _json(admission.review)

    def _bad_request(self, hook: Hook, exc: BadReview) -> Response:
        self.metrics.bad_requests.labels(hook=hook.value).inc()
        log.warning(
            "bad_request", hook=hook.value, reason=str(exc), path=shorten(request.path, ECHO_CHARS)
        )
        # A body left unread (refused on its headers, or cut off) would be read as the next
        # request on a kept-alive connection; close it instead.
        request.environ[CLOSE_CONNECTION] = True
        return _text(400, str(exc))

    def _busy(self, hook: Hook, body: bytes, started: float) -> Response:
        """Refuse a large review that cannot be checked before the API server's deadline."""
        message = (
            f"preemptguard is checking other large objects and cannot check this one "
            f"({len(body) // 1024:,} KiB) before the webhook times out: retry; objects this "
            f"large are rare, and more than a few at once are refused"
        )
        seconds = time.perf_counter() - started
        self._count(hook, Outcome.BUSY, None, seconds)
        env = review.envelope(body)
        if env is None:
            # Not written by an API server: no review to answer with, and no reading it now.
            return _text(503, f"busy: {message}")
        log.warning(
            "admission",
            uid=shorten(env.uid, ECHO_CHARS),
            hook=hook.value,
            outcome=Outcome.BUSY.value,
            allowed=False,
            body_bytes=len(body),
            detail=message,
            duration_ms=round(seconds * 1000, 3),
        )
        return _json(review.refused_unread(env.api_version, env.uid, message, 429))

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
            raise BadReview(
                f"body could not be read: {shorten(_read_error(exc), ECHO_CHARS)}"
            ) from None
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
        return answer(
            hook,
            req,
            policy,
            self.namespaces,
            self.evaluate,
            priority_classes=self.priority_classes,
        )

    def _failed(
        self,
        hook: Hook,
        req: Request,
        seconds: float,
        known: str | None = None,
        *,
        internal: str | None = None,
    ) -> Response:
        """An HTTP 500, so that the API server applies the webhook's failurePolicy.

        ``known`` is a failure that is understood (the namespace cannot be read): logged
        without a traceback, and its reason is the answer. ``internal`` is an engine error
        raised in the offload process, logged as it came.
        """
        self._count(hook, Outcome.ERROR, None, seconds)
        fields = _request_fields(hook, req, seconds)
        if internal is not None:
            log.error("admission_failed", **fields, error=internal)
            return _text(500, internal_error(req))
        if known is None:
            log.exception("admission_failed", **fields)
            return _text(500, internal_error(req))
        log.error("admission_failed", **fields, error=known)
        what = f"{shorten(req.kind, ECHO_CHARS)} {shorten(req.name, ECHO_CHARS)}"
        return _text(500, f"cannot check {what}: {known}")

    def _record(self, hook: Hook, req: Request, admission: Admission, seconds: float) -> None:
        wclass = admission.workload_class
        self._count(hook, admission.outcome, wclass, seconds)
        response = admission.review["response"]
        log.info(
            "admission",
            **_request_fields(hook, req, seconds),
            user=shorten(req.user, ECHO_CHARS),
            dry_run=req.dry_run,
            workload_class=wclass,
            source=admission.source,
            outcome=admission.outcome.value,
            allowed=response["allowed"],
            patch_ops=admission.patch_ops,
            warnings=len(response.get("warnings", ())),
            detail=admission.detail or None,
        )

    def _count(self, hook: Hook, outcome: Outcome, wclass: str | None, seconds: float) -> None:
        self.metrics.count_admission(hook.value, outcome.value, wclass or "none", seconds)


def _request_fields(hook: Hook, req: Request, seconds: float) -> dict[str, object]:
    """What every log line about one review says, values from the request cut short."""
    return {
        "uid": shorten(req.uid, ECHO_CHARS),
        "hook": hook.value,
        "operation": req.operation,
        "kind": shorten(req.kind, ECHO_CHARS),
        "namespace": shorten(req.namespace, ECHO_CHARS) if req.namespace else None,
        "name": shorten(req.name, ECHO_CHARS),
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
    log.exception("request_failed", path=shorten(request.path, ECHO_CHARS))
    return _text(500, "internal error; see the preemptguard log")


def _json(doc: object) -> Response:
    return Response(jsondoc.dumps(doc), 200, mimetype="application/json")


def _text(status: int, line: str) -> Response:
    return Response(f"{line}\n", status, mimetype="text/plain")
