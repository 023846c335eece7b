"""Which kinds carry pods, and where in each object the pod (template) lives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.decision import Obj

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
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def string_map(raw: Any) -> dict[str, str]:
    """Labels or annotations; entries that are not strings are ignored."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def controller_kind(pod: Obj) -> str | None:
    """Kind of the pod's controlling owner reference, if any."""
    refs = mapping_at(pod, "metadata").get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind = ref.get("kind")
            return kind if isinstance(kind, str) else None
    return None


def display_name(obj: Obj) -> str:
    """``name``, or ``generateName*`` for objects the API server will name."""
    meta = mapping_at(obj, "metadata")
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    generate = meta.get("generateName")
    return f"{generate}*" if isinstance(generate, str) and generate else ""
