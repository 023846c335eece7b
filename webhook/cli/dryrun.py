"""Run the engine over manifests read from files: the offline side of the webhook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.engine.decision import Context, Decision
from webhook.engine.evaluation import evaluate
from webhook.engine.patch import PatchOp, make_patch
from webhook.engine.policy import Policy
from webhook.loading.manifests import Document, InputError, Manifests


@dataclass(frozen=True)
class Result:
    """The decision for one object read from a file, with the patch it would get."""

    document: Document
    decision: Decision
    patch: list[PatchOp]

    def as_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "file": self.document.source,
            "line": self.document.line,
            "kind": d.kind,
            "namespace": d.namespace,
            "name": d.name,
            "class": d.workload_class,
            "source": d.classification.source,
            "sourceDetail": d.classification.detail,
            "allowed": d.allowed,
            "refused": d.refused,
            "skipped": d.skipped,
            "reasons": list(d.violations),
            "warnings": list(d.warnings),
            "changes": [{"field": c.field, "reason": c.reason} for c in d.changes],
            "patch": self.patch,
        }


def check(manifests: Manifests, policy: Policy, *, default_namespace: str) -> list[Result]:
    """Decide every object as the webhook would on CREATE, namespaces from the same input.

    An object the engine fails on is added to ``manifests.errors``; the others still get
    their results.
    """
    annotations = manifests.namespace_annotations()
    results = []
    for doc in manifests.documents:
        ctx = _context(doc, annotations, default_namespace)
        try:
            decision = evaluate(doc.obj, policy, ctx)
            results.append(Result(doc, decision, make_patch(doc.obj, decision.mutated)))
        except Exception as exc:  # noqa: BLE001 - reported with the object, never a traceback
            problem = f"could not be evaluated ({type(exc).__name__}: {exc}); please report it"
            manifests.errors.append(InputError(doc.source, doc.line, problem))
    return results


def _context(
    doc: Document, annotations: dict[str, dict[str, str]], default_namespace: str
) -> Context:
    if doc.obj.get("kind") == "Namespace":
        return Context(namespace=None)
    meta = doc.obj.get("metadata") or {}
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    namespace = namespace or default_namespace
    return Context(namespace=namespace, namespace_annotations=annotations.get(namespace, {}))
