"""The placement engine: one object and its context in, one Decision out. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from typing import Any

from webhook.engine import hints
from webhook.engine.classify import WORKLOAD_ANNOTATION, PodFacts, Verdict, classify
from webhook.engine.constraints import NodeConstraints
from webhook.engine.decision import Change, Classification, Context, Decision, Obj, bounded, shorten
from webhook.engine.grace import GraceBudget, grace_budget
from webhook.engine.jsoncompare import same_json
from webhook.engine.placement import PREFERRED, REQUIRED, Outcome, check, place
from webhook.engine.podshape import shape_problem
from webhook.engine.policy import Mode, Policy, WorkloadClass
from webhook.engine.trust import exemption
from webhook.engine.workloads import (
    WorkloadKind,
    controller_kind,
    display_name,
    find_pod_templates,
    mapping_at,
    string_map,
    template_of,
    workload_kind,
)

PLACEMENT_ANNOTATION = "together.ai/placement"


def evaluate(obj: Obj, policy: Policy, ctx: Context) -> Decision:
    """Classify ``obj``, apply its class's placement to a copy, and say whether it is allowed."""
    kind = workload_kind(obj)
    namespace = ctx.namespace or _str(mapping_at(obj, "metadata").get("namespace"))
    base = _Base(obj, namespace)
    reason = _skip_reason(obj, kind, namespace, policy, ctx)
    if reason is not None or kind is None:
        return base.skipped(reason or "not a workload")
    notes: list[str] = []
    if kind.is_pod:
        exempt = exemption(obj, ctx, policy.trusted)
        if exempt.reason is not None:
            return base.skipped(exempt.reason)
        notes += exempt.warnings
    template = template_of(obj, kind)
    if template is None or not isinstance(template.get("spec"), dict):
        where = ".".join((*kind.template_path, "spec"))
        return base.refused(
            policy, f"{kind.kind} has no {where} mapping: it cannot be placed; add it"
        )
    problem = shape_problem(template, kind.template_path)
    if problem is not None:
        return base.refused(policy, problem)
    facts = _facts(obj, template, kind, namespace, ctx)
    notes += _hints(obj, template, kind, ctx)
    verdict = classify(facts, policy)
    verdict = dataclasses.replace(verdict, warnings=(*notes, *verdict.warnings))
    if verdict.classification.name is None or verdict.violations:
        return base.finish(policy, verdict, Outcome(violations=list(verdict.violations)), obj)
    wclass = policy.classes[verdict.classification.name]
    budget = grace_budget(facts.annotations, policy)
    checked = check(template["spec"], wclass, policy, budget)
    if checked.violations:
        return base.finish(policy, verdict, Outcome(violations=list(checked.violations)), obj)
    mutated = copy_for_placement(obj, kind)
    outcome = _place(mutated, kind, checked.node, wclass, policy, budget)
    return base.finish(policy, verdict, outcome, mutated)


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


def _skip_reason(
    obj: Obj, kind: WorkloadKind | None, namespace: str | None, policy: Policy, ctx: Context
) -> str | None:
    if kind is None:
        return _not_a_workload(obj)
    if namespace in policy.excluded_namespaces:
        return f"namespace {shorten(namespace or '')} is excluded by the policy"
    if kind.kind == "DaemonSet":
        return "DaemonSets run one pod on every node, of both classes"
    if ctx.operation not in ("CREATE", "UPDATE"):
        return f"{ctx.operation} is not checked"
    if kind.is_pod and ctx.operation == "UPDATE":
        return "pods are placed when created; the API server forbids changing placement later"
    if not kind.is_pod and ctx.operation == "UPDATE":
        return _workload_update_skip_reason(obj, kind, ctx)
    return None


def _not_a_workload(obj: Obj) -> str:
    raw = obj.get("kind")
    kind = shorten(raw if isinstance(raw, str) else str(raw))
    templates = find_pod_templates(obj)
    if not templates:
        return f"kind {kind!r} holds no pods"
    where = ", ".join(templates)
    return (
        f"kind {kind!r} is not checked at apply time, but it carries pod templates "
        f"({shorten(where, 200)}): its pods are checked by the webhook when they are created"
    )


def _workload_update_skip_reason(obj: Obj, kind: WorkloadKind, ctx: Context) -> str | None:
    # Controllers and the garbage collector update workloads all the time (replicas, status,
    # finalizers); refusing those would leave a workload admitted earlier stuck.
    if mapping_at(obj, "metadata").get("deletionTimestamp"):
        return "the object is being deleted"
    if ctx.old_object is not None and same_json(
        template_of(obj, kind), template_of(ctx.old_object, kind)
    ):
        return "the pod template did not change"
    return None


