"""A preemptible node's reclaim as the provider and a kubelet make it, on a control plane with
no kubelet: the node cordoned and its ``TogetherPreempted`` Event written, then each pod's
container ending as its kubelet would report it. Shared by the end-to-end tests and the
benchmarks."""

from __future__ import annotations

import functools
import time
from typing import Any

from harness import cluster
from harness.kube import Kube
from harness.processes import wait_until
from webhook.kube.clock import format_time

# A label of the nodes made for one test: the only nodes its pods may be bound to.
RECLAIM_GROUP = "e2e.preemptguard.together.ai/reclaims"

Obj = dict[str, Any]


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def group_node(kube: Kube, group: str) -> str:
    """A fresh preemptible node, the only kind the pods of ``group`` may be bound to."""
    name = cluster.unique("preemptible-reclaimed")
    cluster.create_node(kube, name, cluster.PREEMPTIBLE, labels={RECLAIM_GROUP: group})
    return name


def provider_reclaims(kube: Kube, node: str) -> None:
    """T+0 as the provider does it: the node cordoned, the TogetherPreempted Event on it."""
    cluster.cordon(kube, node)
    uid = kube.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]
    now = format_time(time.time())
    kube.create("/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{node}."},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
        "reason": "TogetherPreempted", "type": "Warning", "message": "node reclaimed",
        "source": {"component": "provider"}, "firstTimestamp": now, "lastTimestamp": now,
        "count": 1})  # fmt: skip


def kubelet_ends(kube: Kube, namespace: str, name: str, phase: str) -> None:
    """The pod's one container ends as its kubelet reports it: exit 143 on SIGTERM (Failed)
    or 0 (Succeeded), through the status subresource, its other conditions kept."""
    code, reason = (0, "Completed") if phase == "Succeeded" else (143, "Error")
    now = format_time(time.time())
    terminated = {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}
    status = {"phase": phase, "containerStatuses": [
        {"name": "main", "image": "registry.invalid/e2e:1", "imageID": "", "ready": False,
         "restartCount": 0, "state": {"terminated": terminated}}]}  # fmt: skip
    kube.call("PATCH", f"{_pods(namespace)}/{name}/status", {"status": status},
              content_type="application/strategic-merge-patch+json")  # fmt: skip


def disruption(kube: Kube, namespace: str, name: str) -> Obj | None:
    """The pod's DisruptionTarget condition, if it has one."""
    conditions = kube.get(f"{_pods(namespace)}/{name}")["status"].get("conditions", [])
    return next((c for c in conditions if c["type"] == "DisruptionTarget"), None)


def running_pod(kube: Kube, namespace: str, selector: str, node: str) -> str:
    """The pod matching ``selector`` the scheduler bound to ``node`` (a Job's replacement
    comes after the controller's back-off: 10, 20, then 40 s)."""

    def bound() -> str | None:
        for found in cluster.pods_with_labels(kube, namespace, selector):
            if found["spec"].get("nodeName") == node:
                return str(found["metadata"]["name"])
        return None

    return wait_until(bound, timeout=120, what=f"a pod of {selector} bound to {node}")


def reclaim_each_marked_pod(
    kube: Kube, namespace: str, selector: str, group: str, node: str, reclaims: int
) -> tuple[dict[str, str], str]:
    """``reclaims`` reclaims of the node that runs the pod of ``selector``, each waiting for the
    observer to mark the pod DisruptionTarget, then one more in which the pod finishes its
    work on SIGTERM (exit 0). Before each pod ends, a fresh node of ``group`` is made for its
    replacement: a replacement bound there is the workload surviving the reclaim. Returns
    ``{pod: the node it was reclaimed on}`` and the last node made."""
    reclaimed: dict[str, str] = {}
    for attempt in range(reclaims + 1):
        name = running_pod(kube, namespace, selector, node)
        provider_reclaims(kube, node)
        marked = functools.partial(disruption, kube, namespace, name)
        wait_until(marked, timeout=30, what=f"the observer to mark {name}")
        reclaimed[name] = node
        node = group_node(kube, group)
        kubelet_ends(kube, namespace, name, "Succeeded" if attempt == reclaims else "Failed")
    return reclaimed, node
