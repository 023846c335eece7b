"""The placement engine: one object and its context in, one Decision out. Pure: no I/O.

A pod is judged as itself. A workload (any kind the policy lists, by API group and kind) is
judged template by template: each of its pod templates is classified and checked on its own,
and placed on one copy of the object, which the patch is then computed against.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from webhook.engine import hints, jobs, origins
from webhook.engine.classify import WORKLOAD_ANNOTATION, PodFacts, classify
from webhook.engine.decision import Classification, Context, Decision, Obj, Part
from webhook.engine.findings import Code, Effects, Finding, bounded, finding, shorten
from webhook.engine.jsoncompare import same_json
from webhook.engine.patch import pointer
from webhook.engine.podupdate import judge_update, update_skip
from webhook.engine.policy import (
    EVERY_ITEM,
    EVERY_VALUE,
    FirstPod,
    Mode,
    Policy,
    WorkloadKind,
    dotted,
)
from webhook.engine.templates import (
    PLACEMENT_ANNOTATION,
    Judged,
    copy_for_placement,
    facts_of,
    judge_template,
    place_template,
    template_at,
)
from webhook.engine.trust import exemption
from webhook.engine.workloads import (
    BUILTIN_KINDS,
    Kinds,
    Template,
    api_group,
    display_name,
    find_pod_templates,
    is_pod,
    mapping_at,
    templates_of,
    value_at,
    workload_kind,
)

__all__ = [
    "PLACEMENT_ANNOTATION",
    "evaluate",
    "kinds_of",
    "namespace_of",
]


def evaluate(obj: Obj, policy: Policy, ctx: Context) -> Decision:
    """Classify ``obj``, apply its class's placement to a copy, and say whether it is allowed."""
    namespace = namespace_of(obj, ctx)
    base = _Base(obj, namespace)
    pod = is_pod(obj)
    kind = None if pod else workload_kind(obj, kinds_of(policy))
    skip = _untouched(obj, policy, ctx, kind, namespace, pod=pod)
    if skip is not None:
        if kind is None or not _judges_templates(skip, ctx.operation):
            return base.skipped(skip, ())
        ctx = _with_namespace(ctx, namespace)
        return base.skipped(skip, _left_alone(obj, kind, policy, ctx, namespace))
    ctx = _with_namespace(ctx, namespace)
    if kind is None and ctx.operation == "UPDATE" and ctx.old_object is not None:
        return _pod_update(obj, ctx.old_object, policy, ctx, base)
    if kind is None:
        return _pod(obj, policy, ctx, base)
    return _workload(obj, kind, policy, ctx, base)


def kinds_of(policy: Policy) -> Mapping[tuple[str, str], WorkloadKind]:
    """The workload kinds of ``policy``: those it lists, or the built-in ones."""
    return policy.workload_kinds or BUILTIN_KINDS


def _with_namespace(ctx: Context, namespace: str | None) -> Context:
    """``ctx`` with what its ``namespaces`` lookup says of ``namespace``: asked here, once,
    after the rules that need nothing but the request, so that an object left alone costs
    no lookup."""
    if ctx.namespaces is None or namespace is None:
        return ctx
    meta = ctx.namespaces(namespace)
    return Context(
        operation=ctx.operation,
        namespace=ctx.namespace,
        namespace_annotations=meta.annotations,
        namespace_labels=meta.labels,
        old_object=ctx.old_object,
        requester=ctx.requester,
        priority_classes=ctx.priority_classes,
        job_api=ctx.job_api,
    )


def namespace_of(obj: Obj, ctx: Context) -> str | None:
    """The request's namespace, else the object's own."""
    own = mapping_at(obj, "metadata").get("namespace")
    return ctx.namespace or (own if isinstance(own, str) else None)


def _untouched(
    obj: Obj,
    policy: Policy,
    ctx: Context,
    kind: WorkloadKind | None,
    namespace: str | None,
    *,
    pod: bool,
) -> Finding | None:
    if not pod and kind is None:
        return _not_a_workload(obj)
    if namespace in policy.excluded_namespaces:
        message = f"namespace {shorten(namespace or '')} is excluded by the policy"
        return finding(Code.EXCLUDED_NAMESPACE, message)
    if kind is not None and kind.ignore is not None:
        code = Code.DAEMONSET if kind.kind == "DaemonSet" else Code.IGNORED_KIND
        return finding(code, kind.ignore)
    if ctx.operation not in ("CREATE", "UPDATE"):
        return finding(Code.OPERATION_NOT_CHECKED, f"{ctx.operation} is not checked")
    if pod and ctx.operation == "UPDATE":
        return update_skip(obj, ctx.old_object)
    if kind is not None and ctx.operation == "UPDATE":
        return _workload_update_skip(obj, kind, kinds_of(policy), ctx)
    return None


