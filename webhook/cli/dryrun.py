"""Manifests read from files, judged as the webhook would judge them: the offline side of it.

Every object goes through the admission core (``webhook.admission``) as a CREATE by an
ordinary user; an AdmissionReview in the input is answered as both hooks answer it, so a
recorded review gives exactly the server's answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.admission import namespaces
from webhook.admission.core import Judgement, Subject, judge
from webhook.admission.hooks import Hook, answers
from webhook.admission.namespaces import NamespaceLookup
from webhook.admission.review import REVIEW_KIND, AdmissionReview, parse_review
from webhook.engine.decision import Decision
from webhook.engine.patch import PatchOp
from webhook.engine.policy import Policy
from webhook.errors import BadReview
from webhook.loading.manifests import Document, InputError, Item, Manifests


@dataclass(frozen=True, kw_only=True)
class Result:
    """The judgement of one object read from a file; for a review, both hooks' answers."""

    document: Document
    judgement: Judgement
    reviews: dict[str, AdmissionReview] = field(default_factory=dict)

    @property
    def decision(self) -> Decision:
        return self.judgement.decision

    @property
    def patch(self) -> list[PatchOp]:
        return self.judgement.patch

    def as_json(self) -> dict[str, Any]:
        d = self.decision
        doc = {
            "file": self.document.source,
            "line": self.document.line,
            "kind": d.kind,
            "namespace": d.namespace,
            "name": d.name,
            "class": d.workload_class,
            "source": d.classification.source,
            "sourceDetail": d.classification.detail,
            "allowed": d.allowed,
            "refused": d.enforce_refuses,
            "skipped": d.skipped,
            "reasons": list(d.violations),
            "warnings": list(d.warnings),
            "changes": [{"field": c.path, "reason": c.message} for c in d.changes],
            "findings": [{"severity": severity, **f.as_json()} for severity, f in _findings(d)],
            "patch": self.patch,
        }
        if self.reviews:
            doc["reviews"] = self.reviews
        return doc


def _findings(d: Decision) -> list[tuple[str, Any]]:
    groups = (("skip", (d.skip,) if d.skip else ()), ("refusal", d.refusals),
              ("warning", d.notes), ("change", d.changes))  # fmt: skip
    return [(severity, f) for severity, found in groups for f in found]


def check(manifests: Manifests, policy: Policy, *, default_namespace: str) -> list[Result]:
    """Judge every object as the webhook would on CREATE, namespaces from the same input.

    An object that cannot be judged (a malformed review, an engine failure) is added to
    ``manifests.errors``; the others still get their results.
    """
    lookup = namespaces.from_objects(doc.obj for doc in manifests.documents)
    results = []
    for item in judge_each(manifests.documents, policy, lookup, default_namespace):
        if isinstance(item, Result):
            results.append(item)
        else:
            manifests.errors.append(item)
    return results


def judge_each(
    items: Iterable[Item], policy: Policy, lookup: NamespaceLookup, default_namespace: str
) -> Iterator[Result | InputError]:
    """A result for each object of ``items`` as it comes; problems passed on as they come.

    An object that cannot be judged (a malformed review, an engine failure) becomes an input
    error naming it; the others still get their results.
    """
    for item in items:
        if isinstance(item, InputError):
            yield item
            continue
        try:
            yield _result(item, policy, lookup, default_namespace)
        except BadReview as exc:
            yield InputError(source=item.source, line=item.line, message=f"{REVIEW_KIND}: {exc}")
        except Exception as exc:  # noqa: BLE001 - reported with the object, never a traceback
            problem = f"could not be evaluated ({type(exc).__name__}: {exc}); please report it"
            yield InputError(source=item.source, line=item.line, message=problem)


def _result(
    doc: Document, policy: Policy, lookup: NamespaceLookup, default_namespace: str
) -> Result:
    if doc.obj.get("kind") != REVIEW_KIND:
        subject = Subject.of_manifest(doc.obj, default_namespace=default_namespace)
        return Result(document=doc, judgement=judge(subject, policy, lookup))
    request = parse_review(doc.obj)
    judged, found = answers(request, policy, lookup)
    if judged is None:
        raise BadReview(f"request {request.uid} carries no object to show ({request.operation})")
    reviews = {hook.value: found[hook].review for hook in Hook}
    return Result(document=doc, judgement=judged, reviews=reviews)
