"""The admission core: one request judged and answered, without HTTP; the one path the server,
``check``, ``explain``, ``test`` and everything after them take.

- ``answer(hook, request, ...) -> Admission`` is the seam the server calls for each review:
  what the hook answers (the review to send back, with what its log line and metrics need).
- ``judge(subject, ...) -> Judgement``: a ``Subject`` (the object, the operation, the
  namespace, who asks) decided by the engine, which looks the namespace up if it needs it,
  and the JSON Patch from the object to the decided one. The CLI prints judgements.

The mutating hook places pods on CREATE, and gives workloads created the changes to themselves
(a Job's podFailurePolicy; their templates are placed when their pods are created). The
validating hook sees the final object after every mutating webhook, so it checks pods and
workload templates again, on CREATE and UPDATE.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook import engine
from webhook.admission import lookups, review
from webhook.admission.review import ECHO_CHARS, AdmissionReview, Request
from webhook.engine.decision import (
    AdmissionOperation,
    Context,
    Decision,
    NamespaceLookup,
    Obj,
    Requester,
)
from webhook.engine.evaluation import kinds_of
from webhook.engine.findings import Code, Finding, bounded, finding, shorten
from webhook.engine.jobs import JobAPI
from webhook.engine.patch import PatchOp, make_patch
from webhook.engine.policy import Mode, Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.engine.workloads import api_group, mapping_at

Evaluator = Callable[[Obj, Policy, Context], Decision]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What one request asks about."""

    obj: Obj
    operation: AdmissionOperation = "CREATE"
    # The request's namespace; None for cluster-scoped objects and where the caller has none
    # (the object's own is used then).
    namespace: str | None = None
    old_object: Obj | None = None
    # None offline: the answer an ordinary user gets.
    requester: Requester | None = None
    # True for an object as an API server sent it, with the fields it defaulted; False for a
    # manifest as written, judged as a current release would receive it.
    as_sent: bool = False

    @classmethod
    def of_manifest(cls, obj: Obj, policy: Policy, *, default_namespace: str) -> Subject:
        """An object as ``kubectl apply`` would send it: created, in its namespace or the
        default one (cluster-scoped kinds in none)."""
        if cluster_scoped(obj, policy):
            return cls(obj=obj)
        own = mapping_at(obj, "metadata").get("namespace")
        return cls(obj=obj, namespace=own if isinstance(own, str) and own else default_namespace)


# Kubernetes' own cluster-scoped kinds a manifest may hold, by API group and kind.
CLUSTER_SCOPED = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("node.k8s.io", "RuntimeClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "ResourceSlice"),
        ("cert-manager.io", "ClusterIssuer"),
    }
)


def cluster_scoped(obj: Obj, policy: Policy) -> bool:
    """Whether ``obj`` has no namespace: one of Kubernetes' cluster-scoped kinds, or a workload
    kind the policy lists with ``scope: Cluster``."""
    kind, group = obj.get("kind"), api_group(obj)
    if not isinstance(kind, str) or group is None:
        return False
    listed = kinds_of(policy).get((group, kind))
    return (group, kind) in CLUSTER_SCOPED or (listed is not None and listed.cluster_scoped)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """The engine's decision and the JSON Patch turning the object into the decided one."""

    subject: Subject
    decision: Decision
    patch: list[PatchOp]
    # What the mutating hook answers: ``patch``, but for a workload only the changes to itself
    # (its templates are placed when their pods are created).
    stored_patch: list[PatchOp]


def judge(
    subject: Subject,
    policy: Policy,
    namespaces: NamespaceLookup,
    evaluate: Evaluator = engine.evaluate,
    *,
    priority_classes: PriorityLookup | None = None,
) -> Judgement:
    """Decide ``subject``. Exceptions from ``evaluate``, from ``namespaces``
    (``NamespaceUnknown``) and from ``priority_classes`` (``PriorityClassUnknown``; without
    one, the system and shipped classes) reach the caller."""
    context = Context(
        operation=subject.operation,
        namespace=subject.namespace,
        old_object=subject.old_object,
        requester=subject.requester,
        priority_classes=priority_classes or lookups.offline_priority_classes(),
        namespaces=namespaces,
        job_api=JobAPI.AS_SENT if subject.as_sent else JobAPI.CURRENT,
    )
    decision = evaluate(subject.obj, policy, context)
    patch = make_patch(subject.obj, decision.mutated)
    stored = decision.stored
    stored_patch = patch if stored is None else make_patch(subject.obj, stored)
    return Judgement(subject=subject, decision=decision, patch=patch, stored_patch=stored_patch)


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
    BUSY = "busy"  # a review refused unread because it could not be checked in time
    ERROR = "error"


@dataclass(frozen=True, slots=True)
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


def answer(
    hook: Hook,
    request: Request,
    policy: Policy,
    namespaces: NamespaceLookup,
    evaluate: Evaluator = engine.evaluate,
    *,
    priority_classes: PriorityLookup | None = None,
    as_sent: bool = True,
) -> Admission:
    """Answer ``request`` on ``hook``; ``as_sent`` False for a request made offline from a
    manifest, whose object carries none of the API server's defaults (see ``Subject``).

    Exceptions from the engine, ``NamespaceUnknown`` from ``namespaces`` and
    ``PriorityClassUnknown`` from ``priority_classes`` reach the caller.
    """
    reason = _not_checked(hook, request)
    if reason is not None:
        return Admission(review.allowed(request), Outcome.SKIPPED, detail=reason.message)
    subject = dataclasses.replace(_subject(request), as_sent=as_sent)
    judged = judge(subject, policy, namespaces, evaluate, priority_classes=priority_classes)
    return respond(hook, request, judged, policy)


