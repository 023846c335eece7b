"""Manifests read from files, judged as the webhook would judge them: the offline side of it.

Every object goes through the admission core (``webhook.admission``) as a CREATE by an
ordinary user; an AdmissionReview in the input is answered as both hooks answer it, so a
recorded review gives exactly the server's answer. ``admit_each`` goes on to what the API server
would store: the mutating hook's patch applied, then the validating hook's answer on the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import jsonpatch

from webhook.admission import lookups
from webhook.admission.core import Hook, Judgement, Subject, answer, answers, judge
from webhook.admission.review import (
    API_VERSION,
    REVIEW_KIND,
    AdmissionResponse,
    AdmissionReview,
    Request,
    decode_patch,
    parse_review,
)
from webhook.engine.decision import Decision, NamespaceLookup, Obj, Part
from webhook.engine.findings import Code, Finding
from webhook.engine.patch import PatchOp
from webhook.engine.policy import Mode, Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.engine.workloads import display_name
from webhook.errors import BadReview
from webhook.loading.manifests import Document, InputError, Item, Manifests

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Result:
    """The judgement of one object read from a file, or of one of its pod templates (a
    workload with several gets a result for each); for a review, both hooks' answers."""

    document: Document
    decision: Decision
    # The patch of the whole object, or of this template only.
    patch: list[PatchOp]
    reviews: dict[str, AdmissionReview] = field(default_factory=dict)
    template: str | None = None
    role: str = ""
    # Whether this is the first (or only) result of its object: counts count objects once.
    first: bool = True

    def as_json(self) -> dict[str, Any]:
        d = self.decision
        doc = {
            "file": self.document.source,
            "line": self.document.line,
            "kind": d.kind,
            "namespace": d.namespace,
            "name": d.name,
            "template": self.template,
            "role": self.role or None,
            "class": d.workload_class,
            "source": d.classification.source,
            "sourceDetail": d.classification.detail,
            "allowed": d.allowed,
            "refused": d.enforce_refuses,
            "skipped": d.skip is not None,
            "skipReason": d.skipped,
            "reasons": list(d.violations),
            "warnings": list(d.warnings),
            "changes": [{"field": c.path, "reason": c.message} for c in d.changes],
            "findings": [{"severity": severity, **f.as_json()} for severity, f in _findings(d)],
            "patch": self.patch,
        }
        if self.reviews:
            doc["reviews"] = self.reviews
        return doc


def results_of(document: Document, judged: Judgement, policy: Policy) -> list[Result]:
    """One result for the object; for a workload with several pod templates, one for each,
    with its own verdict and the part of the patch that is its."""
    d = judged.decision
    if len(d.parts) <= 1:
        template, role = (d.parts[0].path, d.parts[0].role) if d.parts else (None, "")
        return [
            Result(document=document, decision=d, patch=judged.patch, template=template, role=role)
        ]
    # The object's own warnings (an annotation out of reach, the namespace's) go with the
    # first template's result; each template's, and what its pods will get, with its own.
    in_parts = {f for p in d.parts for f in (*p.refusals, *p.notes)}
    shared = tuple(f for f in d.notes if f not in in_parts and f.code is not Code.TEMPLATE_SUMMARY)
    results = []
    for i, part in enumerate(d.parts):
        own = tuple(f for f in d.notes if f.code is Code.TEMPLATE_SUMMARY and f.path == part.path)
        view = replace(
            d,
            classification=part.classification,
            allowed=not part.refusals or policy.mode is Mode.WARN,
            refusals=part.refusals,
            notes=(*(shared if i == 0 else ()), *part.notes, *own, *_warned(part, policy)),
            changes=(*_job_changes(d, part), *part.changes),
            parts=(),
        )
        prefix = part.pointer + "/"
        patch = [
            *_job_ops(judged.patch, part),
            *(op for op in judged.patch if op["path"].startswith(prefix)),
        ]
        results.append(
            Result(
                document=document,
                decision=view,
                patch=patch,
                template=part.path,
                role=part.role,
                first=i == 0,
            )
        )
    return results


