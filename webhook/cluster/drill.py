"""``preemptguard drill NODE``: a reclaim of one preemptible node rehearsed as the provider does
it (DESIGN §1): cordon, the ``TogetherPreempted`` Event, every pod deleted with its own grace
period (a delete, not an eviction: the provider does not honour PodDisruptionBudgets), then up
to 300 s for them to go. The report says, per pod, when it exited or that it was still running
at the deadline, and which pods of a standard-only class were on the node (there should be
none). The node is not removed; it is uncordoned only when asked.

DaemonSet and mirror pods are left running, as ``kubectl drain --ignore-daemonsets`` leaves
them: their controller or kubelet would recreate them on the cordoned node at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.namespaces import NamespaceMeta
from webhook.cluster import inventory
from webhook.cluster.client import Cluster, ClusterError, path
from webhook.cluster.clock import Clock
from webhook.cluster.inventory import PREEMPTIBLE
from webhook.cluster.reclaims import PREEMPTED_REASON, TERMINAL_PHASES, WINDOW_SECONDS, format_time
from webhook.engine.decision import Obj
from webhook.engine.policy import Policy
from webhook.engine.workloads import string_map

COMPONENT = "preemptguard-drill"
POLL_SECONDS = 1.0


class DrillRefused(ClusterError):
    """The drill will not run on this node (not preemptible, not found)."""


@dataclass(frozen=True, kw_only=True)
class PlannedPod:
    namespace: str
    name: str
    uid: str
    workload_class: str
    critical: bool
    grace: int
    checkpoint: int | None
    owner: str
    # delete | daemonset | mirror | terminating
    action: str

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "class": self.workload_class,
            "critical": self.critical,
            "graceSeconds": self.grace,
            "checkpointSeconds": self.checkpoint,
            "owner": self.owner,
            "action": self.action,
        }


@dataclass(frozen=True, kw_only=True)
class Plan:
    node: str
    node_uid: str
    node_class: str
    cordoned: bool
    pods: list[PlannedPod]
    wait_seconds: float

    @property
    def to_delete(self) -> list[PlannedPod]:
        return [p for p in self.pods if p.action == "delete"]

    @property
    def critical(self) -> list[PlannedPod]:
        return [p for p in self.pods if p.critical]

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "nodeClass": self.node_class,
            "cordoned": self.cordoned,
            "waitSeconds": self.wait_seconds,
            "pods": [p.as_json() for p in self.pods],
            "criticalPods": [f"{p.namespace}/{p.name}" for p in self.critical],
        }


def plan(cluster: Cluster, node_name: str, policy: Policy, *, wait_seconds: float) -> Plan:
    """What a drill of ``node_name`` would do; raises ``DrillRefused`` for a node that is not
    preemptible (or not there) and ``ClusterError`` when the cluster cannot be read."""
    try:
        node = cluster.get(path("nodes", name=node_name))
    except ClusterError as exc:
        if exc.not_found:
            raise DrillRefused(f"node {node_name} does not exist", status=404) from None
        raise
    facts = inventory.node_facts(node, policy)
    if facts.compute_class != PREEMPTIBLE:
        label = policy.node_label
        raise DrillRefused(
            f"node {node_name} is a standard node (it lacks {label.key}={label.preemptible}): "
            "the provider never reclaims standard nodes, and a drill would take down what must "
            "keep running; pick a preemptible node"
        )
    listed = cluster.list_all(path("pods"), params={"fieldSelector": f"spec.nodeName={node_name}"})
    lookup = _namespaces(cluster)
    pods = [
        _planned(pod, policy, lookup)
        for pod in listed.items
        if inventory.phase_of(pod) not in TERMINAL_PHASES
    ]
    pods.sort(key=lambda p: (p.action != "delete", p.namespace, p.name))
    return Plan(
        node=node_name,
        node_uid=facts.uid,
        node_class=facts.compute_class,
        cordoned=facts.unschedulable,
        pods=pods,
        wait_seconds=wait_seconds,
    )


def _planned(pod: Obj, policy: Policy, lookup: Callable[[str], NamespaceMeta]) -> PlannedPod:
    if inventory.is_mirror_pod(pod):
        action = "mirror"
    elif inventory.is_daemonset_pod(pod):
        action = "daemonset"
    elif inventory.meta_of(pod).get("deletionTimestamp"):
        action = "terminating"
    else:
        action = "delete"
    workload_class = inventory.pod_class(pod, policy, lookup)
    owner = inventory.controller_ref(pod)
    return PlannedPod(
        namespace=inventory.namespace_of(pod),
        name=inventory.name_of(pod),
        uid=inventory.uid_of(pod),
        workload_class=workload_class,
        critical=inventory.is_critical(workload_class, policy),
        grace=inventory.grace_seconds(pod),
        checkpoint=inventory.checkpoint_seconds(pod),
        owner=f"{owner.kind}/{owner.name}" if owner is not None else "-",
        action=action,
    )


def _namespaces(cluster: Cluster) -> Callable[[str], NamespaceMeta]:
    def read(namespace: str) -> NamespaceMeta:
        try:
            meta = inventory.meta_of(cluster.get(path("namespaces", name=namespace)))
        except ClusterError:
            return NamespaceMeta()
        return NamespaceMeta(
            annotations=string_map(meta.get("annotations")), labels=string_map(meta.get("labels"))
        )

    return inventory.cached(read)


@dataclass
class PodResult:
    pod: PlannedPod
    sigterm: float | None = None
    exited_after: float | None = None
    error: str | None = None

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return "not-deleted"
        if self.exited_after is None:
            return "still-running"
        return "exited-in-time" if round(self.exited_after) <= self.pod.grace else "grace-expired"

    def describe(self) -> str:
        if self.error is not None:
            return f"not deleted: {self.error}"
        if self.exited_after is None:
            return f"still running at the deadline (grace period {self.pod.grace} s)"
        seconds = round(self.exited_after)
        if self.outcome == "grace-expired":
            return (
                f"exited after {seconds} s, {seconds - self.pod.grace} s past its "
                f"{self.pod.grace} s grace period (the kubelet would have killed it)"
            )
        return f"exited after {seconds} s (grace period {self.pod.grace} s)"

    def as_json(self) -> dict[str, Any]:
        return {
            **self.pod.as_json(),
            "outcome": self.outcome,
            "exitedAfterSeconds": round(self.exited_after, 1)
            if self.exited_after is not None
            else None,
            "error": self.error,
            "message": self.describe(),
        }


@dataclass
class Report:
    plan: Plan
    started: float
    results: list[PodResult] = field(default_factory=list)
    event: str = ""
    uncordoned: bool = False
    waited: float = 0.0

    @property
    def clean(self) -> bool:
        """Every pod exited within its grace period and no critical pod was on the node."""
        return not self.plan.critical and all(r.outcome == "exited-in-time" for r in self.results)

    def as_json(self) -> dict[str, Any]:
        return {
            **self.plan.as_json(),
            "started": format_time(self.started),
            "event": self.event,
            "waitedSeconds": round(self.waited, 1),
            "uncordoned": self.uncordoned,
            "results": [r.as_json() for r in self.results],
            "clean": self.clean,
        }


# Called while waiting: seconds waited, seconds to wait, pods gone, pods deleted.
Progress = Callable[[float, float, int, int], None]


def execute(
    cluster: Cluster,
    the_plan: Plan,
    clock: Clock,
    *,
    uncordon: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Run the drill of ``the_plan``; raises ``ClusterError`` when the node cannot be cordoned
    or the Event written (nothing has been deleted then)."""
    node_path = path("nodes", name=the_plan.node)
    started = clock.now()
    report = Report(plan=the_plan, started=started)
    if not the_plan.cordoned:
        cluster.merge_patch(node_path, {"spec": {"unschedulable": True}})
    report.event = _preempted_event(cluster, the_plan, clock.now())
    for planned in the_plan.to_delete:
        result = PodResult(pod=planned)
        report.results.append(result)
        pod_path = path("pods", namespace=planned.namespace, name=planned.name)
        try:
            cluster.delete(pod_path, grace_seconds=planned.grace)
        except ClusterError as exc:
            if exc.not_found:
                result.sigterm, result.exited_after = clock.now(), 0.0
                continue
            result.error = str(exc)
            continue
        result.sigterm = clock.now()
    _wait(cluster, report, clock, progress)
    if uncordon:
        cluster.merge_patch(node_path, {"spec": {"unschedulable": None}})
        report.uncordoned = True
    return report


