"""The placement engine: one object and its context in, one Decision out. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from typing import Any

from webhook.classify import WORKLOAD_ANNOTATION, PodFacts, Verdict, classify
from webhook.decision import Change, Classification, Context, Decision, Obj, shorten
from webhook.grace import GraceBudget, grace_budget
from webhook.jsoncopy import json_copy
from webhook.placement import Outcome, place
from webhook.podshape import shape_problem
from webhook.policy import Mode, Policy
from webhook.workloads import (
    MIRROR_ANNOTATION,
    WorkloadKind,
    controller_kind,
    display_name,
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
    verdict = _with_misplaced_annotation(classify(facts, policy), obj, kind)
    if verdict.classification.name is None or verdict.violations:
        return base.finish(policy, verdict, Outcome(violations=list(verdict.violations)), obj)
    mutated = copy_for_placement(obj, kind)
    outcome = _place(mutated, kind, verdict, policy, grace_budget(facts.annotations, policy))
    return base.finish(policy, verdict, outcome, obj if outcome.violations else mutated)


def copy_for_placement(obj: Obj, kind: WorkloadKind) -> Obj:
    """A copy of ``obj`` whose pod template can be changed without touching ``obj``.

    The template's spec and metadata are copied deeply; the rest of the object, which the
    engine never writes (managedFields above all), is shared with the original.
    """
    mutated = dict(obj)
    node = mutated
    for part in kind.template_path:
        node[part] = dict(node[part])
        node = node[part]
    node["spec"] = json_copy(node["spec"])
    meta = node.get("metadata")
    if isinstance(meta, dict):
        node["metadata"] = {k: v if k == "managedFields" else json_copy(v) for k, v in meta.items()}
    return mutated


def _skip_reason(
    obj: Obj, kind: WorkloadKind | None, namespace: str | None, policy: Policy, ctx: Context
) -> str | None:
    if kind is None:
        return f"kind {shorten(str(obj.get('kind')))!r} holds no pods"
    if namespace in policy.excluded_namespaces:
        return f"namespace {namespace} is excluded by the policy"
    if kind.kind == "DaemonSet":
        return "DaemonSets run one pod on every node, of both classes"
    if ctx.operation not in ("CREATE", "UPDATE"):
        return f"{ctx.operation} is not checked"
    if kind.is_pod:
        return _pod_skip_reason(obj, ctx)
    if ctx.operation == "UPDATE":
        return _workload_update_skip_reason(obj, kind, ctx)
    return None


def _pod_skip_reason(pod: Obj, ctx: Context) -> str | None:
    if ctx.operation == "UPDATE":
        return "pods are placed when created; the API server forbids changing placement later"
    if MIRROR_ANNOTATION in string_map(mapping_at(pod, "metadata").get("annotations")):
        return "mirror pods of static pods belong to their node"
    if controller_kind(pod) == "DaemonSet":
        return "DaemonSet pods run on every node, of both classes"
    return None


def _workload_update_skip_reason(obj: Obj, kind: WorkloadKind, ctx: Context) -> str | None:
    # Controllers and the garbage collector update workloads all the time (replicas, status,
    # finalizers); refusing those would leave a workload admitted earlier stuck.
    if mapping_at(obj, "metadata").get("deletionTimestamp"):
        return "the object is being deleted"
    if ctx.old_object is not None and template_of(obj, kind) == template_of(ctx.old_object, kind):
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


def _with_misplaced_annotation(verdict: Verdict, obj: Obj, kind: WorkloadKind) -> Verdict:
    """Warn when the class annotation sits on the workload, where its pods never see it."""
    own = string_map(mapping_at(obj, "metadata").get("annotations"))
    if kind.is_pod or WORKLOAD_ANNOTATION not in own:
        return verdict
    where = ".".join((*kind.template_path, "metadata", "annotations"))
    warning = (
        f"{WORKLOAD_ANNOTATION} on the {kind.kind}'s own metadata does not reach its pods and "
        f"is ignored: put it in {where}"
    )
    return dataclasses.replace(verdict, warnings=(*verdict.warnings, warning))


def _place(
    mutated: Obj, kind: WorkloadKind, verdict: Verdict, policy: Policy, budget: GraceBudget
) -> Outcome:
    template = template_of(mutated, kind)
    assert template is not None  # checked on the original, and the copy is equal
    wclass = policy.classes[verdict.classification.name or ""]
    outcome = place(template, wclass, policy, budget)
    if not outcome.violations:
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
            skipped=reason,
        )

    def refused(self, policy: Policy, violation: str) -> Decision:
        verdict = Verdict(Classification(None, "invalid object"))
        return self.finish(policy, verdict, Outcome(violations=[violation]), self.obj)

    def finish(self, policy: Policy, verdict: Verdict, outcome: Outcome, mutated: Obj) -> Decision:
        violations = tuple(outcome.violations)
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
            warnings=tuple(warnings),
            changes=tuple(outcome.changes) if not violations else (),
            mutated=mutated,
        )


def _template_summary(kind: str, changes: list[Change]) -> str:
    what = "; ".join(c.reason.split(":")[0] for c in changes)
    return f"pods of this {kind} will get: {what}"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
