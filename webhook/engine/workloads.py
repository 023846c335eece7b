"""Which kinds carry pods, and where in each object the pod (template) lives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.engine.decision import Obj

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class WorkloadKind:
    """A kind whose objects are, or hold a template of, pods."""

    kind: str
    template_path: tuple[str, ...]
    pod_owner_kind: str | None

    @property
    def is_pod(self) -> bool:
        return not self.template_path


KINDS: dict[str, WorkloadKind] = {
    k.kind: k
    for k in (
        WorkloadKind("Pod", (), None),
        WorkloadKind("Deployment", ("spec", "template"), "ReplicaSet"),
        WorkloadKind("ReplicaSet", ("spec", "template"), "ReplicaSet"),
        WorkloadKind("StatefulSet", ("spec", "template"), "StatefulSet"),
        WorkloadKind("Job", ("spec", "template"), "Job"),
        WorkloadKind("CronJob", ("spec", "jobTemplate", "spec", "template"), "Job"),
        WorkloadKind("DaemonSet", ("spec", "template"), "DaemonSet"),
    )
}


def workload_kind(obj: Obj) -> WorkloadKind | None:
    kind = obj.get("kind")
    return KINDS.get(kind) if isinstance(kind, str) else None


def template_of(obj: Obj, kind: WorkloadKind) -> Obj | None:
    """The dict holding the pod's metadata and spec: the Pod itself, or its template."""
    node: Any = obj
    for part in kind.template_path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def mapping_at(obj: Obj, *path: str) -> dict[str, Any]:
    """A nested mapping read without creating anything; ``{}`` where absent or not a mapping."""
    node: Any = obj
    for part in path:
        if type(node) is not dict:
            return {}
        node = node.get(part)
    return node if type(node) is dict else {}


def string_map(raw: Any) -> dict[str, str]:
    """Labels or annotations; entries that are not strings are ignored."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True)
class Owner:
    """A pod's controlling owner reference, as the pod states it (a claim, not a proof)."""

    api_version: str
    kind: str


def controller_owner(pod: Obj) -> Owner | None:
    """The pod's controlling owner reference, if any."""
    refs = mapping_at(pod, "metadata").get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, api_version = ref.get("kind"), ref.get("apiVersion")
            if not isinstance(kind, str):
                return None
            return Owner(api_version if isinstance(api_version, str) else "", kind)
    return None


def controller_kind(pod: Obj) -> str | None:
    """Kind of the pod's controlling owner reference, if any."""
    owner = controller_owner(pod)
    return owner.kind if owner is not None else None


# How far into an object of an unknown kind, and through how many of its containers, the
# search for pod templates goes: far enough for every operator's CRD, bounded for any object.
TEMPLATE_SEARCH_DEPTH = 12
TEMPLATE_SEARCH_NODES = 20_000
MAX_TEMPLATES_NAMED = 5


def find_pod_templates(obj: Obj) -> list[str]:
    """Paths of the pod templates (a mapping whose ``spec.containers`` is a list) in ``obj``."""
    found: list[str] = []
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    visited = 0
    while stack and visited < TEMPLATE_SEARCH_NODES and len(found) < MAX_TEMPLATES_NAMED:
        node, path, depth = stack.pop()
        visited += 1
        if path and isinstance(mapping_at(node, "spec").get("containers"), list):
            found.append(path)
            continue
        if depth >= TEMPLATE_SEARCH_DEPTH:
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node)
        children = [
            (value, _child_path(path, key), depth + 1)
            for key, value in items
            if isinstance(value, dict | list)
        ]
        stack.extend(reversed(children))
    return found


def _child_path(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def display_name(obj: Obj, *, pending: str = "*") -> str:
    """``name``, or ``generateName`` marked with ``pending`` for an object the API server
    will name (``sweep-*``; logs show ``generateName`` as it is, with ``pending=""``)."""
    meta = mapping_at(obj, "metadata")
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    generate = meta.get("generateName")
    return f"{generate}{pending}" if isinstance(generate, str) and generate else ""
