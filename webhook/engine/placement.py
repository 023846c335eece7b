"""Check that a workload class's placement can be met, then apply it to a pod (or template).

``check`` reads the original; ``place`` writes into the copy the engine hands it, whose
written containers are its own (see ``evaluation.copy_for_placement``). Each change is made
only when the pod does not already have it, so running the placement on its own output
changes nothing; nothing the user wrote is removed. Functions return what they changed.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final, final

from webhook.engine import constraints
from webhook.engine.constraints import LabelState, NodeConstraints, TermView
from webhook.engine.findings import Code, Effects, Finding, change, finding, shorten
from webhook.engine.grace import GraceBudget, adjust_grace, grace_violation
from webhook.engine.policy import Placement, Policy, Taint, WorkloadClass

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AFFINITY_PATH = f"spec.affinity.nodeAffinity.{REQUIRED}"
PREFERRED_PATH = f"spec.affinity.nodeAffinity.{PREFERRED}"
SELECTOR_PATH = "spec.nodeSelector"


@final
class Checked:
    """What ``check`` found: the pod's node constraints, and why it is refused (if it is)."""

    __slots__ = ("node", "refusals")

    def __init__(self, *, node: NodeConstraints, refusals: tuple[Finding, ...] = ()) -> None:
        self.node: Final = node
        self.refusals: Final = refusals


def check(
    spec: dict[str, Any], wclass: WorkloadClass, policy: Policy, budget: GraceBudget
) -> Checked:
    """Whether a pod with this spec may have ``wclass``; run on the original, before any copy."""
    node = constraints.read_constraints(spec, policy.node_label.key)
    too_large = node.too_large()
    if too_large is not None:
        return Checked(node=node, refusals=(too_large,))
    refusals = _refusals(spec, node, wclass, policy)
    if wclass.placement.may_be_preempted:
        bad_grace = grace_violation(spec)
        refusals += (*budget.refusals, *((bad_grace,) if bad_grace else ()))
    return Checked(node=node, refusals=refusals)


def place(
    pod: dict[str, Any],
    node: NodeConstraints,
    wclass: WorkloadClass,
    policy: Policy,
    budget: GraceBudget,
) -> Effects:
    """Apply ``wclass``'s placement to ``pod``, which ``check`` found acceptable."""
    spec: dict[str, Any] = pod["spec"]
    if wclass.placement is Placement.PREEMPTIBLE:
        changes = _require(spec, node, policy, wclass, "In")
    elif wclass.placement is Placement.PREFER_PREEMPTIBLE:
        changes = _prefer(spec, policy, wclass)
    else:
        changes = _require(spec, node, policy, wclass, "NotIn")
    if not wclass.placement.may_be_preempted:
        return Effects(changes=changes)
    grace = adjust_grace(spec, budget)
    return Effects(
        changes=(*changes, *_tolerate(spec, policy, wclass), *grace.changes), notes=grace.notes
    )


def _refusals(
    spec: dict[str, Any], node: NodeConstraints, wclass: WorkloadClass, policy: Policy
) -> tuple[Finding, ...]:
    label = policy.node_label
    where = f"{label.key}={label.preemptible}"
    if wclass.placement is Placement.PREEMPTIBLE:
        if node.admits(label.preemptible):
            return ()
        if node.admits_any(_non_preemptible_states(node, policy)):
            message = (
                f"class {wclass.name} runs only on preemptible nodes ({where}), but they are "
                f"excluded by the pod's {_constraint_names(spec, label.key)}: remove that "
                f"constraint, or use class {_classes_except(policy, Placement.PREEMPTIBLE)} instead"
            )
            return (finding(Code.EXCLUDES_PREEMPTIBLE, message, _constraint_path(spec, label.key)),)
        return (_matches_no_node(spec, wclass, label.key, f"{where} nodes"),)
    if wclass.placement is Placement.STANDARD and not node.admits_any(
        _non_preemptible_states(node, policy)
    ):
        if not node.admits(label.preemptible):
            return (_matches_no_node(spec, wclass, label.key, f"nodes other than {where}"),)
        message = (
            f"class {wclass.name} must run on standard nodes, but the pod requires preemptible "
            f"capacity through its {_constraint_names(spec, label.key)}: "
            f"remove that requirement ({wclass.name} pods are kept off {where} nodes), or use "
            f"class {_classes_except(policy, Placement.STANDARD)} if the pod can be preempted"
        )
        return (finding(Code.REQUIRES_PREEMPTIBLE, message, _constraint_path(spec, label.key)),)
    return ()


