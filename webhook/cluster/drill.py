"""``preemptguard drill NODE``: a reclaim of one preemptible node rehearsed as the provider does
it (DESIGN §1): cordon, the ``TogetherPreempted`` Event, every pod given the ``DisruptionTarget``
condition (as the observer gives it in a real reclaim: see ``disruption``) and deleted with its
own grace period (a delete, not an eviction: the provider does not honour PodDisruptionBudgets),
then up to 300 s for them to go. The report says, per pod, when it exited or that it was
still running at the deadline, and which pods of a standard-only class were on the node (there
should be none). The node is not removed; it is uncordoned only when asked, and only when the drill
cordoned it: a cordon someone else made before the drill is theirs to undo.

Only the pods of the plan are deleted, by uid: a pod deleted while the plan waited for its
confirmation and recreated under the same name (a StatefulSet's) is another pod, maybe on a
standard node, and is left alone. When the drill stops before deleting anything (the Event
refused), it undoes its own cordon, so a drill that did not happen leaves the node as it was.

DaemonSet and mirror pods are left running, as ``kubectl drain --ignore-daemonsets`` leaves
them: their controller or kubelet would recreate them on the cordoned node at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster import disruption, inventory
from webhook.cluster.inventory import PREEMPTIBLE
from webhook.cluster.reclaims import PREEMPTED_REASON, TERMINAL_PHASES, WINDOW_SECONDS
from webhook.engine.decision import NamespaceMeta, Obj
from webhook.engine.policy import Policy
from webhook.engine.workloads import string_map
from webhook.kube.client import Cluster, ClusterError, path
from webhook.kube.clock import Clock, format_time

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
    # Gone before its delete: not on the node any more, or its name taken by a newer pod.
    gone_before: bool = False
    # Given DisruptionTarget before its delete; else why not (the delete went ahead).
    marked: bool = False
    mark_error: str | None = None

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
        if self.gone_before:
            return (
                "gone before the drill deleted it (a new pod of that name, if any, was left alone)"
            )
        return self._exit() + self._mark()

    def _exit(self) -> str:
        if self.exited_after is None:
            return f"still running at the deadline (grace period {self.pod.grace} s)"
        seconds = round(self.exited_after)
        if self.outcome == "grace-expired":
            return (
                f"exited after {seconds} s, {seconds - self.pod.grace} s past its "
                f"{self.pod.grace} s grace period (the kubelet would have killed it)"
            )
        return f"exited after {seconds} s (grace period {self.pod.grace} s)"

    def _mark(self) -> str:
        if self.mark_error is None:
            return ""
        return f"; not marked {disruption.CONDITION}: {self.mark_error}"

    def as_json(self) -> dict[str, Any]:
        return {
            **self.pod.as_json(),
            "outcome": self.outcome,
            "exitedAfterSeconds": round(self.exited_after, 1)
            if self.exited_after is not None
            else None,
            "error": self.error,
            "disruptionTarget": self.marked,
            "markError": self.mark_error,
            "message": self.describe(),
        }


@dataclass
class Report:
    plan: Plan
    started: float
    results: list[PodResult] = field(default_factory=list)
    event: str = ""
    uncordon: bool = False  # asked for
    cordoned_by_drill: bool = False
    uncordoned: bool = False
    uncordon_error: str | None = None
    waited: float = 0.0

    @property
    def clean(self) -> bool:
        """Every pod exited within its grace period and no critical pod was on the node."""
        return not self.plan.critical and all(r.outcome == "exited-in-time" for r in self.results)

    def node_state(self) -> str:
        """What became of the node's cordon, and how to undo it when the drill could not."""
        node = self.plan.node
        if self.uncordoned:
            return "uncordoned"
        if self.uncordon_error is not None:
            return (
                f"left cordoned: uncordoning it failed ({self.uncordon_error}): "
                f"run `kubectl uncordon {node}`"
            )
        if not self.cordoned_by_drill and self.uncordon:
            return (
                "left cordoned: it was cordoned before the drill, and --uncordon undoes only the "
                "drill's own cordon"
            )
        if not self.cordoned_by_drill:
            return "left cordoned (it was cordoned before the drill)"
        return "left cordoned (--uncordon to undo)"

    def as_json(self) -> dict[str, Any]:
        return {
            **self.plan.as_json(),
            "started": format_time(self.started),
            "event": self.event,
            "waitedSeconds": round(self.waited, 1),
            "cordonedByDrill": self.cordoned_by_drill,
            "uncordoned": self.uncordoned,
            "uncordonError": self.uncordon_error,
            "nodeState": self.node_state(),
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
    """Run the drill of ``the_plan``; raises ``ClusterError`` when it stops before deleting
    anything (the pods not listed again, the node not cordoned, the Event not written), with
    what became of the node's cordon in the message. A failed uncordon at the end is reported,
    not raised: the pods' outcomes are what the drill was for."""
    report = Report(plan=the_plan, started=clock.now(), uncordon=uncordon)
    still_planned = _still_planned(cluster, the_plan)
    _cordon(cluster, report)
    try:
        report.event = _preempted_event(cluster, the_plan, clock.now())
    except ClusterError as exc:
        reason = f"cannot write the {PREEMPTED_REASON} Event: {exc}"
        raise ClusterError(_stopped(cluster, report, reason), status=exc.status) from None
    for planned in the_plan.to_delete:
        report.results.append(_delete(cluster, the_plan.node, planned, still_planned, clock))
    _wait(cluster, report, clock, progress)
    if uncordon and report.cordoned_by_drill:
        _uncordon(cluster, report)
    return report


def _still_planned(cluster: Cluster, the_plan: Plan) -> set[str]:
    """The uids of the planned pods still on the node, read again after the confirmation.

    A name outlives its pod: a StatefulSet recreates it, maybe on a standard node, while the
    prompt waits. Each delete carries the planned pod's uid as a precondition, so a newer pod
    is never deleted; reading the node again first reports those gone in the meantime
    without a delete refused for each.
    """
    params = {"fieldSelector": f"spec.nodeName={the_plan.node}"}
    try:
        listed = cluster.list_all(path("pods"), params=params).items
    except ClusterError as exc:
        raise ClusterError(
            f"cannot list the pods on node {the_plan.node} again before deleting them: {exc}; "
            "nothing was changed",
            status=exc.status,
        ) from None
    planned = {p.uid for p in the_plan.to_delete}
    return {
        uid
        for p in listed
        if (uid := inventory.uid_of(p)) in planned and inventory.phase_of(p) not in TERMINAL_PHASES
    }


def _cordon(cluster: Cluster, report: Report) -> None:
    """Cordon the node unless it already is; a cordon made before the drill is not ours. The
    node is read again: someone may have cordoned it while the prompt waited."""
    the_plan = report.plan
    node_path = path("nodes", name=the_plan.node)
    try:
        if _unschedulable(cluster.get(node_path)):
            return
        cluster.merge_patch(node_path, {"spec": {"unschedulable": True}})
    except ClusterError as exc:
        raise ClusterError(
            f"cannot cordon node {the_plan.node}: {exc}; nothing was changed", status=exc.status
        ) from None
    report.cordoned_by_drill = True


def _unschedulable(node: Obj) -> bool:
    spec = node.get("spec")
    return isinstance(spec, dict) and spec.get("unschedulable") is True


def _stopped(cluster: Cluster, report: Report, reason: str) -> str:
    """Why the drill stopped after its cordon, before any delete, and what became of the
    cordon: a drill that did not happen undoes its own cordon, asked to or not."""
    node = report.plan.node
    if not report.cordoned_by_drill:
        return (
            f"{reason}; nothing was deleted; node {node} stays cordoned as it was before the drill"
        )
    try:
        cluster.merge_patch(path("nodes", name=node), {"spec": {"unschedulable": None}})
    except ClusterError as exc:
        return (
            f"{reason}; nothing was deleted, but node {node} is left cordoned (uncordoning it "
            f"failed: {exc}): run `kubectl uncordon {node}`"
        )
    return f"{reason}; nothing was deleted, and the drill's cordon of node {node} was undone"


def _delete(
    cluster: Cluster, node: str, planned: PlannedPod, still_planned: set[str], clock: Clock
) -> PodResult:
    result = PodResult(pod=planned)
    if planned.uid not in still_planned:
        return _gone_before(result, clock)
    _mark(cluster, node, planned, result, clock)
    pod_path = path("pods", namespace=planned.namespace, name=planned.name)
    try:
        # Only the planned pod: a pod that took its name since is not touched.
        cluster.delete(pod_path, grace_seconds=planned.grace, uid=planned.uid or None)
    except ClusterError as exc:
        # 404: no pod of that name; 409: the name belongs to a newer pod (the uid precondition
        # failed). Either way the planned pod is gone, and nothing else is touched.
        if exc.not_found or exc.conflict:
            return _gone_before(result, clock)
        result.error = str(exc)
        return result
    result.sigterm = clock.now()
    return result


def _mark(
    cluster: Cluster, node: str, planned: PlannedPod, result: PodResult, clock: Clock
) -> None:
    """Give the planned pod ``DisruptionTarget``, by its uid. A failure is reported on the pod
    and the delete goes ahead, as the reclaim rehearsed would; a pod gone, or whose name
    another pod took (404, 409), is found so by its delete."""
    message = disruption.drill_message(node)
    try:
        disruption.mark(cluster, planned.namespace, planned.name, planned.uid, message,
                        clock.now())  # fmt: skip
    except ClusterError as exc:
        if not (exc.not_found or exc.conflict):
            result.mark_error = str(exc)
        return
    result.marked = True


def _gone_before(result: PodResult, clock: Clock) -> PodResult:
    result.sigterm, result.exited_after, result.gone_before = clock.now(), 0.0, True
    return result


def _uncordon(cluster: Cluster, report: Report) -> None:
    try:
        cluster.merge_patch(path("nodes", name=report.plan.node), {"spec": {"unschedulable": None}})
    except ClusterError as exc:
        report.uncordon_error = str(exc)
        return
    report.uncordoned = True


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