# What the Job spec holding a template gets (webhook/engine/jobs.py): shown with the template.
_JOB_FIELDS = ("podFailurePolicy", "podReplacementPolicy")
_JOB_CODES = frozenset({Code.POD_FAILURE_POLICY, Code.POD_REPLACEMENT_POLICY})


def _job_changes(d: Decision, part: Part) -> tuple[Finding, ...]:
    holder = part.path.rpartition(".")[0] + "."
    return tuple(c for c in d.changes if c.code in _JOB_CODES and c.path.startswith(holder))


def _job_ops(patch: list[PatchOp], part: Part) -> list[PatchOp]:
    holder = part.pointer.rpartition("/")[0]
    fields = tuple(f"{holder}/{name}" for name in _JOB_FIELDS)
    return [
        op
        for op in patch
        if op["path"] in fields or op["path"].startswith(tuple(f + "/" for f in fields))
    ]


def _warned(part: Part, policy: Policy) -> tuple[Finding, ...]:
    if policy.mode is not Mode.WARN:
        return ()
    return tuple(
        f._replace(
            code=Code.WOULD_BE_REFUSED, message=f"would be refused in enforce mode: {f.message}"
        )
        for f in part.refusals
    )


def _findings(d: Decision) -> list[tuple[str, Any]]:
    groups = (("skip", (d.skip,) if d.skip else ()), ("refusal", d.refusals),
              ("warning", d.notes), ("change", d.changes))  # fmt: skip
    return [(severity, f) for severity, found in groups for f in found]


def check(manifests: Manifests, policy: Policy, *, default_namespace: str) -> list[Result]:
    """Judge every object as the webhook would on CREATE, namespaces from the same input.

    An object that cannot be judged (a malformed review, an engine failure) is added to
    ``manifests.errors``; the others still get their results.
    """
    lookup = lookups.namespaces_from_objects(doc.obj for doc in manifests.documents)
    classes = lookups.priority_classes_from_objects(doc.obj for doc in manifests.documents)
    results = []
    each = judge_each(
        manifests.documents, policy, lookup, default_namespace, priority_classes=classes
    )
    for item in each:
        if isinstance(item, Result):
            results.append(item)
        else:
            manifests.errors.append(item)
    return results


def judge_each(
    items: Iterable[Item],
    policy: Policy,
    lookup: NamespaceLookup,
    default_namespace: str,
    *,
    priority_classes: PriorityLookup | None = None,
) -> Iterator[Result | InputError]:
    """A result for each object of ``items`` as it comes; problems passed on as they come.

    An object that cannot be judged (a malformed review, an engine failure) becomes an input
    error naming it; the others still get their results.
    """
    return _each(
        items, lambda doc: _result(doc, policy, lookup, default_namespace, priority_classes)
    )


def admit_each(
    items: Iterable[Item],
    policy: Policy,
    lookup: NamespaceLookup,
    default_namespace: str,
    *,
    priority_classes: PriorityLookup | None = None,
) -> Iterator[Admitted | InputError]:
    """What the API server would do with each object of ``items`` after the webhook: store it,
    patched by the mutating hook, or refuse it. Problems are passed on as ``judge_each`` does.
    """
    return _each(
        items, lambda doc: [_admitted(doc, policy, lookup, default_namespace, priority_classes)]
    )


def _each(
    items: Iterable[Item], judged: Callable[[Document], Iterable[T]]
) -> Iterator[T | InputError]:
    for item in items:
        if isinstance(item, InputError):
            yield item
            continue
        try:
            yield from judged(item)
        except BadReview as exc:
            yield InputError(source=item.source, line=item.line, message=f"{REVIEW_KIND}: {exc}")
        except Exception as exc:  # noqa: BLE001 - reported with the object, never a traceback
            problem = f"could not be evaluated ({type(exc).__name__}: {exc}); please report it"
            yield InputError(source=item.source, line=item.line, message=problem)


