"""Apply a workload class's placement to a pod (or pod template) and check it can be met.

Every function works on the deep copy the engine hands it. Each change is made only when
the pod does not already have it, so running the placement on its own output changes
nothing; nothing the user wrote is removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.engine import constraints
from webhook.engine.constraints import LabelState, NodeConstraints, TermView
from webhook.engine.decision import Change, shorten
from webhook.engine.grace import GraceBudget, adjust_grace, grace_violation
from webhook.engine.policy import Placement, Policy, WorkloadClass

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AFFINITY_PATH = f"spec.affinity.nodeAffinity.{REQUIRED}"


@dataclass
class Outcome:
    changes: list[Change] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Checked:
    """What ``check`` found: the pod's node constraints, and why it is refused (if it is)."""

    node: NodeConstraints
    violations: tuple[str, ...]


def check(
    spec: dict[str, Any], wclass: WorkloadClass, policy: Policy, budget: GraceBudget
) -> Checked:
    """Whether a pod with this spec may have ``wclass``; run on the original, before any copy."""
    node = constraints.read_constraints(spec, policy.node_label.key)
    too_large = node.too_large()
    if too_large is not None:
        return Checked(node, (too_large,))
    violations = _refusals(spec, node, wclass, policy)
    if wclass.placement.may_be_preempted:
        bad_grace = grace_violation(spec)
        violations += budget.violations + ([bad_grace] if bad_grace else [])
    return Checked(node, tuple(violations))


def place(
    pod: dict[str, Any],
    node: NodeConstraints,
    wclass: WorkloadClass,
    policy: Policy,
    budget: GraceBudget,
) -> Outcome:
    """Apply ``wclass``'s placement to ``pod``, which ``check`` found acceptable."""
    spec: dict[str, Any] = pod["spec"]
    out = Outcome()
    if wclass.placement is Placement.PREEMPTIBLE:
        _require(spec, node, policy, wclass, "In", out)
    elif wclass.placement is Placement.PREFER_PREEMPTIBLE:
        _prefer(spec, policy, wclass, out)
    else:
        _require(spec, node, policy, wclass, "NotIn", out)
    if wclass.placement.may_be_preempted:
        _tolerate(spec, policy, wclass, out)
        adjust_grace(spec, budget, out.changes, out.warnings)
    return out


def _refusals(
    spec: dict[str, Any], node: NodeConstraints, wclass: WorkloadClass, policy: Policy
) -> list[str]:
    label = policy.node_label
    where = f"{label.key}={label.preemptible}"
    if wclass.placement is Placement.PREEMPTIBLE:
        if not node.admits(label.preemptible):
            return [
                f"class {wclass.name} runs only on preemptible nodes ({where}), but they are "
                f"excluded by the pod's {_constraint_names(spec, label.key)}: remove that "
                f"constraint, or use class {_classes_except(policy, Placement.PREEMPTIBLE)} instead"
            ]
    elif wclass.placement is Placement.STANDARD and not node.admits_any(
        _non_preemptible_states(node, policy)
    ):
        return [
            f"class {wclass.name} must run on standard nodes, but the pod requires preemptible "
            f"capacity through its {_constraint_names(spec, label.key)}: remove that "
            f"requirement ({wclass.name} pods are kept off {where} nodes), or use class "
            f"{_classes_except(policy, Placement.STANDARD)} if the pod can be preempted"
        ]
    return []


def _non_preemptible_states(node: NodeConstraints, policy: Policy) -> list[LabelState]:
    label = policy.node_label
    values = node.mentioned | {label.standard}
    return [None, *sorted(values - {label.preemptible})]


def _constraint_names(spec: dict[str, Any], key: str) -> str:
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and key in selector:
        return f"nodeSelector {key}={shorten(str(selector[key]))}"
    return "required node affinity terms"


def _classes_except(policy: Policy, placement: Placement) -> str:
    names = sorted(c.name for c in policy.classes.values() if c.placement is not placement)
    return " or ".join(names) if names else "another class"


