"""What the scheduler is told about a pod of a class: its priority and which scheduler.

Placement says which nodes a pod may use; priority says who wins when capacity is short. A
class's ``priorityClassName`` is where its pods stand:

- for a class placed on preemptible nodes (batch work) it is a ceiling: a pod that names a
  higher class, or one that may preempt, is moved to the class's own, so batch work never
  takes capacity from critical pods and never evicts anything; a pod that names a lower class
  that does not preempt keeps it;
- for a standard class it is a floor: a pod that names a higher class keeps it, a lower one is
  raised (so a critical pod cannot sink below ordinary pods by naming the batch class).

The API server resolves ``priorityClassName`` into ``spec.priority`` and
``spec.preemptionPolicy`` before any webhook runs, and checks them against the class when its
own admission runs again after ours; so a pod gets all three, consistent with the class as the
cluster holds it. A template gets the name only: its pods are resolved when they are created.
The classes come from the request's context (a watch cache in the server, the manifests and
the shipped classes offline): the engine reads nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Final, NamedTuple, final

from webhook.engine.findings import Code, Effects, Finding, change, finding, shorten
from webhook.engine.policy import Placement, WorkloadClass

PREEMPT = "PreemptLowerPriority"
NEVER = "Never"
DEFAULT_SCHEDULER = "default-scheduler"
# A pod that names no class gets the cluster's global default, 0 unless a PriorityClass says
# otherwise; the API server has written it into spec.priority by the time a webhook sees it.
NO_CLASS_PRIORITY = 0


class PriorityClassInfo(NamedTuple):
    """A PriorityClass as the scheduler uses it."""

    name: str
    value: int
    preemption_policy: str = PREEMPT


# A PriorityClass by name; None when it does not exist. Raises
# webhook.errors.PriorityClassUnknown when it cannot be known now.
PriorityLookup = Callable[[str], PriorityClassInfo | None]


def reserved_class(
    spec: object, namespace: str | None, reserved: Mapping[str, tuple[str, ...]], location: str
) -> Finding | None:
    """The refusal of a pod (template) ``spec`` outside its namespaces that names a reserved
    PriorityClass (the webhook's own, say), classified or not: it would run above the
    workloads the class keeps it ahead of, and could preempt them."""
    named = spec.get("priorityClassName") if isinstance(spec, dict) else None
    if not isinstance(named, str) or named not in reserved or namespace in reserved[named]:
        return None
    allowed = ", ".join(reserved[named]) or "no namespace"
    message = (
        f"priorityClassName {shorten(named)!r} is reserved for pods in {allowed}: it runs them "
        "ahead of every workload, preempting others; remove it, or name a class of your own"
    )
    path = f"{location}.spec.priorityClassName" if location else "spec.priorityClassName"
    return finding(Code.RESERVED_PRIORITY_CLASS, message, path)


@final
class SchedulingPlan:
    """The class's priority class as the cluster holds it (None: the class names none)."""

    __slots__ = ("priority",)

    def __init__(self, *, priority: PriorityClassInfo | None) -> None:
        self.priority: Final = priority


def plan_scheduling(
    wclass: WorkloadClass, lookup: PriorityLookup | None
) -> tuple[SchedulingPlan | None, Finding | None]:
    """The plan, or the refusal when the class's priority class does not exist. Without a
    lookup, priorities are left as the pod says."""
    name = wclass.priority_class_name
    if name is None or lookup is None:
        return SchedulingPlan(priority=None), None
    info = lookup(name)
    if info is None:
        message = (
            f"class {wclass.name} gives its pods the priority class {name!r}, which does not "
            "exist in the cluster: create it (preemptguard's manifests ship it) or remove "
            f"priorityClassName from class {wclass.name} in the policy"
        )
        return None, finding(Code.UNKNOWN_PRIORITY_CLASS, message, "spec.priorityClassName")
    return SchedulingPlan(priority=info), None


def schedule(
    spec: dict[str, Any],
    wclass: WorkloadClass,
    plan: SchedulingPlan,
    lookup: PriorityLookup | None,
    *,
    is_pod: bool,
) -> Effects:
    """Set the priority class and scheduler of ``spec`` (in the copy) as the class says."""
    changes: list[Finding] = []
    notes: list[Finding] = []
    if plan.priority is not None and lookup is not None:
        _priority(spec, wclass, plan.priority, lookup, is_pod, changes, notes)
    if wclass.scheduler_name is not None:
        _scheduler(spec, wclass, changes, notes)
    return Effects(changes=tuple(changes), notes=tuple(notes))


def _priority(
    spec: dict[str, Any],
    wclass: WorkloadClass,
    wanted: PriorityClassInfo,
    lookup: PriorityLookup,
    is_pod: bool,
    changes: list[Finding],
    notes: list[Finding],
) -> None:
    named = spec.get("priorityClassName")
    current = _current(spec, named, lookup)
    if named == wanted.name or (current is not None and _keeps(current, wanted, wclass)):
        if is_pod and named == wanted.name:
            _resolve(spec, wanted, changes)
        return
    if current is None and wclass.placement is Placement.STANDARD:
        # Only offline (the API server resolves every class it admits): a class the input does
        # not define may well be above the floor; the cluster will tell.
        notes.append(_not_known(str(named), wanted, wclass))
        return
    if isinstance(named, str) and named:
        notes.append(_replaced(named, current, wanted, wclass))
    spec["priorityClassName"] = wanted.name
    changes.append(_set_class(wanted, is_pod))
    if is_pod or "priority" in spec or "preemptionPolicy" in spec:
        _resolve(spec, wanted, changes)


def _current(spec: dict[str, Any], named: Any, lookup: PriorityLookup) -> PriorityClassInfo | None:
    """Where the pod stands now: as the API server resolved it, else as its named class
    says; None when that cannot be told (offline, a class nobody knows)."""
    priority, policy = spec.get("priority"), spec.get("preemptionPolicy")
    if isinstance(named, str) and named:
        info = lookup(named)
        if type(priority) is int:
            return PriorityClassInfo(named, priority, policy if policy == NEVER else PREEMPT)
        return info
    if type(priority) is int:
        return PriorityClassInfo("", priority, policy if policy == NEVER else PREEMPT)
    return PriorityClassInfo("", NO_CLASS_PRIORITY, PREEMPT)


def _keeps(current: PriorityClassInfo, wanted: PriorityClassInfo, wclass: WorkloadClass) -> bool:
    if wclass.placement is Placement.STANDARD:
        return current.value >= wanted.value
    # Batch work: no higher than its class, and no more able to evict than its class.
    may_preempt = current.preemption_policy != NEVER and wanted.preemption_policy == NEVER
    return bool(current.name) and current.value <= wanted.value and not may_preempt


def _resolve(spec: dict[str, Any], wanted: PriorityClassInfo, changes: list[Finding]) -> None:
    """What the API server derives from the class, written as it would write it."""
    if spec.get("priority") != wanted.value or type(spec.get("priority")) is not int:
        spec["priority"] = wanted.value
        changes.append(_set_value("spec.priority", str(wanted.value)))
    if spec.get("preemptionPolicy") != wanted.preemption_policy:
        spec["preemptionPolicy"] = wanted.preemption_policy
        changes.append(_set_value("spec.preemptionPolicy", wanted.preemption_policy))


def _scheduler(
    spec: dict[str, Any], wclass: WorkloadClass, changes: list[Finding], notes: list[Finding]
) -> None:
    wanted = wclass.scheduler_name
    assert wanted is not None
    named = spec.get("schedulerName")
    if named == wanted:
        return
    if named not in (None, "", DEFAULT_SCHEDULER):
        message = (
            f"the pod names the scheduler {shorten(str(named))!r}, kept: class {wclass.name} "
            f"would use {wanted!r}, but another scheduler may be what the pod needs (a gang "
            "scheduler, a queue)"
        )
        notes.append(finding(Code.SCHEDULER_KEPT, message, "spec.schedulerName"))
        return
    spec["schedulerName"] = wanted
    changes.append(_set_scheduler(wanted, wclass.name))


def _replaced(
    named: str, current: PriorityClassInfo | None, wanted: PriorityClassInfo, wclass: WorkloadClass
) -> Finding:
    where = f"priority {current.value}" if current is not None else "a class not known here"
    if wclass.placement is Placement.STANDARD:
        why = f"below the floor of class {wclass.name}"
    else:
        why = (
            f"above the ceiling of class {wclass.name}, or able to preempt where the class's "
            "may not"
        )
    message = (
        f"priorityClassName {shorten(named)!r} ({where}) is {why}: replaced by "
        f"{wanted.name!r} (priority {wanted.value}, preemptionPolicy {wanted.preemption_policy})"
    )
    return finding(Code.PRIORITY_REPLACED, message, "spec.priorityClassName")


def _not_known(named: str, wanted: PriorityClassInfo, wclass: WorkloadClass) -> Finding:
    message = (
        f"priorityClassName {shorten(named)!r} is not known here, kept: in the cluster, class "
        f"{wclass.name} raises it to {wanted.name!r} (priority {wanted.value}) if it is lower; "
        "add the PriorityClass to the input to see which"
    )
    return finding(Code.PRIORITY_NOT_KNOWN, message, "spec.priorityClassName")


@lru_cache(maxsize=64)
def _set_class(wanted: PriorityClassInfo, is_pod: bool) -> Finding:
    resolved = (
        f" (priority {wanted.value}, preemptionPolicy {wanted.preemption_policy})" if is_pod else ""
    )
    return change(
        Code.PRIORITY_SET,
        f"priorityClassName {wanted.name}{resolved}",
        "who wins when capacity is short",
        "spec.priorityClassName",
    )


@lru_cache(maxsize=64)
def _set_value(path: str, value: str) -> Finding:
    return change(
        Code.PRIORITY_SET,
        f"{path.rpartition('.')[2]} {value}",
        "as the API server resolves the priority class",
        path,
    )


@lru_cache(maxsize=64)
def _set_scheduler(wanted: str, class_name: str) -> Finding:
    return change(
        Code.SCHEDULER_SET,
        f"schedulerName {wanted}",
        f"class {class_name} is scheduled by it",
        "spec.schedulerName",
    )
