"""One call of ``/mutate`` or ``/validate`` answered before the API server gives up on it.

The transport (``webhook.server.transport``) reads the call's head and body and sends what this
module answers; everything between is here: which bodies are read at all, where each review
is checked (see ``webhook.server.gate``), the answer, its log line and its metrics.

Where a review is checked: one up to ``MEDIUM_BODY_BYTES`` (a real pod is a few KiB) on the
event loop itself, at once, once the ``WorkLedger`` has room for it before its deadline,
as long as what it looks up of the cluster is cached (else in a thread, where reading the
API server holds no other review); a larger one up to ``LARGE_BODY_BYTES`` in a thread of
the pool, under the ledger's share for such reviews; a larger one still in the offload
process, once the ``LargeReviewGate`` lets it through. One that cannot be checked in time is
refused at once as busy, unread. Checked on the loop, a review costs a fraction of what a
hand-over to a thread does.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from webhook.admission import lookups, review
from webhook.admission.core import (
    Admission,
    Evaluator,
    Hook,
    Outcome,
    answer,
    internal_error,
    unavailable,
)
from webhook.admission.review import ECHO_CHARS, Request, loads, parse_review
from webhook.engine.decision import NamespaceLookup
from webhook.engine.findings import shorten
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.errors import (
    BadReview,
    ClusterStateUnknown,
    NotCached,
    OffloadFailed,
    UnreadableRequest,
)
from webhook.loading import gcpause, jsondoc
from webhook.server import offload
from webhook.server.gate import (
    LARGE_BODY_BYTES,
    MEDIUM_BODY_BYTES,
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
# The API server caps a request body at 3 MiB, and a review carries at most two objects
# (object and oldObject, on UPDATE); 7 MiB leaves room for JSON escaping without letting a
# stray client make the server hold an arbitrary amount.
MAX_BODY_BYTES = 7 * 1024 * 1024

PolicySource = Callable[[], Policy | None]

INTERNAL_ERROR = "internal error; see the preemptguard log"

log = get_logger("webhook.server.reviewer")


@dataclass(frozen=True, slots=True)
class Head:
    """What a review call says before its body: read from the HTTP request by the transport."""

    hook: Hook
    path: str
    # The API server's ``timeout`` query parameter, as sent (``3s``), if any.
    timeout: str | None
    # The media type alone, in lower case (``application/json``), or "".
    mimetype: str
    # The Content-Encoding header in lower case; "" when there is none.
    encoding: str
    # The declared Content-Length; None when the body is chunked or its length not a number.
    length: int | None
    # When the call arrived (``time.monotonic()``): its deadline, log line and metrics run
    # from here.
    arrived: float


class Unread(enum.Enum):
    """Why a body was not read whole."""

    TOO_LARGE = "too-large"
    LATE = "late"  # not all in by its deadline
    GONE = "gone"  # the client closed the connection before its end
    BUSY = "busy"  # given up to make room for newer ones (the worker's intake budget)
    PIECES = "pieces"  # sent in too many pieces


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str
    # Close the connection after answering: the body was left unread and would be read as
    # the next request on a kept-alive connection.
    close: bool = False
    # The review answered, when there is one: a late answer is logged under it.
    uid: str | None = None


@dataclass(frozen=True, slots=True)
class Lookups:
    """What a review may look up of the cluster."""

    namespaces: NamespaceLookup
    priority_classes: PriorityLookup


def text_reply(status: int, line: str, *, close: bool = False) -> Reply:
    return Reply(status, f"{line}\n".encode(), TEXT, close)


def json_reply(doc: object, uid: str | None = None) -> Reply:
    return Reply(200, jsondoc.dumps(doc), JSON, uid=uid)


class Reviewer:
    """Answers review calls with the policy, namespace defaults and priority classes given."""

    def __init__(
        self,
        policy: PolicySource,
        namespaces: NamespaceLookup,
        priority_classes: PriorityLookup | None,
        evaluate: Evaluator,
        metrics: Metrics,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        gate: LargeReviewGate | None = None,
        offloaded: offload.Offload | None = None,
        ledger: WorkLedger | None = None,
        threads: Executor | None = None,
        cached: Lookups | None = None,
        inline_bytes: int = MEDIUM_BODY_BYTES,
    ) -> None:
        """``cached``: the lookups as a review on the event loop makes them, raising
        ``NotCached`` where the others would read the cluster (None: the others never do).
        ``inline_bytes``: reviews up to this size are checked on the event loop."""
        self.policy = policy
        self.lookups = Lookups(namespaces, priority_classes or lookups.offline_priority_classes())
        self.cached = cached or self.lookups
        self.inline_bytes = inline_bytes
        self.evaluate, self.metrics, self.max_body_bytes = evaluate, metrics, max_body_bytes
        self.gate = gate or LargeReviewGate()
        self.offload = offloaded or offload.Offload()
        self.ledger = ledger or WorkLedger()
        # None: the event loop's default executor.
        self.threads = threads

    # --- the transport's calls, in their order -------------------------------------------

    def refusal(self, head: Head) -> Reply | None:
        """An answer for a call whose head alone is refused; None: read its body."""
        if head.mimetype != JSON:
            return self._bad_head(
                head, f"content type must be {JSON}, not {head.mimetype or 'none'!r}"
            )
        if head.encoding not in ("", "identity"):
            return self._bad_head(
                head,
                f"Content-Encoding {shorten(head.encoding, ECHO_CHARS)!r} is not read here: "
                "send the review uncompressed, as the API server does",
            )
        return None

    def read_deadline(self, head: Head) -> float:
        """When the body must be all in (monotonic): the review's own deadline."""
        return Deadline.after(timeout_seconds(head.timeout), head.arrived).at

    def unread(self, head: Head, why: Unread) -> Reply:
        """The answer to a call whose body was not read whole."""
        if why is Unread.TOO_LARGE:
            declared = f"of {head.length} bytes " if head.length is not None else ""
            return self._bad_head(head, f"body {declared}is over the {self._limit()} limit")
        if why is Unread.LATE:
            self.metrics.count_dropped(head.hook.value, "body-late")
            log.warning("body_late", hook=head.hook.value, path=shorten(head.path, ECHO_CHARS))
            return text_reply(
                408, "the review did not arrive whole before its deadline", close=True
            )
        if why is Unread.BUSY:
            self.metrics.count_dropped(head.hook.value, "body-given-up")
            log.warning("body_given_up", hook=head.hook.value, path=shorten(head.path, ECHO_CHARS))
            return text_reply(
                503,
                "this server holds as many bytes of requests still coming in as it may; the "
                "one coming in longest is given up to make room: send a review whole, at once",
                close=True,
            )
        if why is Unread.PIECES:
            return self._bad_head(head, "the body came in too many pieces: send it whole, at once")
        return self._bad_head(head, _BODY_CUT)

    async def review(self, head: Head, body: bytes) -> Reply:
        """The answer to a review; never raises: a failure outside the engine (the engine's
        own are answered by ``_review``) is an HTTP 500, logged with its path."""
        try:
            return await self._answer(head, body)
        except Exception:  # a review never ends in a traceback sent back
            log.exception("request_failed", path=shorten(head.path, ECHO_CHARS))
            return text_reply(500, INTERNAL_ERROR)

    async def _answer(self, head: Head, body: bytes) -> Reply:
        deadline = Deadline.after(timeout_seconds(head.timeout), head.arrived)
        # The lists and mappings it opens cost more than its size says (see gate).
        containers = jsondoc.containers(body)
        in_process = len(body) <= LARGE_BODY_BYTES
        never_fits = (self.ledger if in_process else self.gate).never_fits
        if never_fits(len(body), containers, deadline.at - head.arrived):
            return self._busy(head, body, _NEVER_IN_TIME, code=413)
        if not in_process:
            return await self._off_loop(self._large_review, head, body, deadline, containers)
        if len(body) <= self.inline_bytes:
            try:
                return self._ledgered(head, body, deadline, containers, self.cached)
            except NotCached:
                pass  # checked again where the cluster may be read
        return await self._off_loop(self._ledgered, head, body, deadline, containers)

    def finished(self, head: Head, reply: Reply) -> None:
        """After the answer was sent: one sent after the call's timeout found the API server
        gone (it closes the connection when it gives up) and let the object through unchecked
        under ``failurePolicy: Ignore``, so each is logged and counted."""
        seconds = time.monotonic() - head.arrived
        timeout = timeout_seconds(head.timeout)
        if seconds <= timeout:
            return
        why = "late"
        self.metrics.count_dropped(head.hook.value, why)
        log.error(
            "review_dropped",
            hook=head.hook.value,
            uid=shorten(reply.uid, ECHO_CHARS) if reply.uid is not None else None,
            why=why,
            status=reply.status,
            duration_ms=round(seconds * 1000, 3),
            timeout_ms=round(timeout * 1000),
        )

    # --- where a review is checked --------------------------------------------------------

    async def _off_loop(
        self,
        work: Callable[[Head, bytes, Deadline, int], Reply],
        head: Head,
        body: bytes,
        deadline: Deadline,
        containers: int,
    ) -> Reply:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.threads, work, head, body, deadline, containers)

    def _ledgered(
        self,
        head: Head,
        body: bytes,
        deadline: Deadline,
        containers: int,
        lookups: Lookups | None = None,
    ) -> Reply:
        """A review checked in this thread, if the ledger has room for it in time."""
        work = self.ledger.enter(len(body), deadline, containers)
        if isinstance(work, Refusal):
            return self._busy(head, body, _REFUSALS[work])
        try:
            if not work.medium:
                return self._review(head, body, lookups or self.lookups)
            # A review this large makes enough containers that the collections they set off
            # cost more than reading it, the more so the more such reviews are alive at once
            # (five times as long, 16 at once). They hold no cycles: freed when it is answered.
            with gcpause.paused():
                return self._review(head, body, lookups or self.lookups)
        finally:
            self.ledger.leave(work)

    def _large_review(self, head: Head, body: bytes, deadline: Deadline, containers: int) -> Reply:
        """A review answered by the offload process (see ``offload``), once the gate lets it."""
        if not self.gate.enter(len(body), deadline, containers):
            return self._busy(head, body, _LARGE_AT_ONCE)
        try:
            return self._offloaded(head, body, deadline)
        finally:
            self.gate.leave()

    def _offloaded(self, head: Head, body: bytes, deadline: Deadline) -> Reply:
        policy = self.policy()
        if policy is None:
            return self._review(head, body, self.lookups)
        env = review.envelope(body)
        namespace = env.namespace if env is not None else None
        if namespace in policy.excluded_namespaces:
            namespace = None  # the engine skips it without asking
        try:
            outcome = self.offload.run(
                head.hook,
                body,
                policy,
                self.lookups.namespaces,
                self.lookups.priority_classes,
                timeout=deadline.remaining(),
                namespace=namespace,
            )
        except OffloadFailed as exc:
            log.warning("large_review_failed", hook=head.hook.value, error=str(exc))
            return self._busy(head, body, _LARGE_AT_ONCE)
        except ClusterStateUnknown as exc:
            self._count(head.hook, Outcome.ERROR, None, self._seconds(head))
            uid = shorten(env.uid if env is not None else "?", ECHO_CHARS)
            # A known failure: its reason, not a traceback.
            log.error("admission_failed", uid=uid, hook=head.hook.value, error=str(exc))  # noqa: TRY400
            return text_reply(500, f"cannot check the object of review {uid}: {exc}")
        if isinstance(outcome, offload.BadBody):
            return self._bad_request(head, outcome.error)
        if isinstance(outcome, offload.Failed):
            return self._failed(head, outcome.request, internal=outcome.error)
        if isinstance(outcome, offload.NeedsNamespace):  # looked up once already
            raise TypeError("the offload process asked twice for a namespace")
        self._record(head, outcome.request, outcome.admission)
        return json_reply(outcome.admission.review, outcome.request.uid)

    def _review(self, head: Head, body: bytes, lookups: Lookups) -> Reply:
        try:
            req = parse_review(loads(body))
        except BadReview as exc:
            return self._bad_request(head, exc)
        try:
            admission = self._admit(head.hook, req, lookups)
        except NotCached:
            raise
        except ClusterStateUnknown as exc:
            return self._failed(head, req, str(exc))
        except Exception:  # noqa: BLE001 - logged with its traceback by _failed()
            return self._failed(head, req)
        self._record(head, req, admission)
        return json_reply(admission.review, req.uid)

    def _admit(self, hook: Hook, req: Request, lookups: Lookups) -> Admission:
        policy = self.policy()
        if policy is None:
            return unavailable(req, "preemptguard has no policy loaded yet; retry shortly")
        return answer(
            hook,
            req,
            policy,
            lookups.namespaces,
            self.evaluate,
            priority_classes=lookups.priority_classes,
        )

    # --- answers that are not a checked review --------------------------------------------

    def _bad_head(self, head: Head, reason: str) -> Reply:
        """HTTP 400 for a call refused before its body was read: its connection is closed,
        as what is left of the body would be read as the next request."""
        self.metrics.bad_requests.labels(hook=head.hook.value).inc()
        log.warning(
            "bad_request", hook=head.hook.value, reason=reason, path=shorten(head.path, ECHO_CHARS)
        )
        return text_reply(400, reason, close=True)

    def _bad_request(self, head: Head, exc: BadReview) -> Reply:
        """HTTP 400 for a body that is not an AdmissionReview; a review whose uid can be
        echoed is refused instead (HTTP 200), as an HTTP error would be no answer at all."""
        self.metrics.bad_requests.labels(hook=head.hook.value).inc()
        path = shorten(head.path, ECHO_CHARS)
        if isinstance(exc, UnreadableRequest):
            uid = shorten(exc.uid, ECHO_CHARS)
            log.warning("bad_request", hook=head.hook.value, reason=str(exc), path=path, uid=uid)
            return json_reply(review.unreadable(exc), exc.uid)
        log.warning("bad_request", hook=head.hook.value, reason=str(exc), path=path)
        return text_reply(400, str(exc))

    def _busy(self, head: Head, body: bytes, why: str, code: int = 429) -> Reply:
        """Refuse, unread, a review that cannot be checked before the API server's deadline;
        ``why`` takes the size of the object in KiB. ``code``: 429, retry; 413, it will
        never fit."""
        message = why.format(kib=f"{len(body) // 1024:,}")
        seconds = self._seconds(head)
        self._count(head.hook, Outcome.BUSY, None, seconds)
        env = review.envelope(body)
        if env is None:
            # Not written by an API server: no review to answer with, and no reading it now.
            return text_reply(503, f"busy: {message}")
        log.warning(
            "admission",
            uid=shorten(env.uid, ECHO_CHARS),
            hook=head.hook.value,
            outcome=Outcome.BUSY.value,
            allowed=False,
            body_bytes=len(body),
            detail=message,
            duration_ms=round(seconds * 1000, 3),
        )
        return json_reply(review.refused_unread(env.api_version, env.uid, message, code), env.uid)

    def _failed(
        self,
        head: Head,
        req: Request,
        known: str | None = None,
        *,
        internal: str | None = None,
    ) -> Reply:
        """An HTTP 500, so that the API server applies the webhook's failurePolicy.

        ``known`` is a failure that is understood (the namespace cannot be read): logged
        without a traceback, and its reason is the answer. ``internal`` is an engine error
        raised in the offload process, logged as it came.
        """
        seconds = self._seconds(head)
        self._count(head.hook, Outcome.ERROR, None, seconds)
        fields = _request_fields(head.hook, req, seconds)
        if internal is not None:
            log.error("admission_failed", **fields, error=internal)
            return text_reply(500, internal_error(req))
        if known is None:
            log.exception("admission_failed", **fields)
            return text_reply(500, internal_error(req))
        log.error("admission_failed", **fields, error=known)
        what = f"{shorten(req.kind, ECHO_CHARS)} {shorten(req.name, ECHO_CHARS)}"
        return text_reply(500, f"cannot check {what}: {known}")

    # --- the log line and metrics of a review ----------------------------------------------

    def _record(self, head: Head, req: Request, admission: Admission) -> None:
        seconds = self._seconds(head)
        wclass = admission.workload_class
        self._count(head.hook, admission.outcome, wclass, seconds)
        response = admission.review["response"]
        fields = _request_fields(head.hook, req, seconds)
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

    def _seconds(self, head: Head) -> float:
        return time.monotonic() - head.arrived

    def _limit(self) -> str:
        return f"{self.max_body_bytes / 2**20:g} MiB"


# What the server's I/O says of a body it could not read to its end, whatever the cause.
_BODY_CUT = (
    "body could not be read: the connection ended before the end of the body, or its "
    "chunked framing is broken"
)
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
