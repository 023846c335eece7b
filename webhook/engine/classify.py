"""Decide a pod's workload class from every source, the stricter placement winning."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from functools import lru_cache
from typing import Final, final

from webhook.engine.decision import Classification
from webhook.engine.findings import Code, Finding, finding, shorten
from webhook.engine.origins import NONE, Origins
from webhook.engine.policy import Policy, Rule

WORKLOAD_ANNOTATION = "together.ai/workload"
NAMESPACE_DEFAULT_ANNOTATION = "together.ai/default-workload"


@final
class PodFacts:
    """What classification looks at; ``origins``: the roles and default classes of the
    templates it is, or its pod comes from."""

    __slots__ = (
        "annotations",
        "labels",
        "namespace",
        "namespace_annotations",
        "origins",
        "owner_kind",
    )

    def __init__(
        self,
        *,
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
        namespace: str | None,
        owner_kind: str | None,
        namespace_annotations: Mapping[str, str],
        origins: Origins = NONE,
    ) -> None:
        self.annotations: Final = annotations
        self.labels: Final = labels
        self.namespace: Final = namespace
        self.owner_kind: Final = owner_kind
        self.namespace_annotations: Final = namespace_annotations
        self.origins: Final = origins

    def with_origins(self, origins: Origins) -> PodFacts:
        """The same facts for a pod of other origins."""
        return PodFacts(
            annotations=self.annotations,
            labels=self.labels,
            namespace=self.namespace,
            owner_kind=self.owner_kind,
            namespace_annotations=self.namespace_annotations,
            origins=origins,
        )


@final
class Verdict:
    """The class chosen, what its sources refuse, and where they disagree."""

    __slots__ = ("classification", "notes", "refusals")

    def __init__(
        self,
        *,
        classification: Classification,
        refusals: tuple[Finding, ...] = (),
        notes: tuple[Finding, ...] = (),
    ) -> None:
        self.classification: Final = classification
        self.refusals: Final = refusals
        self.notes: Final = notes


def classify(facts: PodFacts, policy: Policy) -> Verdict:
    """The class of a pod: its annotation (or, without one, its template's default), rules and
    the namespace default, the strictest winning; then the policy default."""
    candidates, refusals = _candidates(facts, policy)
    if not candidates:
        if policy.default_class is not None:
            chosen = Classification(name=policy.default_class, source="policy default")
            return Verdict(classification=chosen, refusals=refusals)
        unclassified = Classification(name=None, source="unclassified")
        return Verdict(classification=unclassified, refusals=refusals)
    if len(candidates) == 1:
        return Verdict(classification=candidates[0], refusals=refusals)
    winner = max(
        enumerate(candidates),
        key=lambda item: (policy.classes[item[1].name or ""].placement.strictness, -item[0]),
    )[1]
    return Verdict(
        classification=winner,
        refusals=refusals,
        notes=_disagreement(candidates, winner, policy),
    )


def _candidates(
    facts: PodFacts, policy: Policy
) -> tuple[list[Classification], tuple[Finding, ...]]:
    found: list[Classification] = []
    refusals: list[Finding] = []
    annotated = facts.annotations.get(WORKLOAD_ANNOTATION)
    if annotated is None:
        pass
    elif annotated in policy.classes:
        found.append(_by_annotation(annotated))
    else:
        where = f"the pod annotation {WORKLOAD_ANNOTATION}"
        path = f"metadata.annotations.{WORKLOAD_ANNOTATION}"
        refusals.append(_unknown(annotated, where, path, policy))
    for rule in policy.rules:
        if rule_matches(rule, facts):
            source = f"rule {rule.name}"
            found.append(
                Classification(name=rule.workload_class, source=source, detail=_rule_detail(rule))
            )
    if annotated is None:
        # The kind's default for its template, unless the pod says otherwise: a
        # LeaderWorkerSet serves users unless its template is annotated interruptible.
        found += facts.origins.defaults
    ns_default = facts.namespace_annotations.get(NAMESPACE_DEFAULT_ANNOTATION)
    if ns_default is not None:
        namespace = shorten(facts.namespace or "")
        if ns_default in policy.classes:
            detail = f"namespace {namespace} {NAMESPACE_DEFAULT_ANNOTATION}: {ns_default}"
            found.append(Classification(name=ns_default, source="namespace default", detail=detail))
        else:
            where = f"the annotation {NAMESPACE_DEFAULT_ANNOTATION} of namespace {namespace}"
            refusals.append(_unknown(ns_default, where, "", policy))
    return found, tuple(refusals)


# Only the names of a policy's classes get here: a few, whatever pods say.
@lru_cache(maxsize=64)
def _by_annotation(class_name: str) -> Classification:
    detail = f"{WORKLOAD_ANNOTATION}: {class_name}"
    return Classification(name=class_name, source="annotation", detail=detail)


def _unknown(class_name: str, where: str, path: str, policy: Policy) -> Finding:
    message = (
        f"unknown workload class {shorten(class_name)!r} in {where}: "
        f"use one of {policy.class_names()}"
    )
    return finding(Code.UNKNOWN_CLASS, message, path)


def rule_matches(rule: Rule, facts: PodFacts) -> bool:
    match = rule.match
    if match.namespaces and not any(
        fnmatch.fnmatchcase(facts.namespace or "", pattern) for pattern in match.namespaces
    ):
        return False
    labels = facts.labels
    for key, value in match.match_labels.items():
        if labels.get(key) != value:
            return False
    for requirement in match.match_expressions:
        if not requirement.matches(labels):
            return False
    if match.template_roles and facts.origins.roles.isdisjoint(match.template_roles):
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
    if rule.match.template_roles:
        parts.append("template role " + ", ".join(rule.match.template_roles))
    return "; ".join(parts)


def _disagreement(
    candidates: list[Classification], winner: Classification, policy: Policy
) -> tuple[Finding, ...]:
    losers = [c for c in candidates if c.name != winner.name]
    if not losers:
        return ()
    said = ", ".join(f"{c.source} says {c.name}" for c in losers)
    placement = policy.classes[winner.name or ""].placement.value
    message = (
        f"classification sources disagree: {winner.source} says {winner.name} but {said}; "
        f"the stricter class {winner.name} ({placement}) wins"
    )
    return (finding(Code.SOURCES_DISAGREE, message),)