def _matches_no_node(spec: dict[str, Any], wclass: WorkloadClass, key: str, needed: str) -> Finding:
    """A pod whose own constraints admit no node, whatever its label says: it could never be
    scheduled, and neither kind of capacity is what keeps it off."""
    message = (
        f"class {wclass.name} needs {needed}, but no node can meet the pod's own node "
        f"constraints: its nodeSelector and required node affinity terms contradict each other "
        f"on {key}, or a term is empty (an empty term matches no node); make them admit {needed}"
    )
    return finding(Code.MATCHES_NO_NODE, message, _constraint_path(spec, key))


def _non_preemptible_states(node: NodeConstraints, policy: Policy) -> list[LabelState]:
    label = policy.node_label
    values = node.mentioned | {label.standard}
    return [None, *sorted(values - {label.preemptible})]


def _selected(spec: dict[str, Any], key: str) -> object:
    selector = spec.get("nodeSelector")
    return selector.get(key) if isinstance(selector, dict) else None


def _constraint_names(spec: dict[str, Any], key: str) -> str:
    """The constraint that keeps the pod from its class's nodes. A nodeSelector on ``key`` is
    it whenever the pod is refused for that and its constraints admit some node: a selector
    that agreed with the class would leave only the other kind of node, or none."""
    value = _selected(spec, key)
    if value is not None:
        return f"nodeSelector {key}={shorten(str(value))}"
    return "required node affinity terms"


def _constraint_path(spec: dict[str, Any], key: str) -> str:
    return f"{SELECTOR_PATH}.{key}" if _selected(spec, key) is not None else AFFINITY_PATH


def _classes_except(policy: Policy, placement: Placement) -> str:
    names = sorted(c.name for c in policy.classes.values() if c.placement is not placement)
    return " or ".join(names) if names else "another class"