def _wait(cluster: Cluster, report: Report, clock: Clock, progress: Progress | None) -> None:
    the_plan = report.plan
    waiting = {r.pod.uid: r for r in report.results if r.exited_after is None and not r.error}
    deadline = report.started + the_plan.wait_seconds
    total = sum(1 for r in report.results if r.error is None)
    params = {"fieldSelector": f"spec.nodeName={the_plan.node}"}
    while True:
        now = clock.now()
        if waiting:
            try:
                listed = cluster.list_all(path("pods"), params=params).items
            except ClusterError:
                listed = None  # the pods are deleted already: keep waiting, try again
            present = {
                inventory.uid_of(p)
                for p in listed or ()
                if inventory.phase_of(p) not in TERMINAL_PHASES
            }
            now = clock.now()
            for uid in [u for u in waiting if listed is not None and u not in present]:
                result = waiting.pop(uid)
                result.exited_after = max(now - (result.sigterm or now), 0.0)
        report.waited = now - report.started
        if progress is not None:
            progress(min(report.waited, the_plan.wait_seconds), the_plan.wait_seconds,
                     total - len(waiting), total)  # fmt: skip
        if not waiting or now >= deadline:
            return
        clock.sleep(min(POLL_SECONDS, deadline - now))


def _preempted_event(cluster: Cluster, the_plan: Plan, now: float) -> str:
    stamp = format_time(now)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{the_plan.node}.", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Node",
            "name": the_plan.node,
            "uid": the_plan.node_uid,
        },
        "reason": PREEMPTED_REASON,
        "type": "Warning",
        "message": (
            f"preemptguard drill: reclaim of preemptible node {the_plan.node} rehearsed; every "
            f"pod gets SIGTERM now, and a real reclaim removes the node {WINDOW_SECONDS} s later"
        ),
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    created = cluster.create(path("events", namespace="default"), event)
    return str(inventory.meta_of(created).get("name") or "")
