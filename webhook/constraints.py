"""Kubernetes node-selection semantics for one label key, and taint toleration.

A node is described only by the value of the compute-class label (``None`` when the
label is absent); other keys of a pod's constraints may match or not, so they never
make a term exclude a kind of node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.policy import Taint
from webhook.workloads import mapping_at

LabelState = str | None

# A label value no constraint names (not even a valid label value), standing for all of them.
UNNAMED_VALUE = "\x00unnamed"


def expression_admits(expr: Any, key: str, value: LabelState) -> bool:
    """Whether one matchExpressions entry lets a node whose ``key`` label is ``value`` through."""
    if not isinstance(expr, dict) or expr.get("key") != key:
        return True
    raw = expr.get("values")
    values: list[Any] = raw if isinstance(raw, list) else []
    op = expr.get("operator")
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        return _compares(op, value, values)
    return True


def _compares(op: str, value: LabelState, values: list[Any]) -> bool:
    try:
        node, bound = int(value or ""), int(values[0])
    except (ValueError, IndexError, TypeError):
        return False
    return node > bound if op == "Gt" else node < bound


def term_admits(term: Any, key: str, value: LabelState) -> bool:
    """Whether a nodeSelectorTerm (its expressions are ANDed) can match such a node.

    A term with no expressions and no fields matches no node at all (Kubernetes' rule).
    """
    if not isinstance(term, dict) or not (term.get("matchExpressions") or term.get("matchFields")):
        return False
    return all(expression_admits(e, key, value) for e in term.get("matchExpressions") or [])


def required_terms(spec: dict[str, Any]) -> list[Any] | None:
    """The required nodeSelectorTerms (ORed), or None when the pod has none."""
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    terms = mapping_at(spec, "affinity", "nodeAffinity", required).get("nodeSelectorTerms")
    return terms if isinstance(terms, list) and terms else None


def admits(spec: dict[str, Any], key: str, value: LabelState) -> bool:
    """Whether the pod's nodeSelector and required node affinity allow such a node."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and key in selector and selector[key] != value:
        return False
    terms = required_terms(spec)
    return terms is None or any(term_admits(t, key, value) for t in terms)


def admits_any(spec: dict[str, Any], key: str, values: Iterable[LabelState]) -> bool:
    return any(admits(spec, key, v) for v in values)


def mentioned_values(spec: dict[str, Any], key: str) -> set[str]:
    """Every value of ``key`` the pod's constraints name, so a search over states is complete."""
    found: set[str] = set()
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and isinstance(selector.get(key), str):
        found.add(selector[key])
    for term in required_terms(spec) or []:
        exprs = term.get("matchExpressions") if isinstance(term, dict) else None
        for expr in exprs or []:
            if isinstance(expr, dict) and expr.get("key") == key:
                found.update(str(v) for v in expr.get("values") or [] if isinstance(v, str | int))
                found.update(_neighbours(expr))
    return found


def _neighbours(expr: dict[str, Any]) -> set[str]:
    """Integers either side of a Gt/Lt bound, which the bound admits."""
    try:
        bound = int((expr.get("values") or [])[0])
    except (ValueError, IndexError, TypeError):
        return set()
    return {str(bound - 1), str(bound + 1)} if expr.get("operator") in ("Gt", "Lt") else set()


def tolerates(toleration: Any, taint: Taint) -> bool:
    """Kubernetes' ToleratesTaint: empty effect matches all; empty key with Exists matches all."""
    if not isinstance(toleration, dict):
        return False
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return key in ("", taint.key)
    return key == taint.key and (toleration.get("value") or "") == taint.value


def tolerated(spec: dict[str, Any], taint: Taint) -> bool:
    tolerations = spec.get("tolerations")
    return isinstance(tolerations, list) and any(tolerates(t, taint) for t in tolerations)
