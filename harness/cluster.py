"""Fake nodes, namespaces and pod helpers on top of the control plane.

No kubelet runs, so a Node is only what its object says: the scheduler binds pods to it when its
labels, taints and allocatable resources allow, and a bound pod stays Pending with
``spec.nodeName`` set. That field is the placement the tests assert on.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable
from typing import Any

from harness.kube import Kube, KubeError
from harness.processes import wait_until

CLASS_LABEL = "together.ai/compute-class"
PREEMPTIBLE, STANDARD = "preemptible", "standard"
PREEMPTIBLE_TAINT = {"key": CLASS_LABEL, "value": PREEMPTIBLE, "effect": "NoSchedule"}
# The API server's TaintNodesByCondition admission adds this to every new Node; normally the node
# lifecycle controller lifts it once the kubelet reports Ready.
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
# Namespaces carry this label from Kubernetes 1.21 on; the webhook configurations select on it.
NAME_LABEL = "kubernetes.io/metadata.name"
WORKLOAD = "together.ai/workload"
DEFAULT_WORKLOAD = "together.ai/default-workload"
PLACEMENT = "together.ai/placement"

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


# --- nodes ---------------------------------------------------------------------------------


def create_node(
    kube: Kube,
    name: str,
    compute_class: str | None,
    *,
    gpus: int = 8,
    pods: int = 110,
    cpu: str = "96",
    memory: str = "1Ti",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A schedulable fake GPU node: ``compute_class`` None is a standard node with no label.

    Preemptible nodes carry the label and the NoSchedule taint, as the provider's do.
    ``labels`` and ``taints`` are added from the start (a taint added later would leave a moment
    in which the scheduler may bind pods that do not tolerate it).
    """
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
    if compute_class is not None:
        all_labels[CLASS_LABEL] = compute_class
    spec: dict[str, Any] = {}
    if compute_class == PREEMPTIBLE:
        spec["taints"] = [dict(PREEMPTIBLE_TAINT)]
    if taints:
        spec["taints"] = [*spec.get("taints", []), *taints]
    kube.create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": spec,
        },
    )
    resources = {"pods": str(pods), "cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)}
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.merge_patch(
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "Hostname", "address": name}],
            }
        },
    )
    return _lift_not_ready_taint(kube, name)


def _lift_not_ready_taint(kube: Kube, name: str) -> dict[str, Any]:
    node = kube.get(f"/api/v1/nodes/{name}")
    taints = node["spec"].get("taints", [])
    kept = [t for t in taints if t["key"] != NOT_READY_TAINT_KEY]
    if kept != taints:
        # resourceVersion makes this a compare-and-swap: a concurrent change is retried, not lost.
        node = kube.call(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": kept or None},
            },
            content_type="application/merge-patch+json",
        ).body
    return node


def cordon(kube: Kube, name: str, cordoned: bool = True) -> None:
    kube.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": cordoned or None}})


def node_classes(kube: Kube) -> dict[str, str]:
    """Node name -> compute class (unlabelled nodes are standard)."""
    nodes = kube.get("/api/v1/nodes")["items"]
    return {
        n["metadata"]["name"]: n["metadata"].get("labels", {}).get(CLASS_LABEL, STANDARD)
        for n in nodes
    }


# --- namespaces ----------------------------------------------------------------------------


def label_system_namespaces(kube: Kube) -> None:
    """Give the namespaces that exist at bootstrap the name label Kubernetes 1.21+ sets itself.

    On 1.20 no namespace has it, and `NotIn` matches a missing label, so without this the shipped
    namespaceSelector would send kube-system's pods to the webhook.
    """
    for ns in kube.get("/api/v1/namespaces")["items"]:
        name = ns["metadata"]["name"]
        if ns["metadata"].get("labels", {}).get(NAME_LABEL) != name:
            kube.merge_patch(
                f"/api/v1/namespaces/{name}", {"metadata": {"labels": {NAME_LABEL: name}}}
            )