def _require(
    spec: dict[str, Any], node: NodeConstraints, policy: Policy, wclass: WorkloadClass, op: str
) -> tuple[Finding, ...]:
    """AND ``key op [preemptible]`` into every required term.

    Terms are ORed, so adding a term of our own would widen placement instead of narrowing it.
    """
    label = policy.node_label
    expr = {"key": label.key, "operator": op, "values": [label.preemptible]}
    terms = constraints.required_terms(spec)
    if terms is None:
        affinity = _child(_child(spec, "affinity"), "nodeAffinity")
        affinity[REQUIRED] = {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        return (_required_change(wclass.name, label.key, op, label.preemptible, AFFINITY_PATH),)
    states = (None, label.standard, *sorted(node.mentioned))
    excluded = _excluded_by(label.key, op, label.preemptible, states)
    views = node.terms or ()
    changes = []
    for i, term in enumerate(terms):
        if not isinstance(term, dict) or _already_narrower(views[i], excluded):
            continue
        exprs = term.get("matchExpressions")
        if not isinstance(exprs, list):  # null beside matchFields
            exprs = term["matchExpressions"] = []
        exprs.append(dict(expr, values=list(expr["values"])))
        path = f"{AFFINITY_PATH}.nodeSelectorTerms[{i}]"
        changes.append(_required_change(wclass.name, label.key, op, label.preemptible, path))
    return tuple(changes)


def _excluded_by(
    key: str, op: str, value: str, states: tuple[LabelState, ...]
) -> tuple[LabelState, ...]:
    """The label states (those named, and one standing for the rest) our expression
    ``key op [value]`` excludes."""
    if len(states) <= _CACHED_STATES and all(
        s is None or len(s) <= _LABEL_VALUE_CHARS for s in states
    ):
        return _excluded_by_cached(key, op, value, states)
    return _exclusion(key, op, value, states)


# Pods of a cluster name the same few values of the label, so the answer is nearly always
# known. Only short tuples of label-sized values are kept: what a pod names is the pod's
# writer's to choose, and must not decide how much memory the cache holds.
_CACHED_STATES = 8
_LABEL_VALUE_CHARS = 63


@lru_cache(maxsize=256)
def _excluded_by_cached(
    key: str, op: str, value: str, states: tuple[LabelState, ...]
) -> tuple[LabelState, ...]:
    return _exclusion(key, op, value, states)


def _exclusion(
    key: str, op: str, value: str, states: tuple[LabelState, ...]
) -> tuple[LabelState, ...]:
    expr = {"key": key, "operator": op, "values": [value]}
    ours = constraints.view({"matchExpressions": [expr]}, key)
    candidates = {*states, value, constraints.UNNAMED_VALUE}
    return tuple(s for s in candidates if not ours.admits(s))


def _already_narrower(term: TermView, excluded: tuple[LabelState, ...]) -> bool:
    """True when the term already excludes every node our expression would exclude."""
    return all(not term.admits(s) for s in excluded)


# The findings of changes depend on a few names only: made once, they are reused (they are
# immutable), which spares every review their formatting.
@lru_cache(maxsize=1024)
def _required_change(class_name: str, key: str, op: str, value: str, path: str) -> Finding:
    where = "runs only on" if op == "In" else "never runs on"
    requirement = f"requires {key} {op} [{value}]"
    why = f"class {class_name} {where} preemptible nodes"
    return change(Code.AFFINITY_REQUIRED, requirement, why, path)


@lru_cache(maxsize=256)
def _toleration_change(taint: Taint, class_name: str) -> Finding:
    why = f"class {class_name} may run on preemptible nodes"
    return change(Code.TOLERATION_ADDED, f"tolerates {taint}", why, "spec.tolerations")


def _prefer(spec: dict[str, Any], policy: Policy, wclass: WorkloadClass) -> tuple[Finding, ...]:
    label = policy.node_label
    expr = {"key": label.key, "operator": "In", "values": [label.preemptible]}
    node_affinity = _child(_child(spec, "affinity"), "nodeAffinity")
    preferred = node_affinity.get(PREFERRED)
    if not isinstance(preferred, list):
        preferred = node_affinity[PREFERRED] = []
    if any(_prefers(p, expr) for p in preferred):
        return ()
    preferred.append(
        {"weight": policy.preferred_weight, "preference": {"matchExpressions": [expr]}}
    )
    what = f"prefers {label.key}={label.preemptible} (weight {policy.preferred_weight})"
    why = f"class {wclass.name} uses preemptible capacity when there is some, else standard nodes"
    return (change(Code.AFFINITY_PREFERRED, what, why, PREFERRED_PATH),)


def _prefers(term: Any, expr: dict[str, Any]) -> bool:
    preference = term.get("preference") if isinstance(term, dict) else None
    exprs = preference.get("matchExpressions") if isinstance(preference, dict) else None
    return isinstance(exprs, list) and expr in exprs


def _tolerate(spec: dict[str, Any], policy: Policy, wclass: WorkloadClass) -> tuple[Finding, ...]:
    taint = policy.taint
    if taint is None or constraints.tolerated(spec, taint):
        return ()
    toleration: dict[str, Any] = {"key": taint.key, "operator": "Equal", "value": taint.value}
    if not taint.value:
        toleration = {"key": taint.key, "operator": "Exists"}
    toleration["effect"] = taint.effect
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = spec["tolerations"] = []
    tolerations.append(toleration)
    return (_toleration_change(taint, wclass.name),)


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` as a mapping, created when absent (a null there is replaced)."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value