def answers(
    request: Request,
    policy: Policy,
    namespaces: NamespaceLookup,
    *,
    priority_classes: PriorityLookup | None = None,
) -> tuple[Judgement | None, dict[Hook, Admission]]:
    """What both hooks answer for ``request``, judged once, as ``preemptguard check`` shows
    for a review given to it. A DELETE is judged on its old object (which the engine leaves
    alone); a request with no object at all has no judgement."""
    judged = None
    if request.object is not None or request.old_object is not None:
        judged = judge(_subject(request), policy, namespaces, priority_classes=priority_classes)
    found: dict[Hook, Admission] = {}
    for hook in Hook:
        reason = _not_checked(hook, request)
        if reason is not None or judged is None:
            detail = reason.message if reason is not None else ""
            found[hook] = Admission(review.allowed(request), Outcome.SKIPPED, detail=detail)
        else:
            found[hook] = respond(hook, request, judged, policy)
    return judged, found


def _subject(request: Request) -> Subject:
    obj = request.object if request.object is not None else request.old_object
    assert obj is not None
    return Subject(
        obj=_as_named(obj, request),
        operation=request.operation,
        namespace=request.namespace,
        old_object=request.old_object,
        requester=request.requester,
        as_sent=True,
    )


def _as_named(obj: Obj, request: Request) -> Obj:
    """``obj`` judged as the kind request.kind names. The API server says what the object is;
    apiVersion and kind inside it are written by whoever sends it, and a pod whose own
    apiVersion were, say, a number must not pass as "not a pod". A shallow copy, so that the
    patch (a diff from it) never touches those fields."""
    api_version = request.object_api_version
    if api_version is None or (obj.get("apiVersion"), obj.get("kind")) == (
        api_version,
        request.kind,
    ):
        return obj
    return {**obj, "apiVersion": api_version, "kind": request.kind}


def respond(hook: Hook, request: Request, judged: Judgement, policy: Policy) -> Admission:
    """The review ``hook`` answers for ``judged``."""
    decision = judged.decision
    if decision.skip is not None:
        answer = review.allowed(request)
        return Admission.of(answer, Outcome.SKIPPED, decision, detail=decision.skip.message)
    if hook is Hook.MUTATE and not request.is_pod:
        return _workload_mutated(request, judged)
    if not decision.allowed:
        message = bounded("; ".join(decision.violations))
        answer = review.denied(request, message, warnings=decision.warnings, audit=_audit(decision))
        return Admission.of(answer, Outcome.REFUSED, decision, detail=message)
    if hook is Hook.MUTATE:
        return _mutated(request, judged)
    return _validated(request, decision, policy)


def internal_error(request: Request) -> str:
    """Why evaluating ``request`` failed, in one line, for an HTTP 500 (not a review).

    A failed call, unlike a review that refuses, lets the API server apply the webhook's
    failurePolicy: a bug here does not refuse pods with a message saying nothing to change.
    """
    message = (
        f"internal error while checking {shorten(request.kind, ECHO_CHARS)} "
        f"{shorten(_where(request), ECHO_CHARS)}; the preemptguard log has the details under "
        f"uid {shorten(request.uid, ECHO_CHARS)}"
    )
    return " ".join(message.split())


def unavailable(request: Request, why: str) -> Admission:
    """The answer when no policy is loaded: refused with 503, so nothing passes unchecked."""
    return Admission(review.errored(request, why, code=503), Outcome.ERROR, detail=why)


def _not_checked(hook: Hook, request: Request) -> Finding | None:
    """What a hook leaves alone whatever the object: the rest is the engine's to decide."""
    if request.sub_resource:
        message = f"subresource {shorten(request.sub_resource, ECHO_CHARS)} is not checked"
        return finding(Code.SUBRESOURCE, message)
    if request.object is None:  # DELETE and CONNECT carry none
        return finding(Code.OPERATION_NOT_CHECKED, f"{request.operation} is not checked")
    if hook is Hook.MUTATE and not request.is_pod and request.operation != "CREATE":
        message = (
            "workloads are mutated only when created (a Job's podFailurePolicy); their "
            "templates are checked by /validate"
        )
        return finding(Code.NOT_MUTATED, message)
    return None


def _mutated(request: Request, judged: Judgement) -> Admission:
    decision, ops = judged.decision, judged.patch
    answer = review.patched(request, ops, warnings=decision.warnings, audit=_audit(decision))
    outcome = Outcome.PATCHED if ops else _allowed_outcome(decision)
    return Admission.of(answer, outcome, decision, patch_ops=len(ops))


def _workload_mutated(request: Request, judged: Judgement) -> Admission:
    """A workload's changes to itself (a Job's podFailurePolicy), never its templates'. Its
    refusals and warnings are the validating hook's, which sees the object after every
    mutating webhook: a refused one gets no patch here."""
    decision = judged.decision
    ops = judged.stored_patch if decision.allowed else []
    answer = review.patched(request, ops, audit=_audit(decision))
    outcome = Outcome.PATCHED if ops else Outcome.ALLOWED
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
    missing = shorten("; ".join(f"{c.path}: {c.message}" for c in decision.changes), 500)
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
