"""The placement engine: one object and its context in, one Decision out. Pure: no I/O."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from webhook.engine import hints
from webhook.engine.classify import WORKLOAD_ANNOTATION, PodFacts, classify
from webhook.engine.constraints import NodeConstraints
from webhook.engine.decision import Classification, Context, Decision, Obj
from webhook.engine.findings import Code, Finding, finding, shorten
from webhook.engine.grace import GraceBudget, grace_budget
from webhook.engine.jsoncompare import same_json
from webhook.engine.placement import PREFERRED, REQUIRED, Placed, check, place
from webhook.engine.podshape import shape_problem
from webhook.engine.policy import Mode, Policy, WorkloadClass
from webhook.engine.trust import exemption
from webhook.engine.workloads import (
    WorkloadKind,
    controller_kind,
    display_name,
    find_pod_templates,
    mapping_at,
    template_of,
    workload_kind,
)

PLACEMENT_ANNOTATION = "together.ai/placement"


def evaluate(obj: Obj, policy: Policy, ctx: Context) -> Decision:
    """Classify ``obj``, apply its class's placement to a copy, and say whether it is allowed."""
    base = _Base(obj, namespace_of(obj, ctx))
    kind = workload_kind(obj)
    skip = _untouched(obj, kind, base.namespace, policy, ctx)
    if skip is not None or kind is None:
        return base.skipped(skip or _not_a_workload(obj))
    notes: list[Finding] = []
    if kind.is_pod:
        exempt = exemption(obj, ctx, policy.trusted)
        if exempt.skip is not None:
            return base.skipped(exempt.skip)
        notes += exempt.notes
    template = template_of(obj, kind)
    if template is None or not isinstance(template.get("spec"), dict):
        where = ".".join((*kind.template_path, "spec"))
        message = f"{kind.kind} has no {where} mapping: it cannot be placed; add it"
        return base.invalid(policy, finding(Code.NO_POD_SPEC, message, where))
    problem = shape_problem(template, kind.template_path)
    if problem is not None:
        return base.invalid(policy, problem)
    facts = _facts(obj, template, kind, base.namespace, ctx)
    verdict = classify(facts, policy)
    notes += [*_hints(obj, template, kind, ctx), *verdict.notes]
    if verdict.classification.name is None or verdict.refusals:
        return base.finish(policy, verdict.classification, verdict.refusals, notes)
    wclass = policy.classes[verdict.classification.name]
    budget = grace_budget(facts.annotations, policy)
    checked = check(template["spec"], wclass, policy, budget)
    if checked.refusals:
        return base.finish(policy, verdict.classification, checked.refusals, notes)
    mutated = copy_for_placement(obj, kind)
    placed = _place(mutated, kind, checked.node, wclass, budget, policy)
    return base.finish(policy, verdict.classification, (), [*notes, *placed.notes], placed, mutated)


def namespace_of(obj: Obj, ctx: Context) -> str | None:
    """The request's namespace, else the object's own."""
    own = mapping_at(obj, "metadata").get("namespace")
    return ctx.namespace or (own if isinstance(own, str) else None)


def untouched(obj: Obj, policy: Policy, ctx: Context) -> Finding | None:
    """Why ``obj`` is left alone whatever its namespace says, if it is.

    These rules need nothing but the request, so the admission core asks them before it
    looks up the namespace. Who sent a DaemonSet or mirror pod is judged later, in
    ``trust.exemption``.
    """
    return _untouched(obj, workload_kind(obj), namespace_of(obj, ctx), policy, ctx)


def _untouched(
    obj: Obj, kind: WorkloadKind | None, namespace: str | None, policy: Policy, ctx: Context
) -> Finding | None:
    if kind is None:
        return _not_a_workload(obj)
    if namespace in policy.excluded_namespaces:
        message = f"namespace {shorten(namespace or '')} is excluded by the policy"
        return finding(Code.EXCLUDED_NAMESPACE, message)
    if kind.kind == "DaemonSet":
        return finding(Code.DAEMONSET, "DaemonSets run one pod on every node, of both classes")
    if ctx.operation not in ("CREATE", "UPDATE"):
        return finding(Code.OPERATION_NOT_CHECKED, f"{ctx.operation} is not checked")
    if kind.is_pod and ctx.operation == "UPDATE":
        message = "pods are placed when created; the API server forbids changing placement later"
        return finding(Code.POD_UPDATE, message)
    if not kind.is_pod and ctx.operation == "UPDATE":
        return _workload_update_skip(obj, kind, ctx)
    return None


