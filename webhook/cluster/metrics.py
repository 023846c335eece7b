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

GPUS = "nvidia.com/gpu"

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
        self.pods_held = Gauge(
            "preemptguard_observer_pods_held",
            "Pods the observer holds in memory: those of preemptible nodes (on-node), and "
            "those deleted in the last 600 s that no reclaim has claimed yet (deleted).",
            ["held"],
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
        self.capacity = CapacityGauges(reg)


class CapacityGauges:
    """What ``preemptguard capacity`` reports, with its default settings (webhook.cluster
    .capacity says what each figure counts)."""

    def __init__(self, reg: CollectorRegistry) -> None:
        self.nodes = Gauge(
            "preemptguard_capacity_nodes", "Nodes, by node class.", ["node_class"], registry=reg
        )
        self.gpus = Gauge(
            "preemptguard_capacity_gpus",
            f"GPUs ({GPUS}) allocatable on the nodes, by node class.",
            ["node_class"],
            registry=reg,
        )
        self.requested = Gauge(
            "preemptguard_capacity_requested_gpus",
            "GPUs requested by pods bound to a node and not finished, by workload class and "
            "node class (unknown: a node no longer listed).",
            ["workload_class", "node_class"],
            registry=reg,
        )
        self.pending = Gauge(
            "preemptguard_capacity_pending_gpus",
            "GPUs requested by unbound pending pods that preemptible capacity would take, by "
            "workload class.",
            ["workload_class"],
            registry=reg,
        )
        self.fallback = Gauge(
            "preemptguard_capacity_fallback_gpus",
            "GPUs of prefer-preemptible (flexible) pods on standard nodes, which could move "
            "back to preemptible capacity, by workload class.",
            ["workload_class"],
            registry=reg,
        )
        self.gpu_hours = Gauge(
            "preemptguard_capacity_gpu_hours",
            "GPU-hours of the pods the cluster lists, inside the window, by workload class "
            "and node class.",
            ["workload_class", "node_class"],
            registry=reg,
        )
        self.on_demand_equivalent = Gauge(
            "preemptguard_capacity_on_demand_equivalent_gpu_hours",
            "What the window's GPU-hours cost in on-demand GPU-hours (preemptible ones at "
            "the price ratio).",
            registry=reg,
        )
        self.saved = Gauge(
            "preemptguard_capacity_saved_gpu_hours",
            "On-demand GPU-hours saved in the window by running on preemptible capacity.",
            registry=reg,
        )
        self.reclaims = Gauge(
            "preemptguard_capacity_reclaims",
            "Reclaims in the window: trusted TogetherPreempted Events, once per node.",
            registry=reg,
        )
        self.displaced = Gauge(
            "preemptguard_capacity_displaced_pods",
            "Pods displaced in the window, by outcome (the observer's Events).",
            ["outcome"],
            registry=reg,
        )
        self.idle_nodes = Gauge(
            "preemptguard_capacity_idle_preemptible_nodes",
            "Preemptible GPU nodes that have held no GPU pod for the idle time.",
            registry=reg,
        )
        self.suggested = Gauge(
            "preemptguard_capacity_suggested_preemptible_gpus",
            "The preemptible target suggested (GPUs).",
            registry=reg,
        )
        self.window = Gauge(
            "preemptguard_capacity_window_seconds",
            "The window the GPU-hours, reclaims and displaced pods cover.",
            registry=reg,
        )
        self.labelled = (self.nodes, self.gpus, self.requested, self.pending, self.fallback,
                         self.gpu_hours, self.displaced)  # fmt: skip