def _result(
    doc: Document,
    policy: Policy,
    lookup: NamespaceLookup,
    default_namespace: str,
    priority_classes: PriorityLookup | None,
) -> list[Result]:
    if doc.obj.get("kind") != REVIEW_KIND:
        subject = Subject.of_manifest(doc.obj, policy, default_namespace=default_namespace)
        return results_of(
            doc, judge(subject, policy, lookup, priority_classes=priority_classes), policy
        )
    request = parse_review(doc.obj)
    judged, found = answers(request, policy, lookup, priority_classes=priority_classes)
    if judged is None:
        raise BadReview(f"request {request.uid} carries no object to show ({request.operation})")
    reviews = {hook.value: found[hook].review for hook in Hook}
    return [Result(document=doc, decision=judged.decision, patch=judged.patch, reviews=reviews)]


@dataclass(frozen=True, kw_only=True)
class Admitted:
    """One object of the input as the API server would leave it after the webhook."""

    document: Document
    # "Pod team-a/train": the object, as the refusal names it.
    title: str
    # The object as stored: the original with the mutating hook's patch applied. None when a
    # hook refuses it.
    stored: Obj | None
    refusal: str = ""


# Who creates the objects of a manifest offline: an ordinary user, as for ``check``; and the
# uid of the request, which no answer here is sent back with.
OFFLINE_USER = "preemptguard-check"
OFFLINE_GROUPS = ("system:authenticated",)
OFFLINE_UID = "preemptguard-check"


def _admitted(
    doc: Document,
    policy: Policy,
    lookup: NamespaceLookup,
    default_namespace: str,
    priority_classes: PriorityLookup | None,
) -> Admitted:
    request, obj = _request_of(doc, policy, default_namespace)
    where = f"{request.namespace}/" if request.namespace else ""
    title = f"{request.kind} {where}{display_name(obj) or request.name or '<unnamed>'}"
    # A manifest carries none of the API server's defaults: judged as a current release's.
    as_sent = doc.obj.get("kind") == REVIEW_KIND

    def ask(hook: Hook, asked: Request) -> AdmissionResponse:
        found = answer(
            hook, asked, policy, lookup, priority_classes=priority_classes, as_sent=as_sent
        )
        return found.review["response"]

    # The API server's order: every mutating webhook, then the validating ones on the result.
    mutated = ask(Hook.MUTATE, request)
    if not mutated["allowed"]:
        return Admitted(document=doc, title=title, stored=None, refusal=_message(mutated))
    if "patch" in mutated:
        obj = jsonpatch.apply_patch(obj, decode_patch(mutated["patch"]))
    validated = ask(Hook.VALIDATE, replace(request, object=obj))
    if not validated["allowed"]:
        return Admitted(document=doc, title=title, stored=None, refusal=_message(validated))
    return Admitted(document=doc, title=title, stored=obj)


def _request_of(doc: Document, policy: Policy, default_namespace: str) -> tuple[Request, Obj]:
    """The request the API server sends the webhook for ``doc``, and the object it carries:
    a review's own, else a CREATE of the object."""
    if doc.obj.get("kind") != REVIEW_KIND:
        return created(doc.obj, policy, default_namespace=default_namespace), doc.obj
    request = parse_review(doc.obj)
    if request.object is None:
        raise BadReview(f"request {request.uid} carries no object to store ({request.operation})")
    return request, request.object


def created(obj: Obj, policy: Policy, *, default_namespace: str) -> Request:
    """The admission request for a CREATE of ``obj``, as ``kubectl apply`` makes the API
    server send it for an ordinary user: in the object's namespace or the default one."""
    subject = Subject.of_manifest(obj, policy, default_namespace=default_namespace)
    # The loader hands on only objects whose apiVersion and kind are non-empty text.
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    return Request(
        api_version=API_VERSION,
        uid=OFFLINE_UID,
        kind=kind,
        group=api_version.rpartition("/")[0],
        operation="CREATE",
        namespace=subject.namespace,
        name=display_name(obj, pending=""),
        sub_resource=None,
        user=OFFLINE_USER,
        groups=OFFLINE_GROUPS,
        dry_run=True,
        object=obj,
        old_object=None,
        object_api_version=api_version,
    )


def _message(response: AdmissionResponse) -> str:
    return response.get("status", {}).get("message") or "refused"
