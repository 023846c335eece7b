"""``preemptguard capacity``: GPUs by node class and workload class, computed from what the
cluster lists (nodes, pods, Events) and nothing else: no provider API. Pure: the lists, the
time and the settings in, a ``Capacity`` out.

- **GPUs**: ``nvidia.com/gpu`` in each node's ``status.allocatable``, by node class (the
  policy's label; unlabelled nodes are standard).
- **Requested**: the GPUs of pods bound to a node and not finished (they hold the GPUs, whatever
  their phase), by the class the pod is reported as (``inventory.pod_class``: its
  ``together.ai/placement`` record, else the policy's classification, never less critical than
  the policy finds it; the observer and the drill report classes the same way) and by the class
  of its node (``unknown``: a node no longer listed). A pod's GPUs are what the scheduler
  counts: the larger of its containers' sum and any init container's (sidecars included).
- **Pending**: the GPUs of pods not yet bound, not being deleted, of a class that preemptible
  capacity would take (placement ``preemptible`` or ``prefer-preemptible``: interruptible,
  flexible).
- **Fallback**: the GPUs of ``prefer-preemptible`` pods (flexible) bound to standard nodes,
  which could move back to preemptible capacity.
- **Reclaims** in the window: trusted ``TogetherPreempted`` Events (``reclaims.untrusted``),
  once per node; **displaced pods**: the outcome Events the observer writes for each displaced
  pod, by outcome. Both only as long as the API server keeps Events (``--event-ttl``, 1 h by
  default).
- **GPU-hours** in the window, by class and node class: each pod's GPUs times the part of its
  run inside the window, from ``status.startTime`` to its last container's ``finishedAt`` (now
  while it runs). Pods the cluster no longer lists (deleted, garbage-collected) count nothing.
- **Suggested preemptible target**, from the preemptible GPUs allocatable now (what the cluster
  shows of the provider's ``allocated_preemptible_gpus``): raised by the pending GPUs that fill
  whole preemptible nodes; else lowered by the GPUs of the preemptible nodes that have held no
  GPU pod for ``idle_for`` (since the node was created or its last GPU pod finished).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from webhook.cluster import inventory
from webhook.cluster.inventory import PREEMPTIBLE, STANDARD, UNCLASSIFIED, UNKNOWN
from webhook.cluster.reclaims import (
    NODE_EVENT_NAMESPACE,
    PREEMPTED_REASON,
    TERMINAL_PHASES,
    Outcome,
    event_time,
    untrusted,
)
from webhook.engine.decision import Obj
from webhook.engine.policy import Placement, Policy
from webhook.engine.workloads import mapping_at
from webhook.kube.clock import parse_time

GPU = "nvidia.com/gpu"
HOUR = 3600.0
NODE_CLASSES = (PREEMPTIBLE, STANDARD)
# Where preemptible capacity would take a pending pod.
TAKEN_BY_PREEMPTIBLE = (Placement.PREEMPTIBLE, Placement.PREFER_PREEMPTIBLE)
# The Events the observer writes on a displaced pod's owner (``observer.REASONS``, which
# imports this module's readers: named here), the outcome each reports, and their source.
OUTCOME_REASONS = {
    "ReclaimExitedInTime": Outcome.EXITED_IN_TIME,
    "ReclaimGraceExpired": Outcome.GRACE_EXPIRED,
    "ReclaimLostWithNode": Outcome.LOST_WITH_NODE,
}
OBSERVER_COMPONENT = "preemptguard-observer"

Cell = tuple[str, str]  # (workload class, node class)
N = TypeVar("N", int, float)


@dataclass(frozen=True)
class Settings:
    window: float = 24 * HOUR  # seconds back from now: reclaims, displaced pods, GPU-hours
    idle_for: float = HOUR  # a preemptible node without a GPU pod this long is idle
    price_ratio: float = 0.5  # a preemptible GPU-hour's price over an on-demand one's
    event_namespace: str = NODE_EVENT_NAMESPACE


@dataclass(frozen=True)
class Listed:
    """What the cluster listed: every node, every pod (finished ones too), the namespaces, and
    the Events counted (TogetherPreempted, the observer's outcomes)."""

    nodes: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()
    namespaces: Sequence[Obj] = ()
    events: Sequence[Obj] = ()


@dataclass(frozen=True, kw_only=True)
class NodeClassGpus:
    nodes: int
    gpus: int
    requested: int

    @property
    def free(self) -> int:
        return max(self.gpus - self.requested, 0)


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    """The preemptible target suggested, from the preemptible GPUs allocatable now."""

    current: int
    target: int
    gpus_per_node: int | None
    reason: str

    @property
    def change(self) -> int:
        return self.target - self.current


@dataclass(frozen=True, kw_only=True)
class Capacity:
    now: float
    settings: Settings
    classes: tuple[str, ...]  # every workload class reported, the policy's first
    by_node_class: Mapping[str, NodeClassGpus]
    requested: Mapping[Cell, int]
    pending: Mapping[str, int]
    fallback: Mapping[str, int]
    reclaims: int
    displaced: Mapping[str, int]  # outcome -> pods
    gpu_hours: Mapping[Cell, float]
    idle_nodes: tuple[str, ...]
    suggestion: Suggestion

    @property
    def node_classes(self) -> tuple[str, ...]:
        """Preemptible and standard, and ``unknown`` when a pod names a node not listed."""
        cells = (*self.requested, *self.gpu_hours)
        extra = (UNKNOWN,) if any(c[1] == UNKNOWN for c in cells) else ()
        return (*NODE_CLASSES, *extra)

    @property
    def pending_gpus(self) -> int:
        return sum(self.pending.values())

    @property
    def fallback_gpus(self) -> int:
        return sum(self.fallback.values())

    def hours_on(self, node_class: str) -> float:
        return sum(h for (_, nc), h in self.gpu_hours.items() if nc == node_class)

    @property
    def total_hours(self) -> float:
        return sum(self.gpu_hours.values())

    @property
    def on_demand_equivalent(self) -> float:
        """What the GPU-hours cost, in on-demand GPU-hours: preemptible ones at the price
        ratio, the others (unknown nodes too: no saving claimed) at 1."""
        preemptible = self.hours_on(PREEMPTIBLE)
        return self.total_hours - preemptible + preemptible * self.settings.price_ratio

    @property
    def saved(self) -> float:
        """On-demand GPU-hours saved by running on preemptible capacity."""
        return self.total_hours - self.on_demand_equivalent


def gpus_of(obj: Obj) -> int:
    """The GPUs a pod requests, as the scheduler counts them: the larger of the app
    containers' sum (with the sidecars) and each init container's (with the sidecars started
    before it)."""
    spec = mapping_at(obj, "spec")
    sidecars = peak = 0
    for container in _containers(spec.get("initContainers")):
        wanted = _container_gpus(container)
        if container.get("restartPolicy") == "Always":
            sidecars += wanted
        else:
            peak = max(peak, sidecars + wanted)
    apps = sum(_container_gpus(c) for c in _containers(spec.get("containers")))
    return max(peak, sidecars + apps)


def _containers(value: object) -> list[Obj]:
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def _container_gpus(container: Obj) -> int:
    """Requests, else limits (an extended resource's request defaults to its limit)."""
    resources = mapping_at(container, "resources")
    for part in ("requests", "limits"):
        found = mapping_at(resources, part).get(GPU)
        if found is not None:
            return quantity(found)
    return 0


def quantity(value: object) -> int:
    """A whole-number quantity (``8``, ``"8"``, ``"2k"``); 0 for anything else."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    text = str(value).strip()
    scale = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isascii() and digits.isdigit() else 0


def node_gpus(node: Obj) -> int:
    return quantity(mapping_at(mapping_at(node, "status"), "allocatable").get(GPU, 0))


def compute(listed: Listed, policy: Policy, now: float, settings: Settings) -> Capacity:
    """The capacity report of ``listed`` at ``now``."""
    node_class = {inventory.name_of(n): inventory.node_class(n, policy) for n in listed.nodes}
    lookup = inventory.namespace_lookup(listed.namespaces)
    gpu_pods = [(p, g) for p, g in ((p, gpus_of(p)) for p in listed.pods) if g > 0]
    classified = [(p, g, inventory.pod_class(p, policy, lookup)) for p, g in gpu_pods]
    tally = _tally(classified, node_class, policy, now, settings)
    by_node_class = _by_node_class(listed.nodes, node_class, tally.requested)
    idle = idle_nodes(listed.nodes, [p for p, _ in gpu_pods], node_class, now, settings)
    idle_gpus = sum(node_gpus(n) for n in listed.nodes if inventory.name_of(n) in idle)
    suggestion = suggest(
        by_node_class[PREEMPTIBLE].gpus,
        sum(tally.pending.values()),
        gpus_per_node(listed.nodes, node_class),
        (len(idle), idle_gpus),
        settings,
    )
    # What ``pod_class`` reports: a class of the policy, or unclassified.
    classes = (*policy.classes, UNCLASSIFIED)
    return Capacity(
        now=now,
        settings=settings,
        classes=classes,
        by_node_class=by_node_class,
        requested=_full(tally.requested, classes),
        pending={c: tally.pending[c] for c in classes if _taken_by_preemptible(c, policy)},
        fallback={c: tally.fallback(c, policy) for c in classes if _falls_back(c, policy)},
        reclaims=count_reclaims(listed.events, now, settings),
        displaced=count_displaced(listed.events, now, settings),
        gpu_hours={cell: round(h, 6) for cell, h in _full(tally.hours, classes).items()},
        idle_nodes=tuple(sorted(idle)),
        suggestion=suggestion,
    )


@dataclass
class _Tally:
    requested: Counter[Cell] = field(default_factory=Counter)
    pending: Counter[str] = field(default_factory=Counter)
    hours: defaultdict[Cell, float] = field(default_factory=lambda: defaultdict(float))

    def fallback(self, wclass: str, policy: Policy) -> int:
        """The GPUs of ``wclass`` on standard nodes, when it prefers preemptible ones."""
        return self.requested[(wclass, STANDARD)] if _falls_back(wclass, policy) else 0


def _tally(
    classified: Iterable[tuple[Obj, int, str]],
    node_class: Mapping[str, str],
    policy: Policy,
    now: float,
    settings: Settings,
) -> _Tally:
    """Each GPU pod counted where it belongs: requested where it is bound (and not finished),
    pending (unbound) when preemptible capacity would take it, its GPU-hours where it ran."""
    tally = _Tally()
    for pod, gpus, wclass in classified:
        node = inventory.node_name_of(pod)
        if node is None:
            if _waiting(pod) and _taken_by_preemptible(wclass, policy):
                tally.pending[wclass] += gpus
            continue
        where = node_class.get(node, UNKNOWN)
        if not finished(pod):
            tally.requested[(wclass, where)] += gpus
        tally.hours[(wclass, where)] += gpus * _run_hours(pod, now, settings.window)
    return tally


def finished(pod: Obj) -> bool:
    return inventory.phase_of(pod) in TERMINAL_PHASES


def _waiting(pod: Obj) -> bool:
    """Pending, unbound, and not being deleted."""
    deleting = inventory.meta_of(pod).get("deletionTimestamp")
    return inventory.phase_of(pod) == "Pending" and not deleting


def _taken_by_preemptible(wclass: str, policy: Policy) -> bool:
    return inventory.placement_of(wclass, policy) in TAKEN_BY_PREEMPTIBLE


def _falls_back(wclass: str, policy: Policy) -> bool:
    return inventory.placement_of(wclass, policy) is Placement.PREFER_PREEMPTIBLE


def _full(table: Mapping[Cell, N], classes: Sequence[str]) -> dict[Cell, N | int]:
    """Every class on every node class (zeros included), ``unknown`` only where it counts."""
    node_classes = [*NODE_CLASSES, *sorted({nc for _, nc in table} - set(NODE_CLASSES))]
    return {(c, nc): table.get((c, nc), 0) for c in classes for nc in node_classes}


def _by_node_class(
    nodes: Sequence[Obj], node_class: Mapping[str, str], requested: Mapping[Cell, int]
) -> dict[str, NodeClassGpus]:
    found: dict[str, NodeClassGpus] = {}
    for nc in NODE_CLASSES:
        members = [n for n in nodes if node_class[inventory.name_of(n)] == nc]
        found[nc] = NodeClassGpus(
            nodes=len(members),
            gpus=sum(node_gpus(n) for n in members),
            requested=sum(g for (_, where), g in requested.items() if where == nc),
        )
    return found


def started_at(pod: Obj) -> float | None:
    """When the kubelet started the pod (``status.startTime``)."""
    return parse_time(mapping_at(pod, "status").get("startTime"))


def finished_at(pod: Obj) -> float | None:
    """When a finished pod's last container ended; None when no container says."""
    status = mapping_at(pod, "status")
    ends = [
        parse_time(mapping_at(mapping_at(s, "state"), "terminated").get("finishedAt"))
        for key in ("initContainerStatuses", "containerStatuses")
        for s in _containers(status.get(key))
    ]
    known = [e for e in ends if e is not None]
    return max(known) if known else None


def _run_hours(pod: Obj, now: float, window: float) -> float:
    """The hours of the pod's run inside the window (0 when the cluster does not say)."""
    start = started_at(pod)
    end = finished_at(pod) if finished(pod) else now
    if start is None or end is None:
        return 0.0
    return max(min(end, now) - max(start, now - window), 0.0) / HOUR


def idle_nodes(
    nodes: Sequence[Obj],
    gpu_pods: Sequence[Obj],
    node_class: Mapping[str, str],
    now: float,
    settings: Settings,
) -> set[str]:
    """The schedulable preemptible GPU nodes that have held no GPU pod for ``idle_for``: none
    bound now, and the last one finished (or the node created) that long ago."""
    busy: set[str] = set()
    last_end: dict[str, float] = {}
    for pod in gpu_pods:
        bound = inventory.node_name_of(pod)
        if bound is None:
            continue
        if not finished(pod):
            busy.add(bound)
        else:
            end = finished_at(pod) or now  # a finished pod that does not say when: just now
            last_end[bound] = max(last_end.get(bound, end), end)
    idle: set[str] = set()
    for node in nodes:
        name = inventory.name_of(node)
        if node_class[name] != PREEMPTIBLE or node_gpus(node) == 0 or name in busy:
            continue
        if mapping_at(node, "spec").get("unschedulable") is True:
            continue  # cordoned: being reclaimed or drained, its GPUs go anyway
        created = parse_time(inventory.meta_of(node).get("creationTimestamp")) or now
        if now - max(created, last_end.get(name, created)) >= settings.idle_for:
            idle.add(name)
    return idle


def gpus_per_node(nodes: Sequence[Obj], node_class: Mapping[str, str]) -> int | None:
    """The GPUs of a preemptible node: the most common count among them (the larger on a tie);
    the standard nodes' when there is no preemptible GPU node; None without GPU nodes."""
    for wanted in NODE_CLASSES:
        counts = Counter(
            node_gpus(n)
            for n in nodes
            if node_class[inventory.name_of(n)] == wanted and node_gpus(n) > 0
        )
        if counts:
            return max(counts, key=lambda gpus: (counts[gpus], gpus))
    return None


def suggest(
    current: int,
    pending: int,
    per_node: int | None,
    idle: tuple[int, int],
    settings: Settings,
) -> Suggestion:
    """From ``current`` preemptible GPUs: raise by the ``pending`` GPUs that fill whole nodes
    of ``per_node``; with nothing pending, lower by the GPUs of the ``idle`` nodes (how many,
    their GPUs); else keep."""
    idle_count, idle_gpus = idle
    idle_for = duration(settings.idle_for)
    if per_node and pending >= per_node:
        nodes = pending // per_node
        raise_by = nodes * per_node
        reason = (
            f"raise by {raise_by} GPUs ({_count(nodes, 'node')} of {per_node} GPUs): "
            f"{pending} GPUs of pods that preemptible capacity would take are pending"
        )
        return Suggestion(current=current, target=current + raise_by, gpus_per_node=per_node,
                          reason=reason)  # fmt: skip
    if pending == 0 and idle_count:
        reason = (
            f"lower by {idle_gpus} GPUs: {_count(idle_count, 'preemptible node')} held no GPU "
            f"pod for {idle_for} or more, and nothing is pending"
        )
        return Suggestion(current=current, target=max(current - idle_gpus, 0),
                          gpus_per_node=per_node, reason=reason)  # fmt: skip
    size = f"a node of {per_node} GPUs" if per_node else "a node (no GPU node to size one by)"
    reason = (
        f"keep: {pending} GPUs pending, less than {size}; no preemptible node idle for {idle_for}"
        if pending
        else f"keep: nothing pending, no preemptible node idle for {idle_for}"
    )
    return Suggestion(current=current, target=current, gpus_per_node=per_node, reason=reason)


def count_reclaims(events: Iterable[Obj], now: float, settings: Settings) -> int:
    """Trusted ``TogetherPreempted`` Events in the window, once per node (its uid, else its
    name): the observer's own test of trust, without the cordon it cannot see afterwards."""
    nodes: set[str] = set()
    for event in events:
        involved = mapping_at(event, "involvedObject")
        if event.get("reason") != PREEMPTED_REASON or involved.get("kind") != "Node":
            continue
        if untrusted(event, settings.event_namespace) is None and _in_window(event, now, settings):
            nodes.add(str(involved.get("uid") or involved.get("name")))
    return len(nodes)


def count_displaced(events: Iterable[Obj], now: float, settings: Settings) -> dict[str, int]:
    """The observer's outcome Events in the window, by outcome (one per displaced pod)."""
    counts = {outcome.value: 0 for outcome in Outcome}
    for event in events:
        outcome = OUTCOME_REASONS.get(str(event.get("reason")))
        source = mapping_at(event, "source").get("component")
        ours = outcome is not None and source == OBSERVER_COMPONENT
        if ours and outcome is not None and _in_window(event, now, settings):
            counts[outcome.value] += 1
    return counts


def _in_window(event: Obj, now: float, settings: Settings) -> bool:
    at = event_time(event)
    return at is not None and now - settings.window <= at <= now + 60


def duration(seconds: float) -> str:
    """In the largest whole unit, days from two on: ``90 s``, ``45 min``, ``24 h``, ``7 d``."""
    for unit, size in (("d", 86400.0), ("h", HOUR), ("min", 60.0)):
        if seconds >= size * (2 if unit == "d" else 1) and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
