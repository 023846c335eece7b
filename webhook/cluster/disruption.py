"""The ``DisruptionTarget`` pod condition, as the observer and the drill give it to the pods of a
node being reclaimed.

A Job's ``podFailurePolicy`` rule ``{action: Ignore, onPodConditions: [{type:
DisruptionTarget}]}`` keeps a pod's failure from counting against ``backoffLimit`` only when the
failed pod carries the condition. Kubernetes adds it itself when it evicts or preempts a pod,
but a provider that reclaims a node does not, so the pods of a reclaimed node are given it,
through the ``pods/status`` subresource, before they exit.

The write is a strategic merge patch of that one condition: the pod's other conditions are
kept (the API server merges ``status.conditions`` by ``type``), writing it again changes nothing
but its time, and it carries the pod's uid, so that a pod recreated under the same name (a
StatefulSet's) is not marked in its place.
"""

from __future__ import annotations

from webhook.engine.decision import Obj
from webhook.engine.workloads import mapping_at
from webhook.kube.client import Cluster, path
from webhook.kube.clock import format_time

CONDITION = "DisruptionTarget"
REASON = "PreemptibleNodeReclaimed"


def condition(message: str, now: float) -> Obj:
    return {
        "type": CONDITION,
        "status": "True",
        "reason": REASON,
        "message": message,
        "lastTransitionTime": format_time(now),
    }


def reclaim_message(node: str, window: int) -> str:
    return (
        f"preemptible node {node} is being reclaimed by its provider: the pod is stopped "
        f"and the node removed within {window} s"
    )


def drill_message(node: str) -> str:
    return f"preemptguard drill: reclaim of preemptible node {node} rehearsed; the pod is deleted"


def marked(pod: Obj) -> bool:
    """Whether ``pod`` carries ``DisruptionTarget`` already (ours, or Kubernetes' own after an
    eviction or a preemption: either keeps a Job from counting its failure)."""
    conditions = mapping_at(pod, "status").get("conditions")
    for found in conditions if isinstance(conditions, list) else []:
        if isinstance(found, dict) and found.get("type") == CONDITION:
            return found.get("status") == "True"
    return False


def mark(cluster: Cluster, namespace: str, name: str, uid: str, message: str, now: float) -> None:
    """Give the pod ``namespace/name`` of ``uid`` the condition; ``ClusterError`` when the
    write fails: 404 when the pod is gone, 409 or 422 when its name belongs to another pod now
    (an empty ``uid``: whichever pod has the name)."""
    patch: Obj = {"status": {"conditions": [condition(message, now)]}}
    if uid:
        patch["metadata"] = {"uid": uid}
    cluster.strategic_merge_patch(
        path("pods", namespace=namespace, name=name, subresource="status"), patch
    )