def _facts(
    obj: Obj, template: Obj, kind: WorkloadKind, namespace: str | None, ctx: Context
) -> PodFacts:
    meta = mapping_at(template, "metadata")
    return PodFacts(
        annotations=string_map(meta.get("annotations")),
        labels=string_map(meta.get("labels")),
        namespace=namespace,
        owner_kind=kind.pod_owner_kind if not kind.is_pod else controller_kind(obj),
        namespace_annotations=ctx.namespace_annotations,
    )


def _hints(obj: Obj, template: Obj, kind: WorkloadKind, ctx: Context) -> list[str]:
    """Warnings for annotations that are misspelt, written as labels, or out of reach."""
    meta = mapping_at(template, "metadata")
    where = "the pod" if kind.is_pod else "the pod template"
    return [
        *_misplaced_annotations(obj, kind),
        *hints.pod_annotation_hints(mapping_at(meta, "annotations"), where),
        *hints.pod_label_hints(mapping_at(meta, "labels"), where),
        *hints.namespace_hints(ctx.namespace, ctx.namespace_annotations, ctx.namespace_labels),
    ]


def _misplaced_annotations(obj: Obj, kind: WorkloadKind) -> list[str]:
    """The class annotation on metadata between a workload and its pod template (the
    workload's own, a CronJob's job template): its pods never see it."""
    found: list[str] = []
    node: Any = obj
    path: list[str] = []
    for part in kind.template_path:
        if WORKLOAD_ANNOTATION in mapping_at(node, "metadata", "annotations"):
            here = ".".join([*path, "metadata"]) if path else f"the {kind.kind}'s own metadata"
            found.append(here)
        node = node.get(part) if isinstance(node, dict) else None
        path.append(part)
    target = ".".join((*kind.template_path, "metadata", "annotations"))
    return [
        f"{WORKLOAD_ANNOTATION} on {here} does not reach its pods and is ignored: "
        f"put it in {target}"
        for here in found
    ]


def _place(
    mutated: Obj,
    kind: WorkloadKind,
    node: NodeConstraints,
    wclass: WorkloadClass,
    policy: Policy,
    budget: GraceBudget,
) -> Outcome:
    template = template_of(mutated, kind)
    assert template is not None  # checked on the original, and the copy is equal
    outcome = place(template, node, wclass, policy, budget)
    _record(template, wclass.name, outcome)
    prefix = ".".join(kind.template_path)
    if prefix:
        outcome.changes = [Change(f"{prefix}.{c.field}", c.reason) for c in outcome.changes]
    return outcome


def _record(template: Obj, class_name: str, outcome: Outcome) -> None:
    """Write the deterministic decision record, so reinvocation sees its own output unchanged."""
    meta = template.get("metadata")
    if not isinstance(meta, dict):
        meta = template["metadata"] = {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    if annotations.get(PLACEMENT_ANNOTATION) != class_name:
        annotations[PLACEMENT_ANNOTATION] = class_name
        outcome.changes.append(
            Change(
                f"metadata.annotations.{PLACEMENT_ANNOTATION}", f"records the class {class_name}"
            )
        )


class _Base:
    """The parts of a Decision every path shares."""

    def __init__(self, obj: Obj, namespace: str | None) -> None:
        self.obj, self.namespace = obj, namespace
        kind = obj.get("kind")
        self.kind = kind if isinstance(kind, str) else ""
        self.name = display_name(obj)

    def skipped(self, reason: str) -> Decision:
        return Decision(
            self.kind,
            self.namespace,
            self.name,
            Classification(None, "skipped", reason),
            True,
            (),
            (),
            (),
            self.obj,
            skipped=bounded(reason),
        )

    def refused(self, policy: Policy, violation: str) -> Decision:
        verdict = Verdict(Classification(None, "invalid object"))
        return self.finish(policy, verdict, Outcome(violations=[violation]), self.obj)

    def finish(self, policy: Policy, verdict: Verdict, outcome: Outcome, mutated: Obj) -> Decision:
        violations = tuple(bounded(v) for v in outcome.violations)
        warnings = [*verdict.warnings, *outcome.warnings]
        if violations and policy.mode is Mode.WARN:
            warnings += [f"would be refused in enforce mode: {v}" for v in violations]
        if not violations and outcome.changes and self.kind != "Pod":
            warnings.append(_template_summary(self.kind, outcome.changes))
        return Decision(
            kind=self.kind,
            namespace=self.namespace,
            name=self.name,
            classification=verdict.classification,
            allowed=not violations or policy.mode is Mode.WARN,
            violations=violations,
            warnings=tuple(bounded(w) for w in warnings),
            changes=tuple(outcome.changes) if not violations else (),
            mutated=mutated,
        )


def _template_summary(kind: str, changes: list[Change]) -> str:
    what = "; ".join(c.reason.split(":")[0] for c in changes)
    return f"pods of this {kind} will get: {what}"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