def _judges_templates(skip: Finding, operation: str) -> bool:
    """Whether the templates of an object left alone for ``skip`` are still judged: those of
    a kind the policy leaves alone (DaemonSets), created or updated, for the warning that
    nothing keeps their pods off preemptible nodes. Their class may be their namespace's
    default, so whoever judges them must give the namespace too."""
    # Those codes come from kind.ignore alone (see _untouched).
    return skip.code in _IGNORED_KIND and operation in ("CREATE", "UPDATE")


_IGNORED_KIND = frozenset({Code.DAEMONSET, Code.IGNORED_KIND})


def _left_alone(
    obj: Obj,
    kind: WorkloadKind,
    policy: Policy,
    ctx: Context,
    namespace: str | None,
) -> tuple[Finding, ...]:
    """Templates of a kind the policy leaves alone (DaemonSets) whose class must stay on
    standard nodes but which require preemptible ones: their pods are not checked either, so
    nothing keeps them off; said as a warning, the object being allowed as the policy says.
    Not for an object left alone for another reason (its namespace is excluded)."""
    found, _ = templates_of(obj, kind, kinds_of(policy))
    notes = []
    for t in found:
        if t.spec.partial or not isinstance(t.template.get("spec"), dict):
            continue
        for refusal in _judge(obj, t, kind, policy, ctx, namespace).refusals:
            if refusal.code is Code.REQUIRES_PREEMPTIBLE:
                message = (
                    f"{kind.kind} pods are left alone ({kind.ignore}), so nothing keeps these "
                    f"off preemptible nodes: {t.where}: {refusal.message}"
                )
                notes.append(finding(Code.LEFT_ALONE_ON_PREEMPTIBLE, message, t.where))
    return tuple(notes)


def _not_a_workload(obj: Obj) -> Finding:
    raw = obj.get("kind")
    kind = shorten(raw if isinstance(raw, str) else str(raw))
    templates = find_pod_templates(obj)
    if not templates:
        return finding(Code.NOT_A_WORKLOAD, f"kind {kind!r} holds no pods")
    where = ", ".join(templates)
    group = api_group(obj) or ""
    # Concrete indexes become [*]: the entry must find every item's template.
    general = dict.fromkeys(re.sub(r"\[\d+\]", EVERY_ITEM, p) for p in templates)
    paths = ", ".join(f"{{path: {p}}}" for p in general)
    entry = f"{{group: {json.dumps(group)}, kind: {kind}, templates: [{paths}]}}"
    message = (
        f"kind {kind!r} ({shorten(str(obj.get('apiVersion')))}) is not checked at apply time, "
        f"but it carries pod templates ({shorten(where, 200)}): its pods are checked by the "
        "webhook when they are created; to check it at apply time, list it under "
        f"spec.workloadKinds in the policy: {shorten(entry, 300)}"
    )
    return finding(Code.UNCHECKED_KIND, message)


def _workload_update_skip(
    obj: Obj, kind: WorkloadKind, kinds: Kinds, ctx: Context
) -> Finding | None:
    # Controllers and the garbage collector update workloads all the time (replicas, status,
    # finalizers); refusing those would leave a workload admitted earlier stuck.
    if mapping_at(obj, "metadata").get("deletionTimestamp"):
        return finding(Code.BEING_DELETED, "the object is being deleted")
    if ctx.old_object is not None and _same_templates(obj, ctx.old_object, kind, kinds):
        return finding(Code.TEMPLATE_UNCHANGED, "the pod template did not change")
    return None


def _same_templates(obj: Obj, old: Obj, kind: WorkloadKind, kinds: Kinds) -> bool:
    now, _ = templates_of(obj, kind, kinds)
    before, _ = templates_of(old, kind, kinds)
    return [t.parts for t in now] == [t.parts for t in before] and all(
        same_json(a.template, b.template) for a, b in zip(now, before, strict=True)
    )


