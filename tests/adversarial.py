"""Pods built to be slow, deep or large, as an attacker who may create pods would build them.

Each builder returns a serving-class pod that asks for preemptible nodes in some way, sized to
about ``target`` bytes of JSON (the API server takes objects up to 3 MiB), so that a webhook
that answers late, or not at all, lets it onto a preemptible node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

KEY = "together.ai/compute-class"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
MIB = 2**20
TARGET = 3 * MIB - 64 * 1024


def base_pod(name: str = "slow") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "annotations": {"together.ai/workload": "serving"},
        },
        "spec": {
            "nodeSelector": {KEY: "preemptible"},
            "tolerations": [{"key": KEY, "operator": "Exists"}],
            "containers": [{"name": "api", "image": "ghcr.io/example/chat-api:2.0"}],
        },
    }


def _size(obj: Any) -> int:
    return len(_dumps_deep(obj))


def _fill(pod: dict[str, Any], unit: Callable[[int], Any], target: int) -> list[Any]:
    """Items made by ``unit`` until the pod would pass ``target`` bytes."""
    one = _size(unit(0)) + 1
    count = max(1, (target - _size(pod)) // one)
    return [unit(i) for i in range(count)]


def _affinity(terms: list[Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}


def many_values(target: int = TARGET) -> dict[str, Any]:
    """1,000 required terms naming values of the class label, 100 distinct values in all."""
    pod = base_pod("many-values")
    del pod["spec"]["nodeSelector"]
    per_term = max(1, (target - _size(pod)) // (1000 * 10))
    values = [f"v{i % 99}" for i in range(per_term)] + ["preemptible"]
    term = {"matchExpressions": [{"key": KEY, "operator": "In", "values": values}]}
    pod["spec"]["affinity"] = _affinity([term] * 1000)
    return pod


def many_expressions(target: int = TARGET) -> dict[str, Any]:
    """1,000 required terms, each with hundreds of expressions on other keys."""
    pod = base_pod("many-expressions")
    del pod["spec"]["nodeSelector"]
    expr = {"key": "zone", "operator": "Exists"}
    per_term = max(1, (target - _size(pod)) // (1000 * (_size(expr) + 1)))
    term = {
        "matchExpressions": [expr] * per_term
        + [{"key": KEY, "operator": "In", "values": ["preemptible"]}]
    }
    pod["spec"]["affinity"] = _affinity([term] * 1000)
    return pod


def too_many_terms(target: int = TARGET) -> dict[str, Any]:
    """As many required terms as fit: far more than any real pod has."""
    pod = base_pod("too-many-terms")
    term = {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["preemptible"]}]}
    pod["spec"]["affinity"] = _affinity(_fill(pod, lambda i: term, target))
    return pod


def too_many_values(target: int = TARGET) -> dict[str, Any]:
    """One term naming as many distinct values of the class label as fit."""
    pod = base_pod("too-many-values")
    values = _fill(pod, lambda i: f"v{i:07d}", target)
    term = {"matchExpressions": [{"key": KEY, "operator": "NotIn", "values": values}]}
    pod["spec"]["affinity"] = _affinity([term])
    return pod


def many_tolerations(target: int = TARGET) -> dict[str, Any]:
    """As many tolerations as fit, none for the preemptible taint but the last."""
    pod = base_pod("many-tolerations")
    pod["spec"]["tolerations"] = _fill(
        pod, lambda i: {"key": f"k{i}", "operator": "Exists", "effect": "NoSchedule"}, target
    )
    return pod


def many_preferences(target: int = TARGET) -> dict[str, Any]:
    """An interruptible pod (flexible) with as many preferred terms as fit."""
    pod = base_pod("many-preferences")
    pod["metadata"]["annotations"]["together.ai/workload"] = "flexible"
    del pod["spec"]["nodeSelector"]
    pref = {
        "weight": 1,
        "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
    }
    pod["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: _fill(pod, lambda i: pref, target)}}
    return pod


def many_annotations(target: int = TARGET) -> dict[str, Any]:
    """As many annotations as fit, every key a near miss of together.ai/workload."""
    pod = base_pod("many-annotations")
    keys = _fill(pod, lambda i: f"together.ai/workloa{i % 10}{i}", target)
    pod["metadata"]["annotations"].update(dict.fromkeys(keys, "x"))
    return pod


def deep_managed_fields(target: int = TARGET, depth: int = 10_000) -> dict[str, Any]:
    """``metadata.managedFields`` nested ``depth`` levels, as the API server accepts it."""
    pod = base_pod("deep")
    fields: Any = {}
    for _ in range(depth):
        fields = {"f:x": fields}
    pod["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": fields}
    ]
    return pod


def deep_and_dense(target: int = TARGET) -> dict[str, Any]:
    """Deep managedFields (so the fast decoder gives up) beside as many small nested
    containers as fit (the worst case for reading what the decoder could not)."""
    pod = deep_managed_fields(depth=2_000)
    nested: Any = []
    for _ in range(9):
        nested = [nested]
    pod["metadata"]["managedFields"].append(
        {
            "manager": "x",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:y": _fill(pod, lambda i: nested, target - 20_000)},
        }
    )
    return pod


def _with_chains(pod: dict[str, Any], target: int, depth: int) -> dict[str, Any]:
    """``pod`` with a managed-fields entry holding lists nested ``depth`` levels, as many as
    fit ``target`` bytes."""
    chain: Any = []
    for _ in range(depth - 1):
        chain = [chain]
    chains = [chain] * max(1, target // (2 * depth + 1))
    pod["metadata"]["managedFields"] = [
        {"manager": "x", "operation": "Update", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:y": chains}}
    ]  # fmt: skip
    return pod


def deep_chains_under_the_cut(target: int = TARGET) -> dict[str, Any]:
    """Lists nested just past ``MAX_DEPTH`` once inside the review, as many as fit: too deep
    for the scanner to skip, each of them, and read in full up to the cut."""
    return _with_chains(base_pod("chains"), target, 199)


def deep_chains_unread_fast(target: int = TARGET) -> dict[str, Any]:
    """Lists nested past what any decoder goes, with a lone surrogate that keeps orjson from
    reading the review: the text is cut bracket by bracket, the costliest reading there is."""
    pod = base_pod("unread")
    pod["metadata"]["annotations"]["example.com/note"] = "\ud800"
    return _with_chains(pod, target, 1_100)


SLOW_PODS: dict[str, Callable[..., dict[str, Any]]] = {
    "many-values": many_values,
    "many-expressions": many_expressions,
    "too-many-terms": too_many_terms,
    "too-many-values": too_many_values,
    "many-tolerations": many_tolerations,
    "many-preferences": many_preferences,
    "many-annotations": many_annotations,
    "deep-managed-fields": deep_managed_fields,
    "deep-and-dense": deep_and_dense,
    "deep-chains-under-the-cut": deep_chains_under_the_cut,
    "deep-chains-unread-fast": deep_chains_unread_fast,
}


def review_of(pod: dict[str, Any], uid: str = "slow-0", user: str = "alice") -> dict[str, Any]:
    """A CREATE review of ``pod`` as the API server writes it (field order included)."""
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"].get("namespace", "team-a"),
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
        },
    }


def encode(doc: Any) -> bytes:
    """Compact JSON, as the API server sends it; deep documents without recursion limits."""
    return _dumps_deep(doc).encode()


def _dumps_deep(doc: Any) -> str:
    # json.dumps recurses; build the text of deep chains by hand, iteratively.
    parts: list[str] = []
    stack: list[Any] = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            parts.append(item.text)
        elif isinstance(item, dict):
            stack.append(_Raw("}"))
            entries = list(item.items())
            for i, (key, value) in enumerate(reversed(entries)):
                stack.append(value)
                comma = "," if i < len(entries) - 1 else ""
                stack.append(_Raw(comma + json.dumps(key) + ":"))
            stack.append(_Raw("{"))
        elif isinstance(item, list):
            stack.append(_Raw("]"))
            for i, value in enumerate(reversed(item)):
                stack.append(value)
                if i < len(item) - 1:
                    stack.append(_Raw(","))
            stack.append(_Raw("["))
        else:
            parts.append(json.dumps(item))
    return "".join(parts)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text
