"""What each hook answers for one parsed request: the engine's decision turned into a review.

The mutating hook places pods on CREATE. The validating hook sees the final object after every
mutating webhook, so it re-checks pods on CREATE and workload templates on CREATE and UPDATE.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from webhook.admission import review
from webhook.admission.review import AdmissionReview, Request
from webhook.engine.decision import Context, Decision, Obj, bounded, shorten
from webhook.engine.patch import make_patch
from webhook.engine.policy import Mode, Policy

Evaluator = Callable[[Obj, Policy, Context], Decision]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class NamespaceMeta:
    """What the engine reads of the request's namespace."""

    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


class NamespaceUnknown(Exception):
    """The namespace's annotations cannot be known now; ``str()`` says why.

    Guessing "no default class" could let a pod through unplaced, so the review fails
    instead (HTTP 500) and the webhook's failurePolicy decides.
    """


# Looks up a namespace (never None); raises NamespaceUnknown.
NamespaceLookup = Callable[[str], NamespaceMeta]


def no_namespaces(namespace: str) -> NamespaceMeta:
    """The lookup when no cluster is configured: no namespace has annotations."""
    return NamespaceMeta()


CLASS_AUDIT_KEY = "workload-class"
SOURCE_AUDIT_KEY = "classified-by"


class Hook(enum.Enum):
    MUTATE = "mutate"
    VALIDATE = "validate"


class Outcome(enum.Enum):
    SKIPPED = "skipped"  # not evaluated, or the engine leaves the object alone
    ALLOWED = "allowed"
    PATCHED = "patched"
    WARNED = "warned"  # would be refused in enforce mode; warn mode lets it through
    REFUSED = "refused"
    BUSY = "busy"  # a large review refused because it could not be checked in time
    ERROR = "error"


@dataclass(frozen=True)
class Admission:
    """The review to send back, with what the log line and the metrics need.

    ``decision`` holds the whole object; ``without_decision`` drops it, for keeping the
    answer or sending it to another process.
    """

    review: AdmissionReview
    outcome: Outcome
    decision: Decision | None = None
    patch_ops: int = 0
    detail: str = ""
    workload_class: str | None = None
    source: str | None = None

    @classmethod
    def of(
        cls, review: AdmissionReview, outcome: Outcome, decision: Decision, **extra: Any
    ) -> Admission:
        return cls(
            review,
            outcome,
            decision,
            workload_class=decision.workload_class,
            source=decision.classification.source,
            **extra,
        )

    def without_decision(self) -> Admission:
        return dataclasses.replace(self, decision=None)


def admit(
    hook: Hook,
    request: Request,
    policy: Policy,
    namespaces: NamespaceLookup,
    evaluate: Evaluator,
) -> Admission:
    """Answer ``request`` on ``hook``.

    Exceptions from the engine, and ``NamespaceUnknown`` from ``namespaces``, reach the caller.
    """
    reason = _not_checked(hook, request)
    if reason is not None:
        return Admission(review.allowed(request), Outcome.SKIPPED, detail=reason)
    assert request.object is not None  # parse_review requires it for CREATE and UPDATE
    meta = _namespace(request, policy, namespaces)
    context = Context(
        operation=request.operation,
        namespace=request.namespace,
        namespace_annotations=meta.annotations,
        old_object=request.old_object,
        requester=request.requester,
        namespace_labels=meta.labels,
    )
    decision = evaluate(request.object, policy, context)
    if decision.skipped is not None:
        return Admission.of(
            review.allowed(request), Outcome.SKIPPED, decision, detail=decision.skipped
        )
    if not decision.allowed:
        message = bounded("; ".join(decision.violations))
        answer = review.denied(request, message, warnings=decision.warnings, audit=_audit(decision))
        return Admission.of(answer, Outcome.REFUSED, decision, detail=message)
    if hook is Hook.MUTATE:
        return _mutated(request, decision)
    return _validated(request, decision, policy)