def _pod(pod: Obj, policy: Policy, ctx: Context, base: _Base) -> Decision:
    exempt = exemption(pod, ctx, policy.trusted)
    if exempt.skip is not None:
        return base.skipped(exempt.skip)
    if not isinstance(pod.get("spec"), dict):
        message = "Pod has no spec mapping: it cannot be placed; add it"
        return base.invalid(policy, finding(Code.NO_POD_SPEC, message, "spec"))
    owner = exempt.owner.kind if exempt.owner is not None else None
    facts = facts_of(
        pod, ctx, base.namespace, owner_kind=owner, origins=origins.of_pod(pod, policy)
    )
    judged = judge_template(
        pod,
        facts,
        policy,
        where="the pod",
        location="",
        priority_classes=ctx.priority_classes,
    )
    notes = [*exempt.notes, *_namespace_hints(ctx), *judged.notes]
    if judged.plan is None:
        return base.finish(policy, judged.classification, judged.refusals, notes)
    mutated = copy_for_placement(pod, [()])
    placed = place_template(mutated, judged.plan, policy, is_pod=True)
    return base.finish(
        policy,
        judged.classification,
        (),
        [*notes, *placed.notes],
        changes=placed.changes,
        mutated=mutated,
    )


def _pod_update(pod: Obj, old: Obj, policy: Policy, ctx: Context, base: _Base) -> Decision:
    """An update that changes what classifies the pod (see ``podupdate``): never mutated."""
    verdict = judge_update(pod, old, policy, ctx, base.namespace)
    if verdict.refusal is None:
        message = "pods are placed when created; this update leaves the pod where its class may run"
        return base.skipped(finding(Code.POD_UPDATE, message))
    return base.finish(policy, verdict.classification, (verdict.refusal,), [])


def _workload(obj: Obj, kind: WorkloadKind, policy: Policy, ctx: Context, base: _Base) -> Decision:
    found, missing = templates_of(obj, kind, kinds_of(policy))
    lacking = missing[0] if missing else _without_spec(found)
    if lacking is not None:
        where = f"{lacking}.spec"
        message = f"{kind.kind} has no {where} mapping: it cannot be placed; add it"
        return base.invalid(policy, finding(Code.NO_POD_SPEC, message, where))
    several = len(kind.templates) > 1 or any(
        EVERY_ITEM in s.path or EVERY_VALUE in s.path for s in kind.templates
    )
    judged = [(t, _judge(obj, t, kind, policy, ctx, base.namespace)) for t in found]
    placeable = (
        []
        if _refused(judged)
        else [t for t, j in judged if j.plan is not None and not t.spec.partial]
    )
    stored, retried = _retries(obj, kind, [(t, j) for t, j in judged if t in placeable], ctx)
    mutated = copy_for_placement(stored, [t.parts for t in placeable]) if placeable else stored
    parts = []
    for t, j in judged:
        placed = None
        if t in placeable:
            assert j.plan is not None
            placed = place_template(template_at(mutated, t.parts), j.plan, policy, is_pod=False)
        parts.append(_part(t, j, placed, labelled=several))
    notes = [*_misplaced_annotations(obj, kind, ctx), *retried.notes]
    return base.finish_parts(
        policy, kind, tuple(parts), mutated, notes, several=several, stored=stored, own=retried
    )


def _retries(
    obj: Obj, kind: WorkloadKind, placeable: list[tuple[Template, Judged]], ctx: Context
) -> tuple[Obj, Effects]:
    """The object with the Job specs of its preemptible templates given the rule that ignores
    reclaims (``webhook.engine.jobs``), on CREATE only: a Job's podFailurePolicy cannot change
    later. The object itself when none gets anything."""
    found = [
        (t, j)
        for t, j in placeable
        if t.spec.pod_failure_policy
        and t.parts[-1:] == ("template",)
        and j.plan is not None
        and j.plan.wclass.placement.may_be_preempted
    ]
    if ctx.operation != "CREATE" or not found:
        return obj, Effects()
    stored = jobs.copy_along(obj, [t.parts[:-1] for t, _ in found])
    changes: list[Finding] = []
    notes: list[Finding] = []
    for t, _ in found:
        spec = template_at(stored, t.parts[:-1])
        at = jobs.JobSpecAt(
            spec,
            mapping_at(t.template, "spec"),
            own=(kind.group, kind.kind) == ("batch", "Job") and t.parts == ("spec", "template"),
            where=dotted(t.parts[:-1]),
        )
        effects = jobs.retries(at, ctx.job_api)
        changes += effects.changes
        notes += effects.notes
    return (stored if changes else obj), Effects(changes=tuple(changes), notes=tuple(notes))


def _without_spec(found: list[Template]) -> str | None:
    for t in found:
        if not t.spec.partial and not isinstance(t.template.get("spec"), dict):
            return t.where
    return None


def _refused(judged: list[tuple[Template, Judged]]) -> bool:
    # One template refused refuses the object: nothing is placed then.
    return any(j.refusals for _, j in judged)