def create_namespace(
    kube: Kube, name: str, *, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A namespace labelled as 1.21+ would label it (1.20 does not; see label_system_namespaces)."""
    meta: dict[str, Any] = {"name": name, "labels": {NAME_LABEL: name}}
    if annotations:
        meta["annotations"] = annotations
    return kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    ).body


# --- pods ----------------------------------------------------------------------------------


def pod(
    name: str,
    *,
    workload: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    **spec: Any,
) -> dict[str, Any]:
    """A minimal pod manifest; extra keyword arguments go into ``spec`` as written."""
    ann = dict(annotations or {})
    if workload is not None:
        ann[WORKLOAD] = workload
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/e2e:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta: dict[str, Any] = {"name": name}
    if ann:
        meta["annotations"] = ann
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container], **spec},
    }


def pod_template(
    labels: dict[str, str], *, workload: str | None = None, gpus: int = 0, **spec: Any
) -> dict[str, Any]:
    body = pod("x", workload=workload, labels=labels, gpus=gpus, **spec)
    del body["metadata"]["name"]
    return {"metadata": body["metadata"], "spec": body["spec"]}


def daemonset(name: str, labels: dict[str, str], **pod_fields: Any) -> dict[str, Any]:
    """A DaemonSet whose pods carry ``labels`` (its selector), built by ``pod_template`` from
    ``pod_fields``: its pods are created by the DaemonSet controller under its own identity, the
    one case in which the webhook leaves a pod alone because of who made it."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": pod_template(labels, **pod_fields),
        },
    }


def wait_scheduled(kube: Kube, namespace: str, name: str, timeout: float = 30) -> dict[str, Any]:
    """The stored pod once the scheduler has bound it; fails with the scheduler's reason if not."""

    def bound() -> dict[str, Any] | None:
        p = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return p if p["spec"].get("nodeName") else None

    try:
        return wait_until(bound, timeout=timeout, what=f"pod {namespace}/{name} to be scheduled")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; {scheduling_events(kube, namespace, name)}") from None


def scheduling_events(kube: Kube, namespace: str, name: str) -> str:
    events = kube.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={name}"
    )["items"]
    return "; ".join(f"{e['reason']}: {e.get('message', '')}" for e in events) or "no events"


def pods_with_labels(kube: Kube, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = kube.get(
        f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector
    )["items"]
    return pods


def wait_pods_scheduled(
    kube: Kube, namespace: str, selector: str, count: int, timeout: float = 60
) -> list[dict[str, Any]]:
    """``count`` pods matching ``selector``, all bound to nodes (created by a controller)."""

    def all_bound() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in pods_with_labels(kube, namespace, selector)
            if "deletionTimestamp" not in p["metadata"]
        ]
        if len(pods) >= count and all(p["spec"].get("nodeName") for p in pods):
            return pods
        return None

    try:
        return wait_until(
            all_bound, timeout=timeout, what=f"{count} pods {selector} in {namespace} bound"
        )
    except TimeoutError as exc:
        pods = pods_with_labels(kube, namespace, selector)
        detail = [
            f"{p['metadata']['name']}: node={p['spec'].get('nodeName')} "
            f"({scheduling_events(kube, namespace, p['metadata']['name'])})"
            for p in pods
        ]
        raise AssertionError(f"{exc}; pods: {detail or 'none'}") from None


def delete_pods(kube: Kube, namespace: str, names: Iterable[str]) -> None:
    # With no kubelet to confirm, a graceful delete never completes.
    for name in names:
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", grace_seconds=0)


def refused(exc: KubeError) -> bool:
    """A refusal by an admission webhook (not an error calling it)."""
    return "denied the request" in exc.message


# --- users ---------------------------------------------------------------------------------


def wait_admission_policies_gone(kube: Kube, namespace: str) -> None:
    """Until the API server stops enforcing preemptguard's deleted admission policies: its
    policy cache follows deletions by a watch, a moment behind the DELETE. Probed with a dry-run
    serving pod pinned to preemptible nodes, which only the policies refuse with their name."""
    probe = pod(
        "policy-probe",
        workload="serving",
        nodeSelector={CLASS_LABEL: PREEMPTIBLE},
        tolerations=[{"key": CLASS_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
    )

    def gone() -> bool:
        try:
            kube.create(f"/api/v1/namespaces/{namespace}/pods", probe, dry_run=True)
        except KubeError as exc:
            return "ValidatingAdmissionPolicy 'preemptguard-" not in exc.message
        return True

    wait_until(gone, timeout=60, what="the admission policies out of force", interval=0.3)


def namespace_user(kube: Kube, namespace: str, name: str, rules: list[dict[str, Any]]) -> str:
    """A token of a new ServiceAccount ``name`` in ``namespace`` that a Role grants ``rules``
    there and nothing anywhere else (no ClusterRole binds it); ``kube`` must be an admin."""
    meta = {"name": name, "namespace": namespace}
    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
    )
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube.create(
        f"{rbac}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": rules,
        },
    )
    kube.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
    return str(answer.body["status"]["token"])


def grant_admin(kube: Kube, namespace: str, users: Iterable[str]) -> None:
    """Bind cluster-admin to ``users`` in ``namespace`` only (a RoleBinding ``impersonated``), so
    that requests impersonating them are allowed there, and reach the admission hooks, as a
    user's own would; ``kube`` must be an admin."""
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "impersonated"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                for user in users
            ],
        },
    )
