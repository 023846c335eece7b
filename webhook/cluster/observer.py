"""``preemptguard observe``: watches Nodes, Pods and ``TogetherPreempted`` Events (those in the
namespace where events about Nodes are recorded, ``default``: the only ones trusted), recognises
reclaims (``reclaims.Tracker``) and, on the replica that holds the Lease, reports each one:

- the ``DisruptionTarget`` condition on every pod of the node that has not finished, as soon
  as the reclaim is recognised (``disruption``), so that a Job's ``podFailurePolicy`` can
  ignore the failure the reclaim causes;
- a Kubernetes Event on the Node when a reclaim is recognised, and on each displaced pod's
  owner (the Deployment behind its ReplicaSet, its Job, StatefulSet, ...; the pod itself when it
  has none) saying what happened to it, and whether it completed during the reclaim;
- Prometheus metrics (``metrics.ObserverMetrics``) and one JSON log line per reclaim and pod.

Every replica keeps the state current; only the leader acts. Each Event has a name made from
what it reports (the reclaim's key, the pod's uid), so writing it twice fails with 409: a
restarted observer, or a standby that takes over, replays what it saw and counts only what no
replica had reported yet.

Optionally (``audit_interval``) the leader also runs the audit periodically, exports its counts
and writes its PolicyReports, and exports the capacity report (``capacity_live``) as gauges.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from webhook.cluster import audit as auditing
from webhook.cluster import capacity_live, disruption, inventory, reports
from webhook.cluster.capacity import Settings as CapacitySettings
from webhook.cluster.inventory import OwnerRef
from webhook.cluster.metrics import ObserverMetrics
from webhook.cluster.reclaims import (
    GRACE_SLACK,
    NODE_EVENT_NAMESPACE,
    PREEMPTED_REASON,
    WINDOW_SECONDS,
    Action,
    Disruption,
    EventIgnored,
    Outcome,
    PodSeen,
    ReclaimSeen,
    Record,
    Tracker,
)
from webhook.engine.decision import NamespaceMeta, Obj
from webhook.engine.policy import Policy
from webhook.engine.workloads import string_map
from webhook.kube.client import Cluster, ClusterError, path
from webhook.kube.clock import Clock, format_time
from webhook.kube.lease import LeaderElector, LeaseSettings
from webhook.kube.reflector import Reflector
from webhook.loading import gcpause

log = structlog.get_logger(component="webhook.cluster.observer")

COMPONENT = "preemptguard-observer"
REPORTING_CONTROLLER = "preemptguard.together.ai/observer"
PREEMPTED_EVENTS = f"reason={PREEMPTED_REASON},involvedObject.kind=Node"
REASONS = {
    Outcome.EXITED_IN_TIME: ("ReclaimExitedInTime", "Normal"),
    Outcome.GRACE_EXPIRED: ("ReclaimGraceExpired", "Warning"),
    Outcome.LOST_WITH_NODE: ("ReclaimLostWithNode", "Warning"),
}
NAMESPACE_TTL = 60.0
OWNERS_KEPT = 4096  # ReplicaSets whose Deployment is remembered

Reported = ReclaimSeen | Record | Disruption


@dataclass(frozen=True)
class ObserverSettings:
    lease: LeaseSettings
    identity: str
    leader_election: bool = True
    watch_seconds: int = 300
    audit_interval: float = 0.0  # seconds between periodic audits; 0: none
    audit_reports: bool = False
    # Where events about Nodes are recorded: the only TogetherPreempted Events trusted, and
    # where ReclaimObserved goes.
    node_event_namespace: str = NODE_EVENT_NAMESPACE
    # What the capacity gauges are computed with (refreshed with each periodic audit).
    capacity: CapacitySettings = capacity_live.DEFAULTS


class Observer:
    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        settings: ObserverSettings,
        metrics: ObserverMetrics,
        clock: Clock,
    ) -> None:
        self.cluster, self.policy, self.settings = cluster, policy, settings
        self.metrics, self.clock = metrics, clock
        self.tracker = Tracker(
            policy=policy, classify=self._classify, event_namespace=settings.node_event_namespace
        )
        self.elector = LeaderElector(cluster, settings.lease, settings.identity, clock)
        self.leading = threading.Event()
        self.synced = threading.Event()
        self._inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        # What the leader reports (Events, counts), kept for a while by a follower.
        self._pending: collections.deque[tuple[float, Reported]] = collections.deque()
        self._namespaces: dict[str, tuple[float, NamespaceMeta]] = {}
        self._owners: dict[str, OwnerRef | None] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- running ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Observe until ``stop`` is set; raises ``ClusterError`` when the first list fails."""
        self._stop = stop
        versions = self._initial_lists()
        self.synced.set()
        log.info(
            "observer_started",
            identity=self.settings.identity,
            source=self.cluster.source,
            lease=f"{self.settings.lease.namespace}/{self.settings.lease.name}",
            nodes=len(self.tracker.nodes),
            open_reclaims=len(self.tracker.reclaims),
        )
        follows: tuple[tuple[str, str, dict[str, str]], ...] = (
            ("nodes", path("nodes"), {}),
            ("events", self._events_path, {"fieldSelector": PREEMPTED_EVENTS}),
            ("pods", path("pods"), {}),
        )
        for label, where, params in follows:
            self._spawn(f"watch-{label}", self._follow, label, where, params, versions[label])
        self._spawn("leader", self._lead)
        if self.settings.audit_interval > 0:
            self._spawn("audit", self._audit_loop)
        try:
            while not stop.is_set():
                self.step(timeout=0.5)
        finally:
            self.elector.release()
            self.metrics.leader.set(0)

    def step(self, timeout: float = 0.0) -> None:
        """Apply what the watches delivered, then the clock's decisions (one loop turn)."""
        try:
            item = self._inbox.get(timeout=timeout) if timeout else self._inbox.get_nowait()
        except queue.Empty:
            item = None
        while item is not None:
            try:
                self._apply(item)
            except Exception:  # one odd object must not stop the observer
                log.exception("event_not_handled", item=str(item[:3])[:300])
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                item = None
        self._handle(self.tracker.tick(self.clock.now()))
        self.metrics.pods_held.labels(held="on-node").set(len(self.tracker.pods))
        self.metrics.pods_held.labels(held="deleted").set(len(self.tracker.gone))

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    @property
    def _events_path(self) -> str:
        # Only there: an Event a tenant writes in its own namespace never reaches the observer.
        return path("events", namespace=self.settings.node_event_namespace)

    def _initial_lists(self) -> dict[str, str]:
        """Nodes, then pods, then Events: a reclaim the Events reveal finds its pods known."""
        now = self.clock.now()
        nodes = self.cluster.collect(path("nodes"), inventory.lean)
        self._handle(self.tracker.replace_nodes(nodes.items, now))
        pods = self.cluster.collect(path("pods"), self._tracked)
        self._handle(self.tracker.replace_pods(pods.items, now))
        events = self.cluster.collect(
            self._events_path, inventory.lean, params={"fieldSelector": PREEMPTED_EVENTS}
        )
        for event in events.items:
            self._handle(self.tracker.preempted_event(event, now))
        return {
            "nodes": nodes.resource_version,
            "events": events.resource_version,
            "pods": pods.resource_version,
        }

    def _tracked(self, pod: Obj) -> PodSeen | None:
        """What the tracker reads of a pod it follows (one bound to a preemptible node); None
        for the others. Made as each pod arrives in a list or a watch, so that no decoded pod
        outlives its page or its event. Called from the watch's thread too: a lookup in the
        tracker's nodes, which only the loop changes, and the pod's class."""
        facts = self.tracker.nodes.get(inventory.node_name_of(pod) or "")
        if facts is None or facts.compute_class != inventory.PREEMPTIBLE:
            return None
        try:
            return self.tracker.read(pod)
        except Exception:  # one odd pod must not stop its watch, or every relist after it
            log.exception("pod_not_read", namespace=inventory.namespace_of(pod),
                          pod=inventory.name_of(pod), uid=inventory.uid_of(pod))  # fmt: skip
            return None

    def _follow(self, label: str, where: str, params: Mapping[str, str], version: str) -> None:
        """Hand what the watch of ``where`` delivers, and each relist, to the loop."""

        def failed(exc: Exception, delay: float) -> None:
            self.metrics.watch_errors.labels(resource=label).inc()
            log.warning("watch_failed", resource=label, error=str(exc), retry_in_s=delay)

        take: Callable[[Obj], object | None] = self._tracked if label == "pods" else inventory.lean
        Reflector(
            cluster=lambda: self.cluster,
            where=where,
            take=take,
            params=params,
            version=version,
            listed=lambda items: self._inbox.put(("list", label, items)),
            changed=lambda kind, obj: self._inbox.put(("event", label, kind, obj)),
            failed=failed,
            watch_seconds=self.settings.watch_seconds,
        ).run(self._stop)

    def _apply(self, item: tuple[Any, ...]) -> None:
        now = self.clock.now()
        if item[0] == "lead":
            self._handle([])  # what was seen before this replica led, replayed
            return
        what, label = item[0], item[1]
        if what == "list":
            items = item[2]
            if label == "nodes":
                self._handle(self.tracker.replace_nodes(items, now))
            elif label == "pods":
                self._handle(self.tracker.replace_pods(items, now))
            else:
                for event in items:
                    self._handle(self.tracker.preempted_event(event, now))
            return
        kind, obj = item[2], item[3]
        if label == "nodes":
            self._handle(self.tracker.node(kind, obj, now))
        elif label == "pods":
            self._handle(self.tracker.pod(kind, obj, now))
        elif kind in ("ADDED", "MODIFIED"):
            self._handle(self.tracker.preempted_event(obj, now))

    # --- leading ----------------------------------------------------------------------------

    def _lead(self) -> None:
        while not self._stop.is_set():
            leading = self.elector.step() if self.settings.leader_election else True
            if leading and not self.leading.is_set():
                log.info("observer_leading", identity=self.settings.identity)
                self.leading.set()
                self._inbox.put(("lead",))
            elif not leading and self.leading.is_set():
                log.warning("observer_not_leading", identity=self.settings.identity)
                self.leading.clear()
            self.metrics.leader.set(1 if leading else 0)
            self._stop.wait(self.settings.lease.retry)

    def _handle(self, actions: list[Action]) -> None:
        now = self.clock.now()
        horizon = WINDOW_SECONDS + GRACE_SLACK + 60
        for action in actions:
            if isinstance(action, EventIgnored):
                _ignored(action)  # told by every replica, once: nothing is written or counted
            else:
                self._pending.append((now, action))
        while self._pending and now - self._pending[0][0] > horizon:
            self._pending.popleft()
        if not self.leading.is_set():
            return
        # The pods first: each write before them is time they may spend exiting unmarked.
        due = sorted(self._pending, key=lambda item: not isinstance(item[1], Disruption))
        self._pending = collections.deque(due)
        while self._pending:
            _, action = self._pending.popleft()
            if isinstance(action, Disruption):
                self._disrupt(action)
            elif isinstance(action, ReclaimSeen):
                self._reclaim(action)
            else:
                self._record(action)

    def _disrupt(self, action: Disruption) -> None:
        """Give the pod ``DisruptionTarget`` unless it went, finished or carries it already
        (marked by another replica, a drill, or Kubernetes itself) since it was handed out."""
        view = self.tracker.pods.get(action.uid)
        if view is None or view.last.marked or view.last.done:
            return
        where = {"namespace": action.namespace, "pod": action.name, "uid": action.uid,
                 "node": action.node}  # fmt: skip
        message = disruption.reclaim_message(action.node, WINDOW_SECONDS)
        try:
            disruption.mark(self.cluster, action.namespace, action.name, action.uid, message,
                            self.clock.now())  # fmt: skip
        except ClusterError as exc:
            if exc.not_found or exc.conflict:  # gone, or its name taken by another pod
                log.info("pod_not_marked", **where, error=str(exc))
                return
            self.metrics.write_failures.inc()
            log.warning("pod_not_marked", **where, error=str(exc))
            return
        self.metrics.marked.inc()
        log.info("pod_marked", **where, condition=disruption.CONDITION, reason=disruption.REASON,
                 reclaim=action.reclaim)  # fmt: skip

    def _reclaim(self, seen: ReclaimSeen) -> None:
        reclaim = seen.reclaim
        node = self.tracker.nodes.get(reclaim.node)
        involved = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": reclaim.node,
            "uid": node.uid if node else "",
        }
        # Counted now, not when the reclaim was recognised: the pods may have been listed since.
        # More may follow (a pod deleted later), hence "so far".
        displaced = self.tracker.displaced_so_far(seen)
        message = (
            f"reclaim of preemptible node {reclaim.node} recognised ({reclaim.trigger.value}): "
            f"{displaced} {'pod' if displaced == 1 else 'pods'} displaced so far, each reported "
            f"on its owner when it goes; the provider removes the node {WINDOW_SECONDS} s "
            "after a reclaim begins"
        )
        # Named after the node's uid, whichever of the Event or the cordon came first.
        name = f"{reclaim.node}.preemptguard-reclaim-{_suffix(reclaim.key)}"
        written = self._event(self.settings.node_event_namespace, name, involved,
                              "ReclaimObserved", "Warning", message)  # fmt: skip
        if written is False:
            return  # reported before (by this replica before a restart, or by another)
        self.metrics.reclaims.labels(trigger=reclaim.trigger.value).inc()
        log.info(
            "reclaim",
            node=reclaim.node,
            trigger=reclaim.trigger.value,
            key=reclaim.key,
            started=format_time(reclaim.started),
            displaced=displaced,
            event_written=written is True,
        )

    def _record(self, record: Record) -> None:
        pod = record.pod
        owner = self._owner(pod.owner) if pod.owner is not None else None
        involved = owner or OwnerRef(api_version="v1", kind="Pod", name=pod.name, uid=pod.uid,
                                     namespace=pod.namespace)  # fmt: skip
        reason, kind = REASONS[record.outcome]
        # Named after the pod alone, so that every replica writes the same name whatever owner
        # it found: the second write fails (409) and nothing is counted twice. A pod judged
        # while still there, undeleted, may be judged again by its deletion in a later
        # reclaim: that judgement has a name of its own.
        suffix = "-undeleted" if record.standing else ""
        if record.completed:
            self._completed(record, involved)
        name = f"{pod.name[: 200 - len(suffix)]}.preemptguard-{pod.uid}{suffix}"
        written = self._event(pod.namespace, name, involved.as_reference(), reason, kind,
                              record.message())  # fmt: skip
        if written is False:
            return
        self.metrics.displaced.labels(
            workload_class=pod.workload_class, outcome=record.outcome.value
        ).inc()
        if record.seconds is not None and record.outcome is not Outcome.LOST_WITH_NODE:
            self.metrics.exit_seconds.labels(workload_class=pod.workload_class).observe(
                record.seconds
            )
        log.info(
            "displaced_pod",
            namespace=pod.namespace,
            pod=pod.name,
            uid=pod.uid,
            node=pod.node,
            workload_class=pod.workload_class,
            grace_seconds=pod.grace,
            checkpoint_seconds=pod.checkpoint,
            sigterm=format_time(pod.sigterm),
            outcome=record.outcome.value,
            exit_seconds=round(record.seconds, 1) if record.seconds is not None else None,
            owner=f"{involved.kind}/{involved.name}",
            reclaim=pod.reclaim,
            message=record.message(),
            event_written=written is True,
        )

    def _completed(self, record: Record, involved: OwnerRef) -> None:
        """A pod that succeeded during the reclaim: an Event on its owner (named after the pod,
        so written and counted once), a count and a log line."""
        pod = record.pod
        suffix = "-completed"
        name = f"{pod.name[: 200 - len(suffix)]}.preemptguard-{pod.uid}{suffix}"
        message = record.completed_message()
        written = self._event(pod.namespace, name, involved.as_reference(),
                              "CompletedDuringReclaim", "Normal", message)  # fmt: skip
        if written is False:
            return
        self.metrics.completed.labels(workload_class=pod.workload_class).inc()
        log.info(
            "completed_during_reclaim",
            namespace=pod.namespace,
            pod=pod.name,
            uid=pod.uid,
            node=pod.node,
            workload_class=pod.workload_class,
            owner=f"{involved.kind}/{involved.name}",
            reclaim=pod.reclaim,
            message=message,
            event_written=written is True,
        )

    def _event(
        self,
        namespace: str,
        name: str,
        involved: Mapping[str, str],
        reason: str,
        kind: str,
        message: str,
    ) -> bool | None:
        """Write an Event: True when written, False when it exists (already reported), None
        when it could not be written (counted, logged; the outcome is still reported)."""
        stamp = format_time(self.clock.now())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {**involved, "namespace": involved.get("namespace") or namespace}
            if involved.get("kind") != "Node"
            else dict(involved),
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self.settings.identity[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.cluster.create(path("events", namespace=namespace), event)
        except ClusterError as exc:
            if exc.conflict:
                return False
            self.metrics.write_failures.inc()
            log.warning("event_not_written", name=name, namespace=namespace, error=str(exc))
            return None
        return True

    def _owner(self, ref: OwnerRef) -> OwnerRef:
        """The object to tell: a ReplicaSet's Deployment, else the pod's own controller."""
        if ref.kind != "ReplicaSet":
            return ref
        key = f"{ref.namespace}/{ref.uid}"
        if key not in self._owners:
            try:
                rs = self.cluster.get(
                    path("replicasets", group="apps", namespace=ref.namespace, name=ref.name)
                )
                owner = inventory.controller_ref(rs)
                found = owner if owner is not None and owner.kind == "Deployment" else None
            except ClusterError:
                found = None
            if len(self._owners) >= OWNERS_KEPT:  # the oldest goes: memory stays flat
                del self._owners[next(iter(self._owners))]
            self._owners[key] = found
        return self._owners[key] or ref

    # --- classifying ------------------------------------------------------------------------

    def _classify(self, pod: Obj) -> str:
        return inventory.pod_class(pod, self.policy, self._namespace)

    def _namespace(self, namespace: str) -> NamespaceMeta:
        now = self.clock.now()
        cached = self._namespaces.get(namespace)
        if cached is not None and now - cached[0] < NAMESPACE_TTL:
            return cached[1]
        try:
            ns = self.cluster.get(path("namespaces", name=namespace))
            meta = inventory.meta_of(ns)
            found = NamespaceMeta(
                annotations=string_map(meta.get("annotations")),
                labels=string_map(meta.get("labels")),
            )
        except ClusterError:
            found = NamespaceMeta()  # only a label on a metric depends on it
        self._namespaces[namespace] = (now, found)
        return found

    # --- the periodic audit -----------------------------------------------------------------

    def _audit_loop(self) -> None:
        while not self._stop.wait(self.settings.audit_interval):
            if self.leading.is_set():
                self.audit_once()
                capacity_live.refresh(
                    self.cluster, self.policy, self.metrics, self.clock, self.settings.capacity
                )

    def audit_once(self) -> auditing.Audit | None:
        """One audit of the whole cluster: its counts become metrics, and with
        ``audit_reports`` its PolicyReports are written. Failures are logged and counted."""
        started = time.monotonic()
        try:
            with gcpause.paused():  # many objects, no cycles (see cli.audit)
                result = auditing.audit_cluster(self.cluster, auditing.Scope(), self.policy)
        except ClusterError as exc:
            self.metrics.audit_runs.labels(result="error").inc()
            log.warning("audit_failed", error=str(exc))
            return None
        summary = result.summary()
        for code, count in summary["findings"].items():
            self.metrics.audit_findings.labels(code=code).set(count)
        self.metrics.audit_objects.labels(kind="pods").set(summary["pods"])
        self.metrics.audit_objects.labels(kind="workloads").set(summary["workloads"])
        written: list[str] = []
        if self.settings.audit_reports:
            try:
                written = reports.write(self.cluster, result, self.policy, now=self.clock.now())
            except ClusterError as exc:
                log.warning("audit_reports_not_written", error=str(exc))
        self.metrics.audit_runs.labels(result="ok").inc()
        duration = time.monotonic() - started
        self.metrics.audit_duration.set(duration)
        self.metrics.audit_timestamp.set(self.clock.now())
        log.info("audit", duration_s=round(duration, 2), reports=len(written), **summary)
        return result


def _ignored(ignored: EventIgnored) -> None:
    log.info(
        "preempted_event_ignored",
        name=f"{ignored.namespace}/{ignored.name}" if ignored.name else "",
        uid=ignored.uid,
        node=ignored.node,
        reason=f"not trusted to start a reclaim: {ignored.why}",
    )


def _suffix(key: str) -> str:
    """A key as a name segment: lowercase letters, digits and dashes."""
    cleaned = "".join(c if c.isalnum() else "-" for c in key.lower())
    return cleaned.strip("-")[:60] or "reclaim"