def _not_a_workload(obj: Obj) -> Finding:
    raw = obj.get("kind")
    kind = shorten(raw if isinstance(raw, str) else str(raw))
    templates = find_pod_templates(obj)
    if not templates:
        return finding(Code.NOT_A_WORKLOAD, f"kind {kind!r} holds no pods")
    where = ", ".join(templates)
    message = (
        f"kind {kind!r} is not checked at apply time, but it carries pod templates "
        f"({shorten(where, 200)}): its pods are checked by the webhook when they are created"
    )
    return finding(Code.UNCHECKED_KIND, message)


def _workload_update_skip(obj: Obj, kind: WorkloadKind, ctx: Context) -> Finding | None:
    # Controllers and the garbage collector update workloads all the time (replicas, status,
    # finalizers); refusing those would leave a workload admitted earlier stuck.
    if mapping_at(obj, "metadata").get("deletionTimestamp"):
        return finding(Code.BEING_DELETED, "the object is being deleted")
    if ctx.old_object is not None and same_json(
        template_of(obj, kind), template_of(ctx.old_object, kind)
    ):
        return finding(Code.TEMPLATE_UNCHANGED, "the pod template did not change")
    return None


# The containers placement writes into: a mapping lists the keys to descend into, a one-item
# list the shape of every item, an empty list or mapping a container copied on its own.
_WRITTEN: dict[str, Any] = {
    "metadata": {"annotations": {}},
    "spec": {
        "affinity": {
            "nodeAffinity": {
                REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": []}]},
                PREFERRED: [],
            }
        },
        "tolerations": [],
    },
}


def copy_for_placement(obj: Obj, kind: WorkloadKind) -> Obj:
    """A copy of ``obj`` whose pod template can be changed without touching ``obj``.

    Only the containers placement writes into are copied, each shallowly; everything else
    (managedFields, containers, every expression and toleration) is shared with the original.
    So the copy costs what those containers hold, never the depth of the object, and the
    patch that follows finds the changes by identity.
    """
    mutated = dict(obj)
    node = mutated
    for part in kind.template_path:
        node[part] = dict(node[part])
        node = node[part]
    for key, shape in _WRITTEN.items():
        if key in node:
            node[key] = _copied(node[key], shape)
    return mutated


def _copied(value: Any, shape: Any) -> Any:
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for key, inner in shape.items():
            if key in out:
                out[key] = _copied(out[key], inner)
        return out
    if not isinstance(value, list):
        return value
    return [_copied(v, shape[0]) for v in value] if shape else list(value)


def _facts(
    obj: Obj, template: Obj, kind: WorkloadKind, namespace: str | None, ctx: Context
) -> PodFacts:
    # The shape check has made sure both hold strings.
    meta = mapping_at(template, "metadata")
    return PodFacts(
        annotations=mapping_at(meta, "annotations"),
        labels=mapping_at(meta, "labels"),
        namespace=namespace,
        owner_kind=kind.pod_owner_kind if not kind.is_pod else controller_kind(obj),
        namespace_annotations=ctx.namespace_annotations,
    )


def _hints(obj: Obj, template: Obj, kind: WorkloadKind, ctx: Context) -> list[Finding]:
    """Warnings for annotations that are misspelt, written as labels, or out of reach."""
    meta = mapping_at(template, "metadata")
    where = "the pod" if kind.is_pod else "the pod template"
    return [
        *_misplaced_annotations(obj, kind),
        *hints.pod_annotation_hints(mapping_at(meta, "annotations"), where),
        *hints.pod_label_hints(mapping_at(meta, "labels"), where),
        *hints.namespace_hints(ctx.namespace, ctx.namespace_annotations, ctx.namespace_labels),
    ]