def _require(
    spec: dict[str, Any],
    node: NodeConstraints,
    policy: Policy,
    wclass: WorkloadClass,
    op: str,
    out: Outcome,
) -> None:
    """AND ``key op [preemptible]`` into every required term.

    Terms are ORed, so adding a term of our own would widen placement instead of narrowing it.
    """
    label = policy.node_label
    expr = {"key": label.key, "operator": op, "values": [label.preemptible]}
    terms = constraints.required_terms(spec)
    if terms is None:
        affinity = _child(_child(spec, "affinity"), "nodeAffinity")
        affinity[REQUIRED] = {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        out.changes.append(Change(AFFINITY_PATH, _require_reason(wclass, expr)))
        return
    states = [None, label.standard, *sorted(node.mentioned)]
    excluded = _excluded_by(expr, label.key, states)
    views = node.terms or ()
    for i, term in enumerate(terms):
        if not isinstance(term, dict) or _already_narrower(views[i], excluded):
            continue
        exprs = term.get("matchExpressions")
        if not isinstance(exprs, list):  # null beside matchFields
            exprs = term["matchExpressions"] = []
        exprs.append(dict(expr, values=list(expr["values"])))
        out.changes.append(
            Change(f"{AFFINITY_PATH}.nodeSelectorTerms[{i}]", _require_reason(wclass, expr))
        )


def _excluded_by(expr: dict[str, Any], key: str, states: list[LabelState]) -> list[LabelState]:
    """The label states (those named, and one standing for the rest) ``expr`` excludes."""
    ours = constraints.view({"matchExpressions": [expr]}, key)
    candidates = {*states, *expr["values"], constraints.UNNAMED_VALUE}
    return [s for s in candidates if not ours.admits(s)]


def _already_narrower(term: TermView, excluded: list[LabelState]) -> bool:
    """True when the term already excludes every node our expression would exclude."""
    return all(not term.admits(s) for s in excluded)


def _require_reason(wclass: WorkloadClass, expr: dict[str, Any]) -> str:
    values = ", ".join(expr["values"])
    where = "runs only on" if expr["operator"] == "In" else "never runs on"
    requirement = f"{expr['key']} {expr['operator']} [{values}]"
    return f"requires {requirement}: class {wclass.name} {where} preemptible nodes"


def _prefer(spec: dict[str, Any], policy: Policy, wclass: WorkloadClass, out: Outcome) -> None:
    label = policy.node_label
    expr = {"key": label.key, "operator": "In", "values": [label.preemptible]}
    node_affinity = _child(_child(spec, "affinity"), "nodeAffinity")
    preferred = node_affinity.get(PREFERRED)
    if not isinstance(preferred, list):
        preferred = node_affinity[PREFERRED] = []
    if any(_prefers(p, expr) for p in preferred):
        return
    preferred.append(
        {"weight": policy.preferred_weight, "preference": {"matchExpressions": [expr]}}
    )
    out.changes.append(
        Change(
            f"spec.affinity.nodeAffinity.{PREFERRED}",
            f"prefers {label.key}={label.preemptible} (weight {policy.preferred_weight}): class "
            f"{wclass.name} uses preemptible capacity when there is some, else standard nodes",
        )
    )


def _prefers(term: Any, expr: dict[str, Any]) -> bool:
    preference = term.get("preference") if isinstance(term, dict) else None
    exprs = preference.get("matchExpressions") if isinstance(preference, dict) else None
    return isinstance(exprs, list) and expr in exprs


def _tolerate(spec: dict[str, Any], policy: Policy, wclass: WorkloadClass, out: Outcome) -> None:
    taint = policy.taint
    if taint is None or constraints.tolerated(spec, taint):
        return
    toleration: dict[str, Any] = {"key": taint.key, "operator": "Equal", "value": taint.value}
    if not taint.value:
        toleration = {"key": taint.key, "operator": "Exists"}
    toleration["effect"] = taint.effect
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = spec["tolerations"] = []
    tolerations.append(toleration)
    out.changes.append(
        Change(
            "spec.tolerations",
            f"tolerates {taint}: class {wclass.name} may run on preemptible nodes",
        )
    )


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` as a mapping, created when absent (a null there is replaced)."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value
