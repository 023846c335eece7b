"""Warnings for the mistakes people make with preemptguard's annotations.

A misspelt key or a class written as a label is silently ignored by Kubernetes and would be by
the engine too: the pod then gets no class, or another one. These warnings name the key and
what to write instead. They are help, never enforcement: only so many keys are examined, so a
pod with thousands of annotations costs no more than one with a few.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.engine.classify import NAMESPACE_DEFAULT_ANNOTATION, WORKLOAD_ANNOTATION
from webhook.engine.findings import Code, Finding, finding, shorten
from webhook.engine.grace import CHECKPOINT_ANNOTATION

POD_KEYS = (WORKLOAD_ANNOTATION, CHECKPOINT_ANNOTATION)
NAMESPACE_KEYS = (NAMESPACE_DEFAULT_ANNOTATION,)

# Keys examined per mapping, and warnings given per object.
MAX_KEYS_EXAMINED = 256
MAX_HINTS = 5
# Edits (insert, delete, substitute, swap two neighbours) that still count as a near miss.
MAX_EDITS = 2


def pod_annotation_hints(annotations: Mapping[Any, Any], where: str) -> list[Finding]:
    """Near misses of the pod annotations among ``annotations`` (of a pod or pod template)."""
    hints = _near_misses(annotations, POD_KEYS, f"annotation on {where}")
    if NAMESPACE_DEFAULT_ANNOTATION in annotations:
        message = (
            f"{NAMESPACE_DEFAULT_ANNOTATION} on {where} is ignored: it belongs on the "
            f"namespace; a pod or template names its class with {WORKLOAD_ANNOTATION}"
        )
        path = f"metadata.annotations.{NAMESPACE_DEFAULT_ANNOTATION}"
        hints.append(finding(Code.ANNOTATION_MISPLACED, message, path))
    return hints


def pod_label_hints(labels: Mapping[Any, Any], where: str) -> list[Finding]:
    """Our annotations written as labels of a pod or pod template."""
    return _as_labels(labels, POD_KEYS, where)


def namespace_hints(
    namespace: str | None, annotations: Mapping[Any, Any], labels: Mapping[Any, Any]
) -> list[Finding]:
    """Near misses and labels in the metadata of the pod's namespace."""
    where = f"namespace {shorten(namespace or '')}"
    hints = _near_misses(annotations, NAMESPACE_KEYS, f"annotation of {where}", namespaced=True)
    if WORKLOAD_ANNOTATION in annotations:
        message = (
            f"{WORKLOAD_ANNOTATION} on {where} is ignored: a namespace names the default class "
            f"of its pods with {NAMESPACE_DEFAULT_ANNOTATION}"
        )
        hints.append(finding(Code.ANNOTATION_MISPLACED, message))
    return hints + _as_labels(
        labels, (*NAMESPACE_KEYS, WORKLOAD_ANNOTATION), where, namespaced=True
    )


def _as_labels(
    labels: Mapping[Any, Any], keys: Iterable[str], where: str, *, namespaced: bool = False
) -> list[Finding]:
    hints = []
    for ours in keys:
        for key in _matching_keys(labels, ours):
            message = (
                f"{shorten(str(key))} is a label of {where}; preemptguard reads {ours} from "
                "annotations only: move it to metadata.annotations"
            )
            path = "" if namespaced else f"metadata.labels.{shorten(str(key))}"
            hints.append(finding(Code.CLASS_AS_LABEL, message, path))
    return hints[:MAX_HINTS]


def _matching_keys(mapping: Mapping[Any, Any], ours: str) -> list[Any]:
    return [k for k in _examined(mapping) if k == ours or is_near_miss(k, ours)]


def _near_misses(
    mapping: Mapping[Any, Any], keys: Iterable[str], what: str, *, namespaced: bool = False
) -> list[Finding]:
    hints = []
    for ours in keys:
        for key in _examined(mapping):
            if key != ours and is_near_miss(key, ours):
                message = (
                    f"{what} {shorten(key)!r} is not {ours}, so it is ignored: rename it to {ours}"
                )
                path = "" if namespaced else f"metadata.annotations.{shorten(key)}"
                hints.append(finding(Code.ANNOTATION_NEAR_MISS, message, path))
    return hints[:MAX_HINTS]


def _examined(mapping: Mapping[Any, Any]) -> list[str]:
    keys: list[str] = []
    for key in mapping:
        if len(keys) == MAX_KEYS_EXAMINED:
            break
        if isinstance(key, str):
            keys.append(key)
    return keys


def is_near_miss(key: str, ours: str) -> bool:
    """Whether ``key`` is ``ours`` written with a different case, a plural, or a typo."""
    if abs(len(key) - len(ours)) > MAX_EDITS:
        return False
    folded, target = key.lower(), ours.lower()
    return folded == target or _within_edits(folded, target, MAX_EDITS)


def _within_edits(a: str, b: str, limit: int) -> bool:
    """Optimal string alignment distance of ``a`` and ``b`` is at most ``limit``.

    Only a band of ``limit`` cells either side of the diagonal can stay within the limit, so
    the cost is linear in the length of the strings.
    """
    inf = limit + 1
    prev2: dict[int, int] = {}
    prev = {j: j for j in range(min(len(b), limit) + 1)}
    for i in range(1, len(a) + 1):
        row: dict[int, int] = {}
        if i <= limit:
            row[0] = i
        for j in range(max(1, i - limit), min(len(b), i + limit) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            best = min(prev.get(j, inf) + 1, row.get(j - 1, inf) + 1, prev.get(j - 1, inf) + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                best = min(best, prev2.get(j - 2, inf) + 1)
            row[j] = best
        if min(row.values(), default=inf) > limit:
            return False
        prev2, prev = prev, row
    return prev.get(len(b), inf) <= limit