def _misplaced_annotations(obj: Obj, kind: WorkloadKind) -> list[Finding]:
    """The class annotation on metadata between a workload and its pod template (the
    workload's own, a CronJob's job template): its pods never see it."""
    target = ".".join((*kind.template_path, "metadata", "annotations"))
    found: list[Finding] = []
    node: Any = obj
    path: list[str] = []
    for part in kind.template_path:
        if WORKLOAD_ANNOTATION in mapping_at(node, "metadata", "annotations"):
            here = ".".join([*path, "metadata"]) if path else f"the {kind.kind}'s own metadata"
            message = (
                f"{WORKLOAD_ANNOTATION} on {here} does not reach its pods and is ignored: "
                f"put it in {target}"
            )
            where = ".".join([*path, "metadata", "annotations", WORKLOAD_ANNOTATION])
            found.append(finding(Code.ANNOTATION_OUT_OF_REACH, message, where))
        node = node.get(part) if isinstance(node, dict) else None
        path.append(part)
    return found


def _place(
    mutated: Obj,
    kind: WorkloadKind,
    node: NodeConstraints,
    wclass: WorkloadClass,
    budget: GraceBudget,
    policy: Policy,
) -> Placed:
    template = template_of(mutated, kind)
    assert template is not None  # checked on the original, and the copy is equal
    placed = place(template, node, wclass, policy, budget)
    changes = (*placed.changes, *_record(template, wclass.name))
    prefix = ".".join(kind.template_path)
    if prefix:
        changes = tuple(c._replace(path=f"{prefix}.{c.path}") for c in changes)
    return Placed(changes=changes, notes=placed.notes)


def _record(template: Obj, class_name: str) -> tuple[Finding, ...]:
    """Write the deterministic decision record, so reinvocation sees its own output unchanged."""
    meta = template.get("metadata")
    if not isinstance(meta, dict):
        meta = template["metadata"] = {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    if annotations.get(PLACEMENT_ANNOTATION) == class_name:
        return ()
    annotations[PLACEMENT_ANNOTATION] = class_name
    return (_recorded(class_name),)


@lru_cache(maxsize=256)
def _recorded(class_name: str) -> Finding:
    path = f"metadata.annotations.{PLACEMENT_ANNOTATION}"
    return finding(Code.PLACEMENT_RECORDED, f"records the class {class_name}", path)


class _Base:
    """The parts of a Decision every path shares."""

    __slots__ = ("kind", "name", "namespace", "obj")

    def __init__(self, obj: Obj, namespace: str | None) -> None:
        self.obj, self.namespace = obj, namespace
        kind = obj.get("kind")
        self.kind = kind if isinstance(kind, str) else ""
        self.name = display_name(obj)

    def skipped(self, skip: Finding) -> Decision:
        return Decision(
            kind=self.kind,
            namespace=self.namespace,
            name=self.name,
            classification=Classification(name=None, source="skipped", detail=skip.message),
            allowed=True,
            mutated=self.obj,
            skip=skip,
        )

    def invalid(self, policy: Policy, refusal: Finding) -> Decision:
        classification = Classification(name=None, source="invalid object")
        return self.finish(policy, classification, (refusal,), [])

    def finish(
        self,
        policy: Policy,
        classification: Classification,
        refusals: tuple[Finding, ...],
        notes: list[Finding],
        placed: Placed | None = None,
        mutated: Obj | None = None,
    ) -> Decision:
        changes = placed.changes if placed is not None else ()
        if refusals and policy.mode is Mode.WARN:
            notes = [*notes, *(_would_be_refused(r) for r in refusals)]
        if changes and self.kind != "Pod":
            notes = [*notes, _template_summary(self.kind, changes)]
        return Decision(
            kind=self.kind,
            namespace=self.namespace,
            name=self.name,
            classification=classification,
            allowed=not refusals or policy.mode is Mode.WARN,
            mutated=mutated if mutated is not None else self.obj,
            refusals=refusals,
            notes=tuple(notes),
            changes=changes,
        )


def _would_be_refused(refusal: Finding) -> Finding:
    message = f"would be refused in enforce mode: {refusal.message}"
    return finding(Code.WOULD_BE_REFUSED, message, refusal.path)


def _template_summary(kind: str, changes: tuple[Finding, ...]) -> Finding:
    what = "; ".join(c.summary or c.message for c in changes)
    return finding(Code.TEMPLATE_SUMMARY, f"pods of this {kind} will get: {what}")
