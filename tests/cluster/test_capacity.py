"""``preemptguard capacity``: the pure computation on a small cluster whose figures are worked
out by hand below, the suggested target moving with pending demand (up in whole nodes) and
idle nodes (down), the command's text and JSON through the fake API server, and the observer's
gauges equal to the command's figures."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from tests.cluster import test_observer
from tests.cluster.conftest import namespace, node, pod
from tests.cluster.fake_apiserver import FakeApiServer, stamp
from webhook.cli.capacity import capacity_settings
from webhook.cli.main import main
from webhook.cli.observe import observe_command
from webhook.cluster import capacity, capacity_live, observer
from webhook.cluster.access import CAPACITY
from webhook.cluster.capacity import Capacity, Listed, Settings, compute, gpus_of
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster

Obj = dict[str, Any]
NOW = 1_900_000_000.0
H = 3600.0
TOLERATE: dict[str, Any] = {
    "tolerations": [{"key": "together.ai/compute-class", "operator": "Exists"}]
}


def gpu_node(name: str, compute_class: str | None, gpus: int, *, age: float = 3 * H,
             now: float = NOW) -> Obj:  # fmt: skip
    obj = node(name, compute_class)
    obj["metadata"]["creationTimestamp"] = stamp(now - age)
    obj["status"] = {"allocatable": {"cpu": "96", "nvidia.com/gpu": str(gpus)}}
    return obj


def gpu_pod(
    name: str,
    gpus: int,
    *,
    started: float | None = None,
    ended: float | None = None,
    ns: str = "team",
    now: float = NOW,
    **kwargs: Any,
) -> Obj:
    """A pod asking ``gpus`` GPUs; ``started``/``ended``: hours before ``now`` that the kubelet
    started it and its container finished."""
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    obj = pod(name, ns, containers=[{"name": "main", "image": "x", "resources": resources}],
              **kwargs)  # fmt: skip
    if started is not None:
        obj["status"]["startTime"] = stamp(now - started * H)
    if ended is not None:
        terminated = {"exitCode": 0, "finishedAt": stamp(now - ended * H)}
        obj["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": terminated}}]
    return obj


def event(reason: str, ns: str, hours_ago: float, *, node_name: str = "", uid: str = "",
          component: str = "", now: float = NOW) -> Obj:  # fmt: skip
    name = f"{reason}-{hours_ago}-{node_name}-{component}".lower().replace(".", "-")
    involved = (
        {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": uid}
        if node_name
        else {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": ns}
    )
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}", "namespace": ns, "uid": f"ev-{name}"},
        "involvedObject": involved,
        "reason": reason,
        "source": {"component": component or "provider"},
        "firstTimestamp": stamp(now - hours_ago * H),
        "lastTimestamp": stamp(now - hours_ago * H),
    }


def small_cluster(now: float = NOW) -> Listed:
    """Three preemptible nodes (8, 8 and 4 GPUs), a standard GPU node (8, labelled) and an
    unlabelled CPU node; the figures each pod adds are written beside it."""
    nodes = [
        gpu_node("pre-1", "preemptible", 8, now=now),
        gpu_node("pre-2", "preemptible", 8, now=now),  # idle since e finished, 2 h ago
        gpu_node("pre-3", "preemptible", 4, now=now),
        gpu_node("std-1", "standard", 8, now=now),
        gpu_node("std-2", None, 0, now=now),
    ]
    namespaces = [
        namespace("team"),
        namespace("batch", **{"together.ai/default-workload": "interruptible"}),
    ]
    pods = [
        # interruptible on preemptible: 4 GPUs for 2 h = 8 GPU-hours
        gpu_pod(
            "a", 4, started=2, workload="interruptible", node_name="pre-1", **TOLERATE, now=now
        ),
        # flexible on preemptible: 2 GPUs for 0.5 h = 1
        gpu_pod("b", 2, started=0.5, workload="flexible", node_name="pre-1", **TOLERATE, now=now),
        # flexible on standard: 2 GPUs, fallback; 2 for 1 h = 2
        gpu_pod("c", 2, started=1, workload="flexible", node_name="std-1", now=now),
        # serving on standard: started 48 h ago, 24 h of it in the window: 4 x 24 = 96
        gpu_pod("d", 4, started=48, workload="serving", node_name="std-1", now=now),
        # finished on pre-2, classified by its placement record: 8 GPUs for 1 h = 8
        gpu_pod(
            "e",
            8,
            started=3,
            ended=2,
            node_name="pre-2",
            phase="Succeeded",
            annotations={"together.ai/placement": "interruptible"},
            **TOLERATE,
            now=now,
        ),
        # pending: interruptible 8, flexible 4 (preemptible capacity takes them), serving not
        gpu_pod("f", 8, workload="interruptible", phase="Pending", now=now),
        gpu_pod("g", 4, workload="flexible", phase="Pending", now=now),
        gpu_pod("i", 2, workload="serving", phase="Pending", now=now),
        # no GPUs: nothing anywhere
        gpu_pod("h", 0, started=5, workload="serving", node_name="std-2", now=now),
        # interruptible by its namespace's default; 3 GPUs in an init container, 1 in the
        # app: 3; not started yet (no startTime): no GPU-hours
        gpu_pod("k", 1, ns="batch", node_name="pre-3", **TOLERATE, now=now),
        # on a node no longer listed: unknown node class, 1 GPU for 1 h
        gpu_pod(
            "l", 1, started=1, workload="interruptible", node_name="pre-9", **TOLERATE, now=now
        ),
    ]
    pods[9]["spec"]["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "3"}}}
    ]
    deleting = gpu_pod("j", 8, workload="interruptible", phase="Pending", now=now)
    deleting["metadata"]["deletionTimestamp"] = stamp(now)
    pods.append(deleting)  # being deleted: not pending
    events = [
        event("TogetherPreempted", "default", 2, node_name="pre-7", uid="u7", now=now),
        event("TogetherPreempted", "default", 1, node_name="pre-7", uid="u7", now=now),  # same
        event("TogetherPreempted", "team", 1, node_name="pre-6", uid="u6", now=now),  # forged
        event("TogetherPreempted", "default", 30, node_name="pre-8", uid="u8", now=now),  # old
        event("TogetherPreempted", "default", 0.2, node_name="pre-6", uid="u6", now=now),
        event("ReclaimExitedInTime", "team", 2, component="preemptguard-observer", now=now),
        event("ReclaimLostWithNode", "team", 1, component="preemptguard-observer", now=now),
        event("ReclaimExitedInTime", "team", 1, component="someone", now=now),  # not ours
        event("ReclaimGraceExpired", "team", 25, component="preemptguard-observer", now=now),
    ]
    return Listed(nodes=nodes, pods=pods, namespaces=namespaces, events=events)


# --- the computation ---------------------------------------------------------------------


def test_the_small_cluster_adds_up_as_worked_out_by_hand(policy: Policy) -> None:
    report = compute(small_cluster(), policy, NOW, Settings())
    pre, std = report.by_node_class["preemptible"], report.by_node_class["standard"]
    assert (pre.nodes, pre.gpus, pre.requested, pre.free) == (3, 20, 9, 11)  # a 4, b 2, k 3
    assert (std.nodes, std.gpus, std.requested, std.free) == (2, 8, 6, 2)  # c 2, d 4
    assert {cell: gpus for cell, gpus in report.requested.items() if gpus} == {
        ("interruptible", "preemptible"): 7,
        ("flexible", "preemptible"): 2,
        ("flexible", "standard"): 2,
        ("serving", "standard"): 4,
        ("interruptible", "unknown"): 1,
    }
    assert report.node_classes == ("preemptible", "standard", "unknown")
    assert report.pending == {"interruptible": 8, "flexible": 4}
    assert report.fallback == {"flexible": 2}
    assert report.reclaims == 2  # pre-7 (twice), pre-6; not the forged one, not the old one
    assert report.displaced == {"exited-in-time": 1, "grace-expired": 0, "lost-with-node": 1}
    assert {cell: h for cell, h in report.gpu_hours.items() if h} == pytest.approx(
        {
            ("interruptible", "preemptible"): 16.0,  # a 8, e 8
            ("flexible", "preemptible"): 1.0,
            ("flexible", "standard"): 2.0,
            ("serving", "standard"): 96.0,
            ("interruptible", "unknown"): 1.0,
        }
    )
    assert report.total_hours == pytest.approx(116.0)
    # 17 preemptible GPU-hours at half the price: 99 + 8.5
    assert report.on_demand_equivalent == pytest.approx(107.5)
    assert report.saved == pytest.approx(8.5)
    assert report.idle_nodes == ("pre-2",)
    # 12 GPUs pending, nodes of 8 (two of 8, one of 4): one whole node
    s = report.suggestion
    assert (s.current, s.target, s.gpus_per_node) == (20, 28, 8)
    assert s.reason == (
        "raise by 8 GPUs (1 node of 8 GPUs): 12 GPUs of pods that preemptible capacity would "
        "take are pending"
    )


def test_the_price_ratio_and_the_window_set_the_cost(policy: Policy) -> None:
    report = compute(small_cluster(), policy, NOW, Settings(window=H, price_ratio=0.3))
    # The last hour: a 4, b 2 (half an hour: 1), c 2, d 4, l 1; e finished 2 h ago.
    assert report.total_hours == pytest.approx(4 + 1 + 2 + 4 + 1)
    assert report.on_demand_equivalent == pytest.approx(7 + 5 * 0.3)
    # pre-6 12 minutes ago, pre-7 an hour ago (the window's start counts); of the observer's
    # Events only the one an hour ago
    assert report.reclaims == 2
    assert report.displaced == {"exited-in-time": 0, "grace-expired": 0, "lost-with-node": 1}


def _without_pending(listed: Listed, *keep: str) -> Listed:
    pods = [p for p in listed.pods if p["status"]["phase"] != "Pending" or p["metadata"]["name"]
            in keep]  # fmt: skip
    return Listed(nodes=listed.nodes, pods=pods, namespaces=listed.namespaces,
                  events=listed.events)  # fmt: skip


def _with_pending(listed: Listed, *gpus: int) -> Listed:
    extra = [gpu_pod(f"p{i}", g, workload="interruptible", phase="Pending")
             for i, g in enumerate(gpus)]  # fmt: skip
    return Listed(nodes=listed.nodes, pods=[*listed.pods, *extra], namespaces=listed.namespaces,
                  events=listed.events)  # fmt: skip


def test_the_target_rises_with_pending_demand_in_whole_nodes(policy: Policy) -> None:
    base = _without_pending(small_cluster(), "i")  # a serving pod pending: never counted
    rising = []
    for pending in ([6], [6, 2], [8, 8, 7], [8, 8, 8, 8]):
        report = compute(_with_pending(base, *pending), policy, NOW, Settings(idle_for=10 * H))
        rising.append((report.pending_gpus, report.suggestion.target))
    # 6 < a node of 8: kept; 8: one node; 23: two nodes; 32: four nodes
    assert rising == [(6, 20), (8, 28), (23, 36), (32, 52)]
    report = compute(_with_pending(base, 6), policy, NOW, Settings())
    assert report.suggestion.reason == (
        "keep: 6 GPUs pending, less than a node of 8 GPUs; no preemptible node idle for 1 h"
    )


def test_the_target_falls_by_the_nodes_idle_for_long_enough(policy: Policy) -> None:
    quiet = _without_pending(small_cluster())
    # pre-2's last GPU pod finished 2 h ago.
    report = compute(quiet, policy, NOW, Settings(idle_for=H))
    assert report.idle_nodes == ("pre-2",)
    assert (report.suggestion.target, report.suggestion.change) == (12, -8)
    assert report.suggestion.reason == (
        "lower by 8 GPUs: 1 preemptible node held no GPU pod for 1 h or more, and nothing is "
        "pending"
    )
    kept = compute(quiet, policy, NOW, Settings(idle_for=3 * H))
    assert kept.idle_nodes == ()
    assert kept.suggestion.target == 20
    assert kept.suggestion.reason == "keep: nothing pending, no preemptible node idle for 3 h"
    # An hour later pre-2 has been idle 3 h; a cordoned node is never counted.
    later = compute(quiet, policy, NOW + H, Settings(idle_for=3 * H))
    assert later.idle_nodes == ("pre-2",)
    quiet.nodes[1]["spec"]["unschedulable"] = True
    assert compute(quiet, policy, NOW + H, Settings(idle_for=3 * H)).idle_nodes == ()
    # Demand waiting: nothing is lowered, even under a node's worth.
    waiting = compute(_with_pending(quiet, 2), policy, NOW, Settings(idle_for=H))
    assert waiting.suggestion.target == 20


def test_the_gpus_of_a_pod_are_what_the_scheduler_counts() -> None:
    def c(gpus: int, *, request: bool = False, sidecar: bool = False) -> Obj:
        part = "requests" if request else "limits"
        made: Obj = {"name": "x", "resources": {part: {"nvidia.com/gpu": gpus}}}
        if sidecar:
            made["restartPolicy"] = "Always"
        return made

    assert gpus_of({"spec": {"containers": [c(2), c(3, request=True)]}}) == 5
    assert gpus_of({"spec": {"initContainers": [c(8)], "containers": [c(2)]}}) == 8
    # A sidecar runs beside what follows it: 1 + 4 for the init container, 1 + 2 + 2 after.
    spec = {"initContainers": [c(1, sidecar=True), c(4)], "containers": [c(2), c(2)]}
    assert gpus_of({"spec": spec}) == 5
    assert gpus_of({"spec": {"containers": [{"name": "x", "resources": {"limits": {
        "nvidia.com/gpu": "lots"}}}]}}) == 0  # fmt: skip
    assert gpus_of({"spec": "odd"}) == 0
    assert capacity.quantity("2k") == 2000


def test_the_displaced_pods_are_read_from_the_observers_own_events() -> None:
    """The reasons and the source are named in capacity (the observer imports it): the same."""
    assert {r: o for o, (r, _) in observer.REASONS.items()} == capacity.OUTCOME_REASONS
    assert observer.COMPONENT == capacity.OBSERVER_COMPONENT


# --- through the fake API server ---------------------------------------------------------


def _load(fake: FakeApiServer, listed: Listed) -> None:
    for obj in (*listed.nodes, *listed.namespaces, *listed.pods, *listed.events):
        fake.put(obj)


def _run(fake: FakeApiServer, tmp_path: Path, *args: str) -> Any:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    return CliRunner().invoke(main, ["capacity", "--kubeconfig", str(kubeconfig), *args])


def test_the_command_prints_the_figures_as_text(fake: FakeApiServer, tmp_path: Path) -> None:
    _load(fake, small_cluster(time.time()))
    result = _run(fake, tmp_path)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:3] == [
        "GPUs (nvidia.com/gpu)   nodes   allocatable   requested   free",
        "  preemptible               3            20           9     11",
        "  standard                  2             8           6      2",
    ]
    assert lines[4:9] == [
        "Requested GPUs of running pods, by class and node class:",
        "  class            preemptible     standard      unknown",
        "  interruptible              7            0            1",
        "  flexible                   2            2            0",
        "  serving                    0            4            0",
    ]
    assert "Pending for preemptible capacity: 12 GPUs (interruptible 8, flexible 4)" in lines
    assert "Flexible on standard nodes, could move back: 2 GPUs (flexible 2)" in lines
    assert (
        "Reclaims in the last 24 h: 2 (TogetherPreempted Events); displaced pods: 2 "
        "(exited-in-time 1, lost-with-node 1)"
    ) in lines
    assert "  serving                  0.0         96.0          0.0" in lines
    assert (
        "  116.0 GPU-hours cost 107.5 on-demand GPU-hours (preemptible at 0.5 of the on-demand "
        "price): 8.5 saved"
    ) in lines
    assert lines[-1] == (
        "Suggested preemptible target: 28 GPUs (allocatable now 20): raise by 8 GPUs (1 node "
        "of 8 GPUs): 12 GPUs of pods that preemptible capacity would take are pending"
    )


def test_the_command_prints_every_figure_as_json(fake: FakeApiServer, tmp_path: Path) -> None:
    _load(fake, small_cluster(time.time()))
    result = _run(fake, tmp_path, "-o", "json", "--idle-for", "90m", "--window", "2h",
                  "--preemptible-price-ratio", "0.25")  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["settings"] == {
        "windowSeconds": 7200.0,
        "idleForSeconds": 5400.0,
        "preemptiblePriceRatio": 0.25,
    }
    assert doc["nodes"]["preemptible"] == {"nodes": 3, "gpus": 20, "requestedGpus": 9,
                                           "freeGpus": 11}  # fmt: skip
    assert doc["requestedGpus"]["interruptible"] == {"preemptible": 7, "standard": 0,
                                                     "unknown": 1}  # fmt: skip
    assert doc["pendingGpus"]["total"] == 12
    assert doc["fallbackGpus"] == {"total": 2, "byClass": {"flexible": 2}}
    assert doc["reclaims"] == 2
    # Two hours: a 8, b 1, c 2, d 8, l 1 (e finished 2 h ago): 9 preemptible, at 0.25.
    hours = doc["gpuHours"]
    assert hours["interruptible"]["preemptible"] == pytest.approx(8, abs=0.05)
    assert hours["serving"]["standard"] == pytest.approx(8, abs=0.05)
    assert doc["cost"]["gpuHours"] == pytest.approx(20, abs=0.05)
    assert doc["cost"]["onDemandEquivalentGpuHours"] == pytest.approx(11 + 9 * 0.25, abs=0.05)
    assert doc["cost"]["savedGpuHours"] == pytest.approx(9 * 0.75, abs=0.05)
    assert doc["idlePreemptibleNodes"] == ["pre-2"]
    assert doc["suggestion"] == {
        "currentPreemptibleGpus": 20,
        "suggestedPreemptibleGpus": 28,
        "change": 8,
        "gpusPerNode": 8,
        "reason": "raise by 8 GPUs (1 node of 8 GPUs): 12 GPUs of pods that preemptible "
        "capacity would take are pending",
    }


def test_a_duration_that_is_not_one_is_a_usage_error(fake: FakeApiServer, tmp_path: Path) -> None:
    result = _run(fake, tmp_path, "--idle-for", "soon")
    assert result.exit_code == 2
    assert "'soon' is not a duration (such as 90, 30m, 1.5h, 7d)" in result.output


def test_the_command_lists_each_kind_once_with_exactly_its_declared_rights(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _load(fake, small_cluster(time.time()))
    cluster = connect()
    capacity_live.measure(cluster, policy, time.time)
    assert cluster.calls == CAPACITY
    lists = [r for r in fake.requests if r.access.verb == "list"]
    assert len(lists) == len(fake.requests) == 7  # nodes, namespaces, pods, 4 of Events


def test_only_the_pods_that_ask_for_gpus_are_kept_page_by_page(
    fake: FakeApiServer, connect: Callable[[], Cluster]
) -> None:
    listed = small_cluster(time.time())
    _load(fake, listed)
    fake.load([gpu_pod(f"cpu-{i}", 0, node_name="std-2") for i in range(1200)])
    pages: list[int] = []
    read = capacity_live.read(connect(), Settings(), lambda kind, n: pages.append(n))
    assert sorted(p["metadata"]["name"] for p in read.pods) == sorted(
        p["metadata"]["name"] for p in listed.pods if gpus_of(p) > 0
    )
    assert 1200 + len(listed.pods) in pages  # every pod was read, in three pages


def _gauges(run: test_observer.Running) -> dict[str, float]:
    found = {}
    for metric in run.metrics.registry.collect():
        if metric.name.startswith("preemptguard_capacity_"):
            for sample in metric.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


OWN_SETTINGS = ("--window", "2h", "--idle-for", "30m", "--preemptible-price-ratio", "0.3")


@pytest.mark.parametrize("options", [(), OWN_SETTINGS], ids=["defaults", "own-settings"])
def test_the_observers_gauges_are_the_commands_figures(
    fake: FakeApiServer,
    connect: Callable[[], Cluster],
    policy: Policy,
    tmp_path: Path,
    options: tuple[str, ...],
) -> None:
    _load(fake, small_cluster(time.time()))
    observers = test_observer.Observers(connect, policy)
    # The observer's options are the command's (``observe --window ...``).
    settings = capacity_settings_of(observe_command, options)
    run = observers.start("observer-a", audit_interval=0.2, capacity=settings)
    try:
        test_observer._wait(lambda: run.value("preemptguard_capacity_window_seconds"),
                            what="the capacity gauges")  # fmt: skip
        gauges = _gauges(run)
    finally:
        run.halt()
    doc = json.loads(_run(fake, tmp_path, "-o", "json", *options).output)
    assert doc["settings"]["windowSeconds"] == settings.window
    assert doc["settings"]["preemptiblePriceRatio"] == settings.price_ratio
    expected = {
        "preemptguard_capacity_suggested_preemptible_gpus{}": doc["suggestion"][
            "suggestedPreemptibleGpus"
        ],
        "preemptguard_capacity_reclaims{}": doc["reclaims"],
        "preemptguard_capacity_idle_preemptible_nodes{}": len(doc["idlePreemptibleNodes"]),
        "preemptguard_capacity_window_seconds{}": doc["settings"]["windowSeconds"],
        "preemptguard_capacity_on_demand_equivalent_gpu_hours{}": doc["cost"][
            "onDemandEquivalentGpuHours"
        ],
        "preemptguard_capacity_saved_gpu_hours{}": doc["cost"]["savedGpuHours"],
    }
    for nc, figures in doc["nodes"].items():
        expected[f"preemptguard_capacity_gpus{{node_class={nc}}}"] = figures["gpus"]
        expected[f"preemptguard_capacity_nodes{{node_class={nc}}}"] = figures["nodes"]
    for name, table in (("requested_gpus", doc["requestedGpus"]), ("gpu_hours", doc["gpuHours"])):
        for wclass, row in table.items():
            for nc, value in row.items():
                key = f"preemptguard_capacity_{name}{{node_class={nc},workload_class={wclass}}}"
                expected[key] = value
    for name, part in (("pending_gpus", "pendingGpus"), ("fallback_gpus", "fallbackGpus")):
        for wclass, value in doc[part]["byClass"].items():
            expected[f"preemptguard_capacity_{name}{{workload_class={wclass}}}"] = value
    for outcome, pods in doc["displacedPods"].items():
        expected[f"preemptguard_capacity_displaced_pods{{outcome={outcome}}}"] = pods
    assert set(gauges) == set(expected)
    # GPU-hours go on with the clock between the two readings: a second is 1/3600 of one.
    assert gauges == pytest.approx(expected, abs=0.05)
    assert gauges["preemptguard_capacity_suggested_preemptible_gpus{}"] == 28


def capacity_settings_of(command: click.Command, args: tuple[str, ...]) -> Settings:
    """The capacity settings ``command`` makes of ``args`` (its other options as defaulted)."""
    with command.make_context(command.name, list(args)) as ctx:
        p = ctx.params
        namespace = p.get("node_event_namespace")
        return capacity_settings(p["window"], p["idle_for"], p["preemptible_price_ratio"],
                                 event_namespace=namespace)  # fmt: skip


def test_observe_takes_the_capacity_options_and_its_event_namespace() -> None:
    settings = capacity_settings_of(
        observe_command, (*OWN_SETTINGS, "--node-event-namespace", "nodes")
    )
    assert settings == Settings(window=7200, idle_for=1800, price_ratio=0.3,
                                event_namespace="nodes")  # fmt: skip
    assert capacity_settings_of(observe_command, ()) == Settings()


def test_a_report_of_an_empty_cluster_suggests_nothing(policy: Policy) -> None:
    report: Capacity = compute(Listed(), policy, NOW, Settings())
    assert report.suggestion.target == 0
    assert report.suggestion.gpus_per_node is None
    assert report.suggestion.reason == "keep: nothing pending, no preemptible node idle for 1 h"
