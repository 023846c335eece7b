"""Warnings for the mistakes people make with preemptguard's annotations.

A misspelt key or a class written as a label is silently ignored by Kubernetes and would be by
the engine too: the pod then gets no class, or another one. These warnings name the key and
what to write instead. They are help, never enforcement: only so many keys are examined, so a
pod with thousands of annotations costs no more than one with a few.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import cache
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
    hints = []
    for key, ours in _suspects(annotations):
        if ours in POD_KEYS and key != ours:
            message = (
                f"annotation on {where} {shorten(key)!r} is not {ours}, so it is ignored: "
                f"rename it to {ours}"
            )
            path = f"metadata.annotations.{shorten(key)}"
            hints.append(finding(Code.ANNOTATION_NEAR_MISS, message, path))
        elif key == NAMESPACE_DEFAULT_ANNOTATION:
            message = (
                f"{NAMESPACE_DEFAULT_ANNOTATION} on {where} is ignored: it belongs on the "
                f"namespace; a pod or template names its class with {WORKLOAD_ANNOTATION}"
            )
            path = f"metadata.annotations.{NAMESPACE_DEFAULT_ANNOTATION}"
            hints.append(finding(Code.ANNOTATION_MISPLACED, message, path))
    return hints[:MAX_HINTS]


def pod_label_hints(labels: Mapping[Any, Any], where: str) -> list[Finding]:
    """Our annotations written as labels of a pod or pod template."""
    return _as_labels(labels, POD_KEYS, where, namespaced=False)


def namespace_hints(
    namespace: str | None, annotations: Mapping[Any, Any], labels: Mapping[Any, Any]
) -> list[Finding]:
    """Near misses and labels in the metadata of the pod's namespace."""
    suspects = _suspects(annotations)
    if not suspects and not _suspects(labels):
        return []
    where = f"namespace {shorten(namespace or '')}"
    hints = []
    for key, ours in suspects:
        if ours in NAMESPACE_KEYS and key != ours:
            message = (
                f"annotation of {where} {shorten(key)!r} is not {ours}, so it is ignored: "
                f"rename it to {ours}"
            )
            hints.append(finding(Code.ANNOTATION_NEAR_MISS, message))
        elif key == WORKLOAD_ANNOTATION:
            message = (
                f"{WORKLOAD_ANNOTATION} on {where} is ignored: a namespace names the default "
                f"class of its pods with {NAMESPACE_DEFAULT_ANNOTATION}"
            )
            hints.append(finding(Code.ANNOTATION_MISPLACED, message))
    as_labels = _as_labels(labels, (*NAMESPACE_KEYS, WORKLOAD_ANNOTATION), where, namespaced=True)
    return [*hints, *as_labels][:MAX_HINTS]


def _as_labels(
    labels: Mapping[Any, Any], keys: tuple[str, ...], where: str, *, namespaced: bool
) -> list[Finding]:
    hints = []
    for key, ours in _suspects(labels):
        if ours in keys:
            message = (
                f"{shorten(key)} is a label of {where}; preemptguard reads {ours} from "
                "annotations only: move it to metadata.annotations"
            )
            path = "" if namespaced else f"metadata.labels.{shorten(key)}"
            hints.append(finding(Code.CLASS_AS_LABEL, message, path))
    return hints[:MAX_HINTS]


_OURS = (WORKLOAD_ANNOTATION, CHECKPOINT_ANNOTATION, NAMESPACE_DEFAULT_ANNOTATION)
# Which of ours each key is or nearly is: most pods carry the same few keys, so most keys are
# answered by one lookup. Bounded, so varied keys cost no memory, only time.
_MATCHES: dict[str, tuple[str, ...]] = {}
_MATCHES_MAX = 10_000


def _suspects(mapping: Mapping[Any, Any]) -> list[tuple[str, str]]:
    """``(key, ours)`` for each key that is one of ours or a near miss of it, among the first
    ``MAX_KEYS_EXAMINED`` keys of ``mapping``."""
    found = []
    for index, key in enumerate(mapping):
        if index == MAX_KEYS_EXAMINED:
            break
        if not isinstance(key, str):
            continue
        matches = _MATCHES.get(key)
        if matches is None:
            matches = tuple(ours for ours in _OURS if key == ours or is_near_miss(key, ours))
            if len(_MATCHES) < _MATCHES_MAX:
                _MATCHES[key] = matches
        found += [(key, ours) for ours in matches]
    return found


def is_near_miss(key: str, ours: str) -> bool:
    """Whether ``key`` is ``ours`` written with a different case, a plural, or a typo."""
    if abs(len(key) - len(ours)) > MAX_EDITS:
        return False
    folded = key.lower()
    if not any(part in folded for part in _parts(ours)):
        return False
    target = ours.lower()
    return folded == target or _within_edits(folded, target, MAX_EDITS)


# Each edit (a swap of neighbours included) touches at most two neighbouring pieces of a
# string cut in 2 * MAX_EDITS + 1 pieces, so a near miss keeps at least one piece whole: a
# substring test, in C, rules out nearly every key before the edit distance is computed.
_PIECES = 2 * MAX_EDITS + 1


@cache
def _parts(ours: str) -> tuple[str, ...]:
    target = ours.lower()
    size = max(1, len(target) // _PIECES)
    cuts = [i * size for i in range(_PIECES)] + [len(target)]
    return tuple(target[a:b] for a, b in itertools.pairwise(cuts) if target[a:b])


def _within_edits(a: str, b: str, limit: int) -> bool:
    """Optimal string alignment distance of ``a`` and ``b`` is at most ``limit``.

    Only a band of ``limit`` cells either side of the diagonal can stay within the limit, so
    the cost is linear in the length of the strings.
    """
    inf = limit + 1
    width = len(b) + 1
    before = [inf] * width  # row i - 2
    prev = [j if j <= limit else inf for j in range(width)]  # row i - 1
    for i in range(1, len(a) + 1):
        row = [inf] * width
        if i <= limit:
            row[0] = i
        low, high = max(1, i - limit), min(len(b), i + limit)
        for j in range(low, high + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            best = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                best = min(best, before[j - 2] + 1)
            row[j] = best
        if min(row[max(0, low - 1) : high + 1]) > limit:
            return False
        before, prev = prev, row
    return prev[len(b)] <= limit
