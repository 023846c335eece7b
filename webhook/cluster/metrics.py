"""Prometheus metrics of ``preemptguard observe``, in a registry of its own, on plain HTTP."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)

from webhook.exposition import RegistryMetrics

# Exit times against the 300 s window: a checkpoint takes 22 s to 4 min (DESIGN §1).
EXIT_BUCKETS = (5, 10, 20, 30, 45, 60, 90, 120, 150, 180, 210, 240, 270, 300, 330, 600)


class ObserverMetrics(RegistryMetrics):
    """Reclaims, displaced pods and their exit times; the periodic audit's counts."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        ProcessCollector(registry=reg)
        self.reclaims = Counter(
            "preemptguard_reclaims",
            "Reclaims of preemptible nodes recognised, by what revealed them "
            "(event: TogetherPreempted; cordon: a cordoned node whose pods are being deleted).",
            ["trigger"],
            registry=reg,
        )
        self.displaced = Counter(
            "preemptguard_displaced_pods",
            "Pods displaced by a reclaim, by workload class and outcome "
            "(exited-in-time, grace-expired, lost-with-node).",
            ["workload_class", "outcome"],
            registry=reg,
        )
        self.exit_seconds = Histogram(
            "preemptguard_displaced_pod_exit_seconds",
            "Seconds from a displaced pod's SIGTERM to its exit, against the 300 s window.",
            ["workload_class"],
            buckets=EXIT_BUCKETS,
            registry=reg,
        )
        self.marked = Counter(
            "preemptguard_reclaim_pods_marked",
            "Pods of a node being reclaimed given the DisruptionTarget condition before they "
            "exited (so that a Job's podFailurePolicy can ignore their failure).",
            registry=reg,
        )
        self.completed = Counter(
            "preemptguard_reclaim_pods_completed",
            "Displaced pods that completed successfully (exit 0) after their node's reclaim "
            "began, by workload class.",
            ["workload_class"],
            registry=reg,
        )
        self.leader = Gauge(
            "preemptguard_observer_leader",
            "1 while this replica holds the observer's Lease and acts on reclaims.",
            registry=reg,
        )
        self.watch_errors = Counter(
            "preemptguard_observer_watch_errors",
            "Failed lists or broken watches, by resource (each followed by a relist).",
            ["resource"],
            registry=reg,
        )
        self.write_failures = Counter(
            "preemptguard_observer_write_failures",
            "Events or pod conditions the observer could not write (the outcome is still "
            "counted and logged).",
            registry=reg,
        )
        self.audit_findings = Gauge(
            "preemptguard_audit_findings",
            "Findings of the last periodic audit, by code.",
            ["code"],
            registry=reg,
        )
        self.audit_objects = Gauge(
            "preemptguard_audit_objects",
            "Objects judged by the last periodic audit, by kind (pods, workloads).",
            ["kind"],
            registry=reg,
        )
        self.audit_runs = Counter(
            "preemptguard_audit_runs",
            "Periodic audits, by result (ok, error).",
            ["result"],
            registry=reg,
        )
        self.audit_duration = Gauge(
            "preemptguard_audit_duration_seconds", "Duration of the last audit.", registry=reg
        )
        self.audit_timestamp = Gauge(
            "preemptguard_audit_last_success_timestamp_seconds",
            "When the last periodic audit finished (Unix time).",
            registry=reg,
        )
