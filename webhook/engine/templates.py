"""One pod template (or pod) judged: classified, checked, and placed on the copy.

``evaluation`` calls these for a pod and for every template of a workload; the template's
findings have paths relative to the template, made the object's by ``evaluation``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final, final

from webhook.engine import hints
from webhook.engine.classify import PodFacts, classify
from webhook.engine.constraints import NodeConstraints
from webhook.engine.decision import Classification, Context, Obj
from webhook.engine.findings import Code, Effects, Finding, finding
from webhook.engine.grace import GraceBudget, grace_budget
from webhook.engine.origins import NONE, Origins
from webhook.engine.placement import PREFERRED, REQUIRED, check, place
from webhook.engine.podshape import shape_problem
from webhook.engine.policy import Policy, WorkloadClass
from webhook.engine.scheduling import (
    PriorityLookup,
    SchedulingPlan,
    plan_scheduling,
    reserved_class,
    schedule,
)
from webhook.engine.workloads import mapping_at, value_at

PLACEMENT_ANNOTATION = "together.ai/placement"


@final
class Judged:
    """What a template is, whether it may be placed, and (when it may) how: ``plan`` is set
    when the template is classified and nothing is refused."""

    __slots__ = ("classification", "notes", "plan", "refusals")

    def __init__(
        self,
        *,
        classification: Classification,
        refusals: tuple[Finding, ...] = (),
        notes: tuple[Finding, ...] = (),
        plan: Plan | None = None,
    ) -> None:
        self.classification: Final = classification
        self.refusals: Final = refusals
        self.notes: Final = notes
        self.plan: Final = plan

    def noting(self, *notes: Finding) -> Judged:
        """The same judgement, with ``notes`` added."""
        return Judged(
            classification=self.classification,
            refusals=self.refusals,
            notes=(*self.notes, *notes),
            plan=self.plan,
        )

    def refusing(self, *refusals: Finding) -> Judged:
        """The same judgement, with ``refusals`` added: nothing is placed then."""
        return Judged(
            classification=self.classification,
            refusals=(*self.refusals, *refusals),
            notes=self.notes,
        )


@final
class Plan:
    """How a template judged placeable is placed."""

    __slots__ = ("budget", "node", "priority_classes", "scheduling", "wclass")

    def __init__(
        self,
        *,
        wclass: WorkloadClass,
        node: NodeConstraints,
        budget: GraceBudget,
        scheduling: SchedulingPlan,
        priority_classes: PriorityLookup | None,
    ) -> None:
        self.wclass: Final = wclass
        self.node: Final = node
        self.budget: Final = budget
        self.scheduling: Final = scheduling
        self.priority_classes: Final = priority_classes


def judge_template(
    template: Obj,
    facts: PodFacts,
    policy: Policy,
    *,
    where: str,
    location: str,
    priority_classes: PriorityLookup | None,
) -> Judged:
    """Classify and check one template (or pod): ``where`` names it in warnings (``the pod``,
    ``the pod template``), ``location`` is its path in the object (``""`` for a pod)."""
    problem = shape_problem(template, location)
    if problem is not None:
        return Judged(
            classification=Classification(name=None, source="invalid object"), refusals=(problem,)
        )
    notes = [
        *hints.pod_annotation_hints(facts.annotations, where),
        *hints.pod_label_hints(facts.labels, where),
    ]
    verdict = classify(facts, policy)
    notes += verdict.notes
    name = verdict.classification.name
    found = reserved_class(
        template.get("spec"), facts.namespace, policy.reserved_priority_classes, location
    )
    reserved = (found,) if found is not None else ()
    if name is None or verdict.refusals:
        refusals = (*verdict.refusals, *reserved)
        return Judged(classification=verdict.classification, refusals=refusals, notes=tuple(notes))
    wclass = policy.classes[name]
    budget = grace_budget(facts.annotations, policy)
    checked = check(_spec(template), wclass, policy, budget)
    scheduling, missing = plan_scheduling(wclass, priority_classes)
    refusals = (*checked.refusals, *((missing,) if missing is not None else ()), *reserved)
    if refusals or scheduling is None:
        return Judged(classification=verdict.classification, refusals=refusals, notes=tuple(notes))
    plan = Plan(
        wclass=wclass,
        node=checked.node,
        budget=budget,
        scheduling=scheduling,
        priority_classes=priority_classes,
    )
    return Judged(classification=verdict.classification, notes=tuple(notes), plan=plan)


def _spec(template: Obj) -> Obj:
    """The template's spec; ``{}`` for a partial template that leaves it out (a patch laid
    over a template its operator keeps may hold only metadata): nothing there to check, and
    partial templates are never placed. A pod or full template without one was refused
    before it got here, and the shape check leaves only a mapping or null."""
    spec = template.get("spec")
    return spec if isinstance(spec, dict) else {}


def place_template(template: Obj, plan: Plan, policy: Policy, *, is_pod: bool) -> Effects:
    """Apply ``plan`` to ``template`` (in the copy), with the decision record."""
    placed = place(template, plan.node, plan.wclass, policy, plan.budget)
    scheduled = schedule(
        template["spec"], plan.wclass, plan.scheduling, plan.priority_classes, is_pod=is_pod
    )
    return Effects(
        changes=(*placed.changes, *scheduled.changes, *_record(template, plan.wclass.name)),
        notes=(*placed.notes, *scheduled.notes),
    )


def facts_of(
    template: Obj,
    ctx: Context,
    namespace: str | None,
    *,
    owner_kind: str | None,
    origins: Origins = NONE,
) -> PodFacts:
    """What classifies ``template``; ``origins``: the roles and defaults of the templates it
    is, or comes from (see ``webhook.engine.origins``)."""
    # Classification runs after the shape check, which makes sure these hold strings.
    meta = mapping_at(template, "metadata")
    return PodFacts(
        annotations=mapping_at(meta, "annotations"),
        labels=mapping_at(meta, "labels"),
        namespace=namespace,
        owner_kind=owner_kind,
        namespace_annotations=ctx.namespace_annotations,
        origins=origins,
    )


# The containers placement writes into, within a template: a mapping lists the keys to
# descend into, a one-item list the shape of every item, an empty list or mapping a
# container copied on its own.
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


def copy_for_placement(obj: Obj, paths: list[tuple[str | int, ...]]) -> Obj:
    """A copy of ``obj`` whose templates at ``paths`` can be changed without touching ``obj``.

    Only the containers on the way to each template and those placement writes into are
    copied, each shallowly and once; everything else (managedFields, containers, every
    expression and toleration) is shared with the original. So the copy costs what those
    containers hold, never the depth of the object, and the patch that follows finds the
    changes by identity.
    """
    mutated = dict(obj)
    for parts in paths:
        node: Any = mutated
        for part in parts:
            child = node[part]
            node[part] = dict(child) if isinstance(child, dict) else list(child)
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


def template_at(obj: Obj, parts: tuple[str | int, ...]) -> Obj:
    node = value_at(obj, parts)
    assert isinstance(node, dict)  # found in the original; the copy has the same shape
    return node


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