def _judge(
    obj: Obj,
    t: Template,
    kind: WorkloadKind,
    policy: Policy,
    ctx: Context,
    namespace: str | None,
) -> Judged:
    facts = facts_of(
        t.template,
        ctx,
        namespace,
        owner_kind=t.owner_kind,
        origins=origins.of_template(t.spec),
    )
    judged = _judge_as(t, facts, policy, ctx)
    if t.spec.first_pod is not None and _leads(obj, t.spec.first_pod):
        judged = _with_first_pod(t, t.spec.first_pod, facts, judged, kind, policy, ctx)
    if t.spec.pods is not None or facts.origins == origins.NONE or judged.plan is None:
        return judged
    return judged.noting(*_not_inherited(facts, judged, kind, policy))


def _judge_as(t: Template, facts: PodFacts, policy: Policy, ctx: Context) -> Judged:
    return judge_template(
        t.template,
        facts,
        policy,
        where="the pod template",
        location=t.where,
        priority_classes=ctx.priority_classes,
    )


def _leads(obj: Obj, first: FirstPod) -> bool:
    """Whether the first pod made from the template plays ``first.role``: no other template
    that would is in the object (named, even as null: the operator looks for the key)."""
    return not any(_named(obj, parts) for parts in first.unless)


def _named(obj: Obj, parts: tuple[str, ...]) -> bool:
    parent = value_at(obj, parts[:-1])
    return isinstance(parent, dict) and parts[-1] in parent


def _with_first_pod(
    t: Template,
    first: FirstPod,
    facts: PodFacts,
    judged: Judged,
    kind: WorkloadKind,
    policy: Policy,
    ctx: Context,
) -> Judged:
    """The template judged as its first pod too, which its operator makes the job's
    ``first.role``: refused if that pod would be, said when it gets another class."""
    lead = _judge_as(
        t, facts.with_origins(origins.with_role(facts.origins, first.role)), policy, ctx
    )
    name = lead.classification.name
    if name == judged.classification.name:
        return judged  # judged alike: the same refusals, or none
    absent = " or ".join(dotted(p) for p in first.unless)
    why = f"the {kind.kind} operator makes the first pod of this template the {first.role}"
    why += f" (the {kind.kind} has no {absent})" if absent else ""
    source = lead.classification.source
    if lead.refusals:
        refusals = tuple(
            r._replace(message=bounded(f"{why}, so it is {name} ({source}): {r.message}"))
            for r in lead.refusals
        )
        return judged.refusing(*refusals)
    message = (
        f"{why}: that pod will be {name} ({source}) and placed as such, the others "
        f"{judged.classification.name or 'unclassified'}"
    )
    return judged.noting(finding(Code.FIRST_POD_CLASS, message))


def _not_inherited(
    facts: PodFacts, judged: Judged, kind: WorkloadKind, policy: Policy
) -> tuple[Finding, ...]:
    """The template's class, when its pods would not get it: it comes from the template's role
    or default, which its pods do not carry, and its kind names no labels to know them by."""
    name = judged.classification.name
    alone = classify(facts.with_origins(origins.NONE), policy).classification.name
    if alone == name:
        return ()
    message = (
        f"the pods of this template get the class {name} from its role or its kind's default, "
        f"which they do not carry: created, they will be {alone or 'unclassified'}; annotate "
        f"the template {WORKLOAD_ANNOTATION}: {name}, or give the {kind.name} entry of the "
        "policy a podSelector"
    )
    return (
        finding(Code.CLASS_NOT_INHERITED, message, f"metadata.annotations.{WORKLOAD_ANNOTATION}"),
    )


def _part(t: Template, judged: Judged, placed: Effects | None, *, labelled: bool) -> Part:
    """The template's findings with the object's paths; their messages name the template
    when the kind has several."""

    def rooted(f: Finding) -> Finding:
        path = f"{t.where}.{f.path}" if f.path else t.where
        message = f"{t.where}: {f.message}" if labelled else f.message
        return f._replace(path=path, message=message)

    changes = (
        tuple(c._replace(path=f"{t.where}.{c.path}") for c in placed.changes) if placed else ()
    )
    notes = (*judged.notes, *(placed.notes if placed else ()))
    return Part(
        path=t.where,
        pointer=pointer(t.parts),
        role=t.spec.role,
        classification=judged.classification,
        refusals=tuple(rooted(f) for f in judged.refusals),
        notes=tuple(rooted(f) for f in notes),
        changes=changes,
    )