def internal_error(request: Request) -> str:
    """Why evaluating ``request`` failed, in one line, for an HTTP 500 (not a review).

    A failed call, unlike a review that refuses, lets the API server apply the webhook's
    failurePolicy: a bug here does not refuse pods with a message saying nothing to change.
    """
    message = (
        f"internal error while checking {review.clip(request.kind)} "
        f"{review.clip(_where(request))}; the preemptguard log has the details under uid "
        f"{review.clip(request.uid)}"
    )
    return " ".join(message.split())


def unavailable(request: Request, why: str) -> Admission:
    """The answer when no policy is loaded: refused with 503, so nothing passes unchecked."""
    return Admission(review.errored(request, why, code=503), Outcome.ERROR, detail=why)


def _namespace(request: Request, policy: Policy, namespaces: NamespaceLookup) -> NamespaceMeta:
    # An excluded namespace is skipped by the engine: no need to know anything about it.
    if request.namespace is None or request.namespace in policy.excluded_namespaces:
        return NamespaceMeta()
    return namespaces(request.namespace)


def _not_checked(hook: Hook, request: Request) -> str | None:
    if request.sub_resource:
        return f"subresource {request.sub_resource} is not checked"
    if request.operation not in ("CREATE", "UPDATE"):
        return f"{request.operation} is not checked"
    if request.is_pod and request.operation == "UPDATE":
        return "pods are placed when created; the API server forbids changing placement later"
    if hook is Hook.MUTATE and not request.is_pod:
        return "workload templates are checked by /validate, never mutated"
    return None


def _mutated(request: Request, decision: Decision) -> Admission:
    assert request.object is not None
    ops = make_patch(request.object, decision.mutated)
    answer = review.patched(request, ops, warnings=decision.warnings, audit=_audit(decision))
    outcome = Outcome.PATCHED if ops else _allowed_outcome(decision)
    return Admission.of(answer, outcome, decision, patch_ops=len(ops))


def _validated(request: Request, decision: Decision, policy: Policy) -> Admission:
    audit = _audit(decision)
    if not (request.is_pod and decision.changes):
        answer = review.allowed(request, warnings=decision.warnings, audit=audit)
        return Admission.of(answer, _allowed_outcome(decision), decision)
    message = _unplaced(decision)
    if policy.mode is Mode.WARN:
        warnings = [*decision.warnings, f"would be refused in enforce mode: {message}"]
        answer = review.allowed(request, warnings=warnings, audit=audit)
        return Admission.of(answer, Outcome.WARNED, decision, detail=message)
    answer = review.denied(request, message, warnings=decision.warnings, audit=audit)
    return Admission.of(answer, Outcome.REFUSED, decision, detail=message)


def _unplaced(decision: Decision) -> str:
    """Why a pod that the mutating hook would have changed cannot be admitted as it is."""
    # Cut, so that the advice after it survives the limit on messages.
    missing = shorten("; ".join(f"{c.field}: {c.reason}" for c in decision.changes), 500)
    return bounded(
        f"the pod reached validation without the placement of its class "
        f"{decision.workload_class} ({missing}): the mutating webhook did not run or another "
        f"webhook undid its changes; check preemptguard's MutatingWebhookConfiguration "
        f"(rules, namespaceSelector, failurePolicy) and the webhooks that run after it"
    )


def _allowed_outcome(decision: Decision) -> Outcome:
    return Outcome.WARNED if decision.violations else Outcome.ALLOWED


def _audit(decision: Decision) -> dict[str, str]:
    # Keys become "<webhook name>/<key>" in the audit log: no "/" allowed in them.
    if decision.workload_class is None:
        return {}
    return {
        CLASS_AUDIT_KEY: decision.workload_class,
        SOURCE_AUDIT_KEY: decision.classification.source,
    }


def _where(request: Request) -> str:
    name = request.name or "(unnamed)"
    return f"{request.namespace}/{name}" if request.namespace else name
