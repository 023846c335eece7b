"""Decide a pod's workload class from every source, the stricter placement winning."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from webhook.engine.decision import Classification, shorten
from webhook.engine.policy import Policy, Rule

WORKLOAD_ANNOTATION = "together.ai/workload"
NAMESPACE_DEFAULT_ANNOTATION = "together.ai/default-workload"


@dataclass(frozen=True)
class PodFacts:
    """What classification looks at."""

    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    namespace: str | None
    owner_kind: str | None
    namespace_annotations: Mapping[str, str]


@dataclass(frozen=True)
class Verdict:
    classification: Classification
    violations: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def classify(facts: PodFacts, policy: Policy) -> Verdict:
    """The class of a pod: annotation, rules, namespace default, then the policy default."""
    candidates, violations = _candidates(facts, policy)
    if not candidates:
        if policy.default_class is not None:
            return Verdict(
                Classification(policy.default_class, "policy default"), tuple(violations)
            )
        return Verdict(Classification(None, "unclassified"), tuple(violations))
    winner = max(
        enumerate(candidates),
        key=lambda item: (policy.classes[item[1].name or ""].placement.strictness, -item[0]),
    )[1]
    return Verdict(winner, tuple(violations), _disagreement(candidates, winner, policy))


def _candidates(facts: PodFacts, policy: Policy) -> tuple[list[Classification], list[str]]:
    found: list[Classification] = []
    violations: list[str] = []
    annotated = facts.annotations.get(WORKLOAD_ANNOTATION)
    if annotated is not None:
        _add(
            found,
            violations,
            policy,
            annotated,
            "annotation",
            f"{WORKLOAD_ANNOTATION}: {annotated}",
            f"the pod annotation {WORKLOAD_ANNOTATION}",
        )
    for rule in policy.rules:
        if rule_matches(rule, facts):
            found.append(
                Classification(rule.workload_class, f"rule {rule.name}", _rule_detail(rule))
            )
    ns_default = facts.namespace_annotations.get(NAMESPACE_DEFAULT_ANNOTATION)
    if ns_default is not None:
        _add(
            found,
            violations,
            policy,
            ns_default,
            "namespace default",
            f"namespace {facts.namespace} {NAMESPACE_DEFAULT_ANNOTATION}: {ns_default}",
            f"the annotation {NAMESPACE_DEFAULT_ANNOTATION} of namespace {facts.namespace}",
        )
    return found, violations


def _add(
    found: list[Classification],
    violations: list[str],
    policy: Policy,
    name: str,
    source: str,
    detail: str,
    where: str,
) -> None:
    if name in policy.classes:
        found.append(Classification(name, source, detail))
    else:
        valid = policy.class_names()
        unknown = shorten(name)
        violations.append(f"unknown workload class {unknown!r} in {where}: use one of {valid}")


def rule_matches(rule: Rule, facts: PodFacts) -> bool:
    match = rule.match
    if match.namespaces and not any(
        fnmatch.fnmatchcase(facts.namespace or "", pattern) for pattern in match.namespaces
    ):
        return False
    if any(facts.labels.get(k) != v for k, v in match.match_labels.items()):
        return False
    if not all(req.matches(facts.labels) for req in match.match_expressions):
        return False
    return not match.owner_kinds or facts.owner_kind in match.owner_kinds


def _rule_detail(rule: Rule) -> str:
    parts = []
    if rule.match.namespaces:
        parts.append("namespace in " + ", ".join(rule.match.namespaces))
    parts += [f"label {k}={v}" for k, v in rule.match.match_labels.items()]
    parts += [f"label {r.key} {r.operator} {list(r.values)}" for r in rule.match.match_expressions]
    if rule.match.owner_kinds:
        parts.append("owned by " + ", ".join(rule.match.owner_kinds))
    return "; ".join(parts)


def _disagreement(
    candidates: list[Classification], winner: Classification, policy: Policy
) -> tuple[str, ...]:
    losers = [c for c in candidates if c.name != winner.name]
    if not losers:
        return ()
    said = ", ".join(f"{c.source} says {c.name}" for c in losers)
    placement = policy.classes[winner.name or ""].placement.value
    return (
        f"classification sources disagree: {winner.source} says {winner.name} but {said}; "
        f"the stricter class {winner.name} ({placement}) wins",
    )