def _namespace_hints(ctx: Context) -> list[Finding]:
    if not ctx.namespace_annotations and not ctx.namespace_labels:
        return []
    return hints.namespace_hints(ctx.namespace, ctx.namespace_annotations, ctx.namespace_labels)


def _misplaced_annotations(obj: Obj, kind: WorkloadKind, ctx: Context) -> list[Finding]:
    """The class annotation on metadata between a workload and its pod templates (the
    workload's own, a CronJob's job template): its pods never see it. And the hints about the
    namespace, once for the object."""
    found: list[Finding] = []
    seen: set[str] = set()
    for spec in kind.templates:
        node: Any = obj
        path: list[str] = []
        target = ".".join((*spec.path, "metadata", "annotations"))
        for part in spec.path:
            here = ".".join([*path, "metadata"]) if path else f"the {kind.kind}'s own metadata"
            if here not in seen and WORKLOAD_ANNOTATION in mapping_at(
                node, "metadata", "annotations"
            ):
                seen.add(here)
                message = (
                    f"{WORKLOAD_ANNOTATION} on {here} does not reach its pods and is ignored: "
                    f"put it in {target}"
                )
                where = ".".join([*path, "metadata", "annotations", WORKLOAD_ANNOTATION])
                found.append(finding(Code.ANNOTATION_OUT_OF_REACH, message, where))
            node = node.get(part) if isinstance(node, dict) else None
            path.append(part)
    return [*found, *_namespace_hints(ctx)]


_UNLISTED = "its kind carries pod templates but is not listed in the policy's workloadKinds"


class _Base:
    """The parts of a Decision every path shares."""

    __slots__ = ("kind", "name", "namespace", "obj")

    def __init__(self, obj: Obj, namespace: str | None) -> None:
        self.obj, self.namespace = obj, namespace
        kind = obj.get("kind")
        self.kind = kind if isinstance(kind, str) else ""
        self.name = display_name(obj)

    def skipped(self, skip: Finding, notes: tuple[Finding, ...] = ()) -> Decision:
        if skip.code is Code.UNCHECKED_KIND:
            # Pod templates nobody checks at apply time: a warning, with the entry to add.
            notes, skip = (*notes, skip), skip._replace(message=_UNLISTED)
        return Decision(
            kind=self.kind,
            namespace=self.namespace,
            name=self.name,
            classification=Classification(name=None, source="skipped", detail=skip.message),
            allowed=True,
            mutated=self.obj,
            skip=skip,
            notes=notes,
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
        *,
        changes: tuple[Finding, ...] = (),
        mutated: Obj | None = None,
        parts: tuple[Part, ...] = (),
        stored: Obj | None = None,
    ) -> Decision:
        if refusals and policy.mode is Mode.WARN:
            notes = [*notes, *(_would_be_refused(r) for r in refusals)]
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
            parts=parts,
            stored=stored,
        )

    def finish_parts(
        self,
        policy: Policy,
        kind: WorkloadKind,
        parts: tuple[Part, ...],
        mutated: Obj,
        notes: list[Finding],
        *,
        several: bool,
        stored: Obj,
        own: Effects,
    ) -> Decision:
        refusals = tuple(f for p in parts for f in p.refusals)
        changes = (*own.changes, *(c for p in parts for c in p.changes))
        notes = [*notes, *(f for p in parts for f in p.notes)]
        notes += [_template_summary(kind.kind, p, several) for p in parts if p.changes]
        return self.finish(
            policy,
            _strictest(parts, policy),
            refusals,
            notes,
            changes=changes,
            mutated=mutated,
            parts=parts,
            stored=stored,
        )


def _strictest(parts: tuple[Part, ...], policy: Policy) -> Classification:
    """The object's class, for what shows one class per object: its strictest template's."""
    classified = [p.classification for p in parts if p.classification.name in policy.classes]
    if not classified:
        return (
            parts[0].classification if parts else Classification(name=None, source="unclassified")
        )
    return max(classified, key=lambda c: policy.classes[c.name or ""].placement.strictness)


def _would_be_refused(refusal: Finding) -> Finding:
    message = f"would be refused in enforce mode: {refusal.message}"
    return finding(Code.WOULD_BE_REFUSED, message, refusal.path)


def _template_summary(kind: str, part: Part, several: bool) -> Finding:
    what = "; ".join(c.summary or c.message for c in part.changes)
    whose = f"pods of {part.path}" if several else f"pods of this {kind}"
    return finding(Code.TEMPLATE_SUMMARY, f"{whose} will get: {what}", part.path)
