"""The capacity of the live cluster: what ``preemptguard capacity`` lists (``access.CAPACITY``),
and the same figures as the observer's gauges, refreshed by its leader at its audit interval.

One paginated list of each: nodes, namespaces, every pod (finished ones too: their GPU-hours;
only those that ask for GPUs are kept, page by page), the ``TogetherPreempted`` Events where
events about Nodes are recorded, and the observer's outcome Events (one list per reason,
filtered by the API server).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from webhook.cluster import capacity, inventory
from webhook.cluster.capacity import OUTCOME_REASONS, Capacity, Listed, Settings
from webhook.cluster.metrics import ObserverMetrics
from webhook.cluster.reclaims import PREEMPTED_REASON
from webhook.engine.decision import Obj
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster, ClusterError, path
from webhook.kube.clock import Clock
from webhook.loading import gcpause

log = structlog.get_logger(component="webhook.cluster.capacity")

PREEMPTED_EVENTS = f"reason={PREEMPTED_REASON},involvedObject.kind=Node"

DEFAULTS = Settings()

# Called with a kind and how many of it have been read so far.
Progress = Callable[[str, int], None]
Take = Callable[[Obj], Obj | None]


def _gpu_pod(pod: Obj) -> Obj | None:
    return inventory.lean(pod) if capacity.gpus_of(pod) > 0 else None


def read(cluster: Cluster, settings: Settings, progress: Progress | None = None) -> Listed:
    """Everything ``capacity.compute`` reads, page by page; raises ``ClusterError``."""

    def listed(
        where: str, kind: str, selector: str | None = None, take: Take = inventory.lean
    ) -> list[Obj]:
        params = {"fieldSelector": selector} if selector else None
        on_page = _counter(kind, progress)
        return cluster.collect(where, take, params=params, on_page=on_page).items

    nodes = listed(path("nodes"), "Node")
    namespaces = listed(path("namespaces"), "Namespace")
    # Only the pods that ask for GPUs count: the others are dropped page by page.
    pods = listed(path("pods"), "Pod", take=_gpu_pod)
    events = listed(path("events", namespace=settings.event_namespace), "Event", PREEMPTED_EVENTS)
    for reason in OUTCOME_REASONS:
        events += listed(path("events"), "Event", f"reason={reason}")
    return Listed(nodes=nodes, pods=pods, namespaces=namespaces, events=events)


def _counter(kind: str, progress: Progress | None) -> Callable[[int], None] | None:
    if progress is None:
        return None
    count = 0

    def on_page(items: int) -> None:
        nonlocal count
        count += items
        progress(kind, count)

    return on_page


def measure(
    cluster: Cluster,
    policy: Policy,
    now: Callable[[], float],
    settings: Settings = DEFAULTS,
    progress: Progress | None = None,
) -> Capacity:
    """Read the cluster and compute its capacity report, as of when the lists were read."""
    # Many objects, no cycles: the collector would only walk them again and again.
    with gcpause.paused():
        listed = read(cluster, settings, progress)
        return capacity.compute(listed, policy, now(), settings)


def publish(report: Capacity, metrics: ObserverMetrics) -> None:
    """The report as the observer's ``preemptguard_capacity_*`` gauges."""
    gauges = metrics.capacity
    for gauge in gauges.labelled:
        gauge.clear()  # a class or node class no longer reported goes
    for node_class, figures in report.by_node_class.items():
        gauges.nodes.labels(node_class=node_class).set(figures.nodes)
        gauges.gpus.labels(node_class=node_class).set(figures.gpus)
    for (wclass, node_class), gpus in report.requested.items():
        gauges.requested.labels(workload_class=wclass, node_class=node_class).set(gpus)
    for (wclass, node_class), hours in report.gpu_hours.items():
        gauges.gpu_hours.labels(workload_class=wclass, node_class=node_class).set(hours)
    for wclass, gpus in report.pending.items():
        gauges.pending.labels(workload_class=wclass).set(gpus)
    for wclass, gpus in report.fallback.items():
        gauges.fallback.labels(workload_class=wclass).set(gpus)
    for outcome, pods in report.displaced.items():
        gauges.displaced.labels(outcome=outcome).set(pods)
    gauges.reclaims.set(report.reclaims)
    gauges.on_demand_equivalent.set(report.on_demand_equivalent)
    gauges.saved.set(report.saved)
    gauges.idle_nodes.set(len(report.idle_nodes))
    gauges.suggested.set(report.suggestion.target)
    gauges.window.set(report.settings.window)


def refresh(
    cluster: Cluster,
    policy: Policy,
    metrics: ObserverMetrics,
    clock: Clock,
    settings: Settings = DEFAULTS,
) -> None:
    """Measure and publish; a failure is logged, and the gauges keep the last figures."""
    started = time.monotonic()
    try:
        report = measure(cluster, policy, clock.now, settings)
    except ClusterError as exc:
        log.warning("capacity_failed", error=str(exc))
        return
    publish(report, metrics)
    log.info(
        "capacity",
        duration_s=round(time.monotonic() - started, 2),
        preemptible_gpus=report.suggestion.current,
        pending_gpus=report.pending_gpus,
        suggested_preemptible_gpus=report.suggestion.target,
        reason=report.suggestion.reason,
    )
