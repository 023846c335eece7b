"""One call of ``/mutate`` or ``/validate``: the HTTP request in, the HTTP answer out.

Framework-free on purpose: every pod create passes here, and a web framework's request and
response objects, context stacks and routing cost more per review than the policy does. The
WSGI side (``webhook.server.app``) turns the environ into a ``HookRequest`` and the ``Reply``
into a response; everything else a review needs is here.

Every review is answered before the API server gives up (see ``webhook.server.gate``): one up
to ``LARGE_BODY_BYTES`` is checked in the calling thread once the ``WorkLedger`` has room for
it before its deadline, a larger one in the offload process once the ``LargeReviewGate`` lets
it through; one that cannot be is refused at once as busy, unread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import ClientDisconnected

from webhook.admission import priorities, review
from webhook.admission.core import Evaluator
from webhook.admission.hooks import Admission, Hook, Outcome, answer, internal_error, unavailable
from webhook.admission.namespaces import NamespaceLookup
from webhook.admission.review import ECHO_CHARS, Request, loads, parse_review
from webhook.engine.findings import shorten
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.errors import BadReview, ClusterStateUnknown, OffloadFailed, UnreadableRequest
from webhook.loading import collector, jsondoc
from webhook.server import offload
from webhook.server.gate import (
    LARGE_BODY_BYTES,
    Deadline,
    LargeReviewGate,
    Refusal,
    WorkLedger,
    timeout_seconds,
)
from webhook.server.logs import get_logger
from webhook.server.metrics import Metrics

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"

PolicySource = Callable[[], Policy | None]

log = get_logger("webhook.server.app")


@dataclass(frozen=True, slots=True)
class HookRequest:
    """What a review call says over HTTP, read from the WSGI environ."""

    path: str
    # The API server's ``timeout`` query parameter, as sent (``3s``), if any.
    timeout: str | None
    # The media type alone, in lower case (``application/json``), or "".
    mimetype: str
    # None when the body is chunked or its length is not given.
    content_length: int | None
    body: BinaryIO
    # When the request arrived (``time.monotonic()``), as the WSGI server stamped it; None:
    # now. The review's deadline, and the time its log line and metrics report, run from it.
    arrived: float | None = None
    # The Content-Encoding header in lower case; "" when there is none.
    encoding: str = ""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str
    # Close the connection after answering: the body was left unread, or cut off, and would
    # be read as the next request on a kept-alive connection.
    close: bool = False


def text_reply(status: int, line: str, *, close: bool = False) -> Reply:
    return Reply(status, f"{line}\n".encode(), TEXT, close)


def json_reply(doc: object) -> Reply:
    return Reply(200, jsondoc.dumps(doc), JSON)


class ReviewHandler:
    """Answers review calls with the policy, namespace defaults and priority classes given."""

    def __init__(
        self,
        policy: PolicySource,
        namespaces: NamespaceLookup,
        priority_classes: PriorityLookup | None,
        evaluate: Evaluator,
        metrics: Metrics,
        max_body_bytes: int,
        gate: LargeReviewGate,
        offloaded: offload.Offload,
        ledger: WorkLedger,
    ) -> None:
        self.policy, self.namespaces = policy, namespaces
        self.priority_classes = priority_classes or priorities.offline()
        self.evaluate, self.metrics, self.max_body_bytes = evaluate, metrics, max_body_bytes
        self.gate, self.offload, self.ledger = gate, offloaded, ledger

    def handle(self, hook: Hook, http: HookRequest) -> Reply:
        # Monotonic, as the arrival stamp: durations run from the request's arrival.
        started = time.monotonic() if http.arrived is None else http.arrived
        deadline = Deadline.after(timeout_seconds(http.timeout), started)
        try:
            body = self._body(http)
        except BadReview as exc:
            return self._bad_request(hook, http, exc, body_read=False)
        # The lists and mappings it opens cost more than its size says (see gate).
        containers = jsondoc.containers(body)
        in_thread = len(body) <= LARGE_BODY_BYTES
        never_fits = (self.ledger if in_thread else self.gate).never_fits
        if never_fits(len(body), containers, deadline.at - started):
            return self._busy(hook, body, started, _NEVER_IN_TIME, code=413)
        if in_thread:
            return self._in_thread(hook, http, body, started, deadline, containers)
        if not self.gate.enter(len(body), deadline, containers):
            return self._busy(hook, body, started, _LARGE_AT_ONCE)
        try:
            return self._large_review(hook, http, body, started, deadline)
        finally:
            self.gate.leave()

    def _in_thread(
        self,
        hook: Hook,
        http: HookRequest,
        body: bytes,
        started: float,
        deadline: Deadline,
        containers: int,
    ) -> Reply:
        """A review checked in this thread, if the ledger has room for it in time."""
        work = self.ledger.enter(len(body), deadline, containers)
        if isinstance(work, Refusal):
            return self._busy(hook, body, started, _REFUSALS[work])
        try:
            if not work.medium:
                return self._review(hook, http, body, started)
            # A review this large makes enough containers that the collections they set off
            # cost more than reading it, the more so the more such reviews are alive at once
            # (five times as long, 16 at once). They hold no cycles: freed when it is answered.
            with collector.paused():
                return self._review(hook, http, body, started)
        finally:
            self.ledger.leave(work)

    def _large_review(
        self, hook: Hook, http: HookRequest, body: bytes, started: float, deadline: Deadline
    ) -> Reply:
        """A review answered by the offload process (see ``offload``)."""
        policy = self.policy()
        if policy is None:
            return self._review(hook, http, body, started)
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
            return self._busy(hook, body, started, _LARGE_AT_ONCE)
        except ClusterStateUnknown as exc:
            seconds = time.monotonic() - started
            self._count(hook, Outcome.ERROR, None, seconds)
            uid = env.uid if env is not None else "?"
            uid = shorten(uid, ECHO_CHARS)
            # A known failure: its reason, not a traceback.
            log.error("admission_failed", uid=uid, hook=hook.value, error=str(exc))  # noqa: TRY400
            return text_reply(500, f"cannot check the object of review {uid}: {exc}")
        seconds = time.monotonic() - started
        if isinstance(outcome, offload.BadBody):
            return self._bad_request(hook, http, outcome.error, body_read=True)
        if isinstance(outcome, offload.Failed):
            return self._failed(hook, outcome.request, seconds, internal=outcome.error)
        if isinstance(outcome, offload.NeedsNamespace):  # looked up once already
            raise TypeError("the offload process asked twice for a namespace")
        self._record(hook, outcome.request, outcome.admission, seconds)
        return json_reply(outcome.admission.review)

    def _review(self, hook: Hook, http: HookRequest, body: bytes, started: float) -> Reply:
        try:
            req = parse_review(loads(body))
        except BadReview as exc:
            return self._bad_request(hook, http, exc, body_read=True)
        try:
            admission = self._admit(hook, req)
        except ClusterStateUnknown as exc:
            return self._failed(hook, req, time.monotonic() - started, str(exc))
        except Exception:  # noqa: BLE001 - logged with its traceback by _failed()
            return self._failed(hook, req, time.monotonic() - started)
        seconds = time.monotonic() - started
        self._record(hook, req, admission, seconds)
        return json_reply(admission.review)

    def _bad_request(
        self, hook: Hook, http: HookRequest, exc: BadReview, *, body_read: bool
    ) -> Reply:
        """HTTP 400 for a body that is not an AdmissionReview; a review whose uid can be
        echoed is refused instead (HTTP 200), as an HTTP error would be no answer at all.
        The connection is closed only when the body was not read to its end: the next
        request on it would start in the middle of this one."""
        self.metrics.bad_requests.labels(hook=hook.value).inc()
        path = shorten(http.path, ECHO_CHARS)
        if isinstance(exc, UnreadableRequest):
            uid = shorten(exc.uid, ECHO_CHARS)
            log.warning("bad_request", hook=hook.value, reason=str(exc), path=path, uid=uid)
            return json_reply(review.unreadable(exc))
        log.warning("bad_request", hook=hook.value, reason=str(exc), path=path)
        return text_reply(400, str(exc), close=not body_read)

    def _busy(self, hook: Hook, body: bytes, started: float, why: str, code: int = 429) -> Reply:
        """Refuse, unread, a review that cannot be checked before the API server's deadline;
        ``why`` takes the size of the object in KiB. ``code``: 429, retry; 413, it will
        never fit."""
        message = why.format(kib=f"{len(body) // 1024:,}")
        seconds = time.monotonic() - started
        self._count(hook, Outcome.BUSY, None, seconds)
        env = review.envelope(body)
        if env is None:
            # Not written by an API server: no review to answer with, and no reading it now.
            return text_reply(503, f"busy: {message}")
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
        return json_reply(review.refused_unread(env.api_version, env.uid, message, code))

    def _body(self, http: HookRequest) -> bytes:
        if http.mimetype != JSON:
            raise BadReview(f"content type must be {JSON}, not {http.mimetype or 'none'!r}")
        if http.encoding not in ("", "identity"):
            raise BadReview(
                f"Content-Encoding {shorten(http.encoding, ECHO_CHARS)!r} is not read here: "
                "send the review uncompressed, as the API server does"
            )
        length = http.content_length
        if length is not None and length > self.max_body_bytes:
            raise BadReview(f"body of {length} bytes is over the {self._limit()} limit")
        wanted = self.max_body_bytes + 1 if length is None else length
        try:
            body = http.body.read(wanted)
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
    ) -> Reply:
        """An HTTP 500, so that the API server applies the webhook's failurePolicy.

        ``known`` is a failure that is understood (the namespace cannot be read): logged
        without a traceback, and its reason is the answer. ``internal`` is an engine error
        raised in the offload process, logged as it came.
        """
        self._count(hook, Outcome.ERROR, None, seconds)
        fields = _request_fields(hook, req, seconds)
        if internal is not None:
            log.error("admission_failed", **fields, error=internal)
            return text_reply(500, internal_error(req))
        if known is None:
            log.exception("admission_failed", **fields)
            return text_reply(500, internal_error(req))
        log.error("admission_failed", **fields, error=known)
        what = f"{shorten(req.kind, ECHO_CHARS)} {shorten(req.name, ECHO_CHARS)}"
        return text_reply(500, f"cannot check {what}: {known}")

    def _record(self, hook: Hook, req: Request, admission: Admission, seconds: float) -> None:
        wclass = admission.workload_class
        self._count(hook, admission.outcome, wclass, seconds)
        response = admission.review["response"]
        fields = _request_fields(hook, req, seconds)
        fields["user"] = shorten(req.user, ECHO_CHARS)
        fields["dry_run"] = req.dry_run
        fields["workload_class"] = wclass
        fields["source"] = admission.source
        fields["outcome"] = admission.outcome.value
        fields["allowed"] = response["allowed"]
        fields["patch_ops"] = admission.patch_ops
        fields["warnings"] = len(response.get("warnings", ()))
        fields["detail"] = admission.detail or None
        log.info_line("admission", fields)

    def _count(self, hook: Hook, outcome: Outcome, wclass: str | None, seconds: float) -> None:
        self.metrics.count_admission(hook.value, outcome.value, wclass or "none", seconds)


# Why a review was refused as busy; ``{kib}`` is the size of the object.
_NEVER_IN_TIME = (
    "this object ({kib} KiB) is too large to check before the webhook times out, even with "
    "nothing else to check: retrying will not help; make it smaller (most often its "
    "managedFields or a free-form field), or raise the webhook's timeoutSeconds"
)
_LARGE_AT_ONCE = (
    "preemptguard is checking other large objects and cannot check this one ({kib} KiB) "
    "before the webhook times out: retry; objects this large are rare, and more than a few "
    "at once are refused"
)
_REFUSALS = {
    Refusal.LATE: (
        "preemptguard is overloaded: this review ({kib} KiB) waited behind others until too "
        "little time was left to check it before the webhook times out: retry"
    ),
    Refusal.BUSY: (
        "preemptguard is checking other objects and cannot also check this one ({kib} KiB) "
        "before the webhook times out: retry"
    ),
    Refusal.MEDIUM: _LARGE_AT_ONCE,
}


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
