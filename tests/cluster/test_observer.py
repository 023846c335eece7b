"""The reclaim observer against the fake API server, in real (short) time: what it records for
each displaced pod (metrics, an Event on the owner, a log line), one acting replica, and a
restart or a hand-over that counts nothing twice."""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import namespace, node, owned, pod
from tests.cluster.fake_apiserver import FakeApiServer, stamp
from webhook.cluster import inventory
from webhook.cluster.metrics import ObserverMetrics
from webhook.cluster.observer import Observer, ObserverSettings
from webhook.cluster.reclaims import PodSeen
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster, path
from webhook.kube.clock import SystemClock
from webhook.kube.lease import LeaseSettings
from webhook.server import logs

Obj = dict[str, Any]
TOLERATE: dict[str, Any] = {
    "tolerations": [{"key": "together.ai/compute-class", "operator": "Exists"}]
}
FAST_LEASE = LeaseSettings(
    namespace="preemptguard-system", duration=2, renew_deadline=1.5, retry=0.1
)


@dataclass
class Running:
    observer: Observer
    metrics: ObserverMetrics
    stop: threading.Event
    thread: threading.Thread
    cluster: Cluster

    def value(self, name: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(name, labels)
        return found or 0.0

    def displaced(self) -> float:
        return sum(
            s.value
            for m in self.metrics.registry.collect()
            if m.name == "preemptguard_displaced_pods"
            for s in m.samples
            if s.name.endswith("_total")
        )

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@dataclass
class Observers:
    connect: Callable[[], Cluster]
    policy: Policy
    running: list[Running] = field(default_factory=list)

    def start(self, identity: str, **settings: Any) -> Running:
        cluster = self.connect()
        metrics = ObserverMetrics()
        stop = threading.Event()
        observer = Observer(
            cluster,
            self.policy,
            ObserverSettings(lease=FAST_LEASE, identity=identity, watch_seconds=5, **settings),
            metrics,
            SystemClock(stop),
        )
        thread = threading.Thread(target=observer.run, args=(stop,), daemon=True)
        thread.start()
        run = Running(observer, metrics, stop, thread, cluster)
        self.running.append(run)
        return run


@pytest.fixture
def observers(connect: Callable[[], Cluster], policy: Policy) -> Iterator[Observers]:
    made = Observers(connect, policy)
    yield made
    for run in made.running:
        run.stop.set()
    for run in made.running:
        run.thread.join(timeout=10)


@pytest.fixture
def log_lines() -> Iterator[Callable[[str], list[dict[str, Any]]]]:
    stream = io.StringIO()
    logs.configure("info", stream)

    def lines(event: str) -> list[dict[str, Any]]:
        found = [json.loads(line) for line in stream.getvalue().splitlines() if line]
        return [line for line in found if line.get("event") == event]

    yield lines
    logs.configure("info")


def _wait(condition: Callable[[], object], timeout: float = 15, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or condition}")


def _cluster(fake: FakeApiServer, policy: Policy) -> None:
    fake.put(node("pre-1", "preemptible"))
    fake.put(node("std-1", "standard"))
    fake.put(namespace("team"))
    fake.put(owned("Deployment", "web"))
    fake.put(owned("ReplicaSet", "web-7d9", metadata={"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web",
         "controller": True}]}))  # fmt: skip
    put = fake.put
    put(pod("sweep", workload="interruptible", node_name="pre-1", placed=True, policy=policy,
            grace=240, annotations={"together.ai/checkpoint-seconds": "210"},
            owner=("batch/v1", "Job", "sweep")))  # fmt: skip
    put(pod("web-7d9-x", workload="flexible", node_name="pre-1", placed=True, policy=policy,
            owner=("apps/v1", "ReplicaSet", "web-7d9")))  # fmt: skip
    put(pod("eval", workload="flexible", node_name="pre-1", placed=True, policy=policy, grace=1))
    put(pod("stuck", "research", node_name="pre-1", grace=60, **TOLERATE))  # no class, no record
    put(pod("elsewhere", workload="interruptible", node_name="std-1"))
    put(owned("DaemonSet", "agent"))
    put(pod("agent-x", node_name="pre-1", owner=("apps/v1", "DaemonSet", "agent")))


def _preempted_event(
    name: str = "pre-1.1", where: str = "default", involved: dict[str, str] | None = None
) -> Obj:
    """A TogetherPreempted Event on pre-1 written in ``where``, as the provider writes it in
    ``default``; ``involved`` changes what it names."""
    now = stamp(time.time())
    return {"kind": "Event", "metadata": {"name": name, "namespace": where},
            "involvedObject": {"kind": "Node", "name": "pre-1", **(involved or {})},
            "reason": "TogetherPreempted", "firstTimestamp": now, "lastTimestamp": now}  # fmt: skip


def _reclaim(
    fake: FakeApiServer,
    cluster: Cluster,
    *pods: str,
    recognised: Callable[[], object] | None = None,
) -> None:
    """T+0 as the provider does it: cordon, the Event, every pod deleted with its grace.

    The observer watches Events and pods apart, so a deletion may reach it before the Event
    and open the reclaim as a cordon's; ``recognised``, when given, is waited for between
    the Event and the deletions, for a test that counts reclaims by their trigger.
    """
    fake.modify("Node", "pre-1", spec={"unschedulable": True})
    fake.put(_preempted_event())
    if recognised is not None:
        _wait(recognised, what="the provider's Event recognised")
    for name in pods:
        stored = next(p for p in fake.list("Pod") if p["metadata"]["name"] == name)
        cluster.delete(path("pods", namespace=stored["metadata"]["namespace"], name=name))


def _by_event(run: Running) -> Callable[[], bool]:
    return lambda: run.value("preemptguard_reclaims_total", trigger="event") == 1


def _events(fake: FakeApiServer, reason: str) -> dict[str, dict[str, Any]]:
    return {e["involvedObject"]["name"]: e for e in fake.list("Event") if e["reason"] == reason}


def test_each_displaced_pod_gets_its_outcome_as_metrics_an_event_on_its_owner_and_a_log_line(
    fake: FakeApiServer,
    connect: Callable[[], Cluster],
    observers: Observers,
    policy: Policy,
    log_lines: Callable[[str], list[dict[str, Any]]],
) -> None:
    _cluster(fake, policy)
    run = observers.start("observer-a")
    _wait(run.observer.leading.is_set, what="leadership")
    _reclaim(fake, connect(), "sweep", "web-7d9-x", "eval", "stuck", recognised=_by_event(run))
    time.sleep(0.5)
    fake.remove("Pod", "sweep", "team")
    fake.remove("Pod", "web-7d9-x", "team")
    time.sleep(2.2)
    fake.remove("Pod", "eval", "team")  # 2.7 s after SIGTERM: past its 1 s grace
    _wait(lambda: run.displaced() == 3, what="three outcomes")
    fake.remove("Node", "pre-1")  # the node removed with "stuck" still inside its grace
    _wait(lambda: run.displaced() == 4, what="four outcomes")

    assert run.value("preemptguard_reclaims_total", trigger="event") == 1
    value = run.value
    assert value("preemptguard_displaced_pods_total", workload_class="interruptible",
                 outcome="exited-in-time") == 1  # fmt: skip
    assert value("preemptguard_displaced_pods_total", workload_class="flexible",
                 outcome="exited-in-time") == 1  # fmt: skip
    assert value("preemptguard_displaced_pods_total", workload_class="flexible",
                 outcome="grace-expired") == 1  # fmt: skip
    assert value("preemptguard_displaced_pods_total", workload_class="unclassified",
                 outcome="lost-with-node") == 1  # fmt: skip
    assert value("preemptguard_displaced_pod_exit_seconds_count", workload_class="flexible") == 2
    assert value("preemptguard_displaced_pod_exit_seconds_bucket", workload_class="interruptible",
                 le="5.0") == 1  # fmt: skip

    exited = _events(fake, "ReclaimExitedInTime")
    assert set(exited) == {"sweep", "web"}  # the Job; the Deployment behind the ReplicaSet
    assert exited["sweep"]["involvedObject"]["kind"] == "Job"
    assert exited["web"]["involvedObject"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web",
        "namespace": "team"}  # fmt: skip
    assert re.fullmatch(
        r"pod sweep \(interruptible\) on preemptible node pre-1 exited [01] s after SIGTERM, "
        r"checkpoint budget 240 s \(declared checkpoint 210 s\)",
        exited["sweep"]["message"],
    )
    expired = _events(fake, "ReclaimGraceExpired")
    assert expired["eval"]["type"] == "Warning"
    assert (
        "was still running when its 1 s grace period ran out (gone 3 s after SIGTERM)"
        in expired["eval"]["message"]
    )
    lost = _events(fake, "ReclaimLostWithNode")
    assert lost["stuck"]["involvedObject"]["kind"] == "Pod"  # no owner: the pod itself
    assert (
        "was lost with the node 3 s after SIGTERM, still inside its 60 s grace period"
        in lost["stuck"]["message"]
    )
    (node_event,) = _events(fake, "ReclaimObserved").values()
    assert "4 pods displaced so far" in node_event["message"]  # the DaemonSet's pod is the node's

    (reclaim,) = log_lines("reclaim")
    assert (reclaim["node"], reclaim["trigger"], reclaim["displaced"]) == ("pre-1", "event", 4)
    lines = {line["pod"]: line for line in log_lines("displaced_pod")}
    assert set(lines) == {"sweep", "web-7d9-x", "eval", "stuck"}
    sweep = lines["sweep"]
    assert (sweep["workload_class"], sweep["grace_seconds"], sweep["checkpoint_seconds"],
            sweep["outcome"], sweep["owner"]) == ("interruptible", 240, 210, "exited-in-time", "Job/sweep")  # fmt: skip
    assert 0.3 < sweep["exit_seconds"] < 1.5
    assert 2.4 < lines["eval"]["exit_seconds"] < 3.5
    assert lines["stuck"]["outcome"] == "lost-with-node"


def test_a_restarted_observer_resumes_without_counting_anything_twice(
    fake: FakeApiServer, connect: Callable[[], Cluster], observers: Observers, policy: Policy
) -> None:
    _cluster(fake, policy)
    first = observers.start("observer-a")
    _wait(first.observer.leading.is_set, what="leadership")
    _reclaim(fake, connect(), "sweep", "web-7d9-x", "eval", "stuck", recognised=_by_event(first))
    time.sleep(0.3)
    fake.remove("Pod", "sweep", "team")
    _wait(lambda: first.displaced() == 1, what="the first outcome")
    first.halt()
    # The pod exits while no observer runs; then a new one starts and sees the rest.
    fake.remove("Pod", "web-7d9-x", "team")
    second = observers.start("observer-b")
    _wait(second.observer.leading.is_set, what="leadership after the restart")
    fake.remove("Pod", "eval", "team")
    fake.remove("Node", "pre-1")
    _wait(lambda: second.displaced() == 2, what="the remaining outcomes")
    time.sleep(0.5)
    assert first.value("preemptguard_reclaims_total", trigger="event") == 1
    assert second.value("preemptguard_reclaims_total", trigger="event") == 0  # seen before
    assert first.displaced() == 1
    assert second.displaced() == 2  # eval and stuck; web-7d9-x went while nobody watched
    outcome_events = [e for e in fake.list("Event") if e["reason"].startswith("Reclaim")
                      and e["reason"] != "ReclaimObserved"]  # fmt: skip
    assert sorted(e["involvedObject"]["name"] for e in outcome_events) == ["eval", "stuck", "sweep"]


def test_of_two_replicas_one_acts_and_the_other_takes_over_without_recounting(
    fake: FakeApiServer, connect: Callable[[], Cluster], observers: Observers, policy: Policy
) -> None:
    _cluster(fake, policy)
    a = observers.start("observer-a")
    _wait(a.observer.leading.is_set, what="a leads")
    b = observers.start("observer-b")
    _wait(b.observer.synced.is_set, what="b synced")
    _reclaim(fake, connect(), "sweep", "web-7d9-x", "eval", "stuck")
    # Both have the reclaim before its first pod goes, whatever the machine's load.
    _wait(lambda: a.observer.tracker.reclaims and b.observer.tracker.reclaims, what="both see it")
    fake.remove("Pod", "sweep", "team")
    _wait(lambda: a.displaced() == 1, what="a records")
    assert not b.observer.leading.is_set()
    assert b.displaced() == 0
    a.halt()  # releases the Lease: b takes over at once
    _wait(b.observer.leading.is_set, what="b leads")
    fake.remove("Pod", "web-7d9-x", "team")
    _wait(lambda: b.displaced() == 1, what="b records")
    time.sleep(0.3)
    assert b.value("preemptguard_reclaims_total", trigger="event") == 0
    assert b.displaced() == 1  # sweep, replayed from what b saw while following, was not recounted
    assert b.value("preemptguard_observer_leader") == 1


def test_the_periodic_audit_exports_its_counts(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster(fake, policy)
    metrics = ObserverMetrics()
    settings = ObserverSettings(lease=FAST_LEASE, identity="a", audit_interval=600,
                                audit_reports=True)  # fmt: skip
    observer = Observer(connect(), policy, settings, metrics, SystemClock())
    result = observer.audit_once()
    assert result is not None
    sample = metrics.registry.get_sample_value
    assert sample("preemptguard_audit_findings", {"code": "unplaced"}) == 1
    assert sample("preemptguard_audit_findings", {"code": "refused"}) == 1  # web has no template
    assert sample("preemptguard_audit_findings", {"code": "interruptible-on-standard"}) == 1
    assert sample("preemptguard_audit_objects", {"kind": "pods"}) == 6
    assert sample("preemptguard_audit_runs_total", {"result": "ok"}) == 1
    assert fake.get("PolicyReport", "preemptguard", "team") is not None


def test_a_watch_that_breaks_is_listed_again_and_nothing_is_missed(
    fake: FakeApiServer, connect: Callable[[], Cluster], observers: Observers, policy: Policy
) -> None:
    _cluster(fake, policy)
    run = observers.start("observer-a")
    _wait(run.observer.leading.is_set, what="leadership")
    fake.break_watches()
    _wait(
        lambda: run.value("preemptguard_observer_watch_errors_total", resource="pods") >= 1,
        what="the broken watch to be counted",
    )
    _reclaim(fake, connect(), "sweep", "web-7d9-x", "eval", "stuck")
    fake.remove("Pod", "sweep", "team")
    _wait(lambda: run.displaced() == 1, what="the outcome after the relist")
    reclaims = run.value("preemptguard_reclaims_total", trigger="event") + run.value(
        "preemptguard_reclaims_total", trigger="cordon"
    )
    assert reclaims == 1  # by the Event or by the cordon, as the lists came back
    assert run.thread.is_alive()


def test_only_the_pods_of_preemptible_nodes_are_held_as_their_facts_after_lists_and_watches(
    fake: FakeApiServer, observers: Observers, policy: Policy
) -> None:
    _cluster(fake, policy)
    for name in ("sweep", "elsewhere"):
        fake.modify("Pod", name, "team", metadata={"managedFields": [{"manager": "kubectl"}]})
    run = observers.start("observer-a")
    _wait(run.observer.synced.is_set, what="the first lists")

    def held() -> dict[str, PodSeen]:
        return {view.last.name: view.last for view in list(run.observer.tracker.pods.values())}

    on_preemptible = {"sweep", "web-7d9-x", "eval", "stuck"}  # not agent-x: a DaemonSet's
    assert set(held()) == on_preemptible
    sweep = held()["sweep"]
    assert (sweep.namespace, sweep.node, sweep.workload_class, sweep.phase) == (
        "team", "pre-1", "interruptible", "Running")  # fmt: skip
    _wait(lambda: run.value("preemptguard_observer_pods_held", held="on-node") == 4,
          what="the pods held counted")  # fmt: skip
    assert run.value("preemptguard_observer_pods_held", held="deleted") == 0
    fake.put(pod("later", workload="interruptible", node_name="std-1"))
    fake.put(pod("later-pre", workload="interruptible", node_name="pre-1"))
    _wait(lambda: "later-pre" in held(), what="the watched pod")
    fake.break_watches()
    _wait(lambda: run.value("preemptguard_observer_watch_errors_total", resource="pods") >= 1,
          what="the broken watch")  # fmt: skip
    fake.put(pod("after-relist", workload="interruptible", node_name="pre-1"))
    _wait(lambda: "after-relist" in held(), what="the pod after the relist")
    assert set(held()) == on_preemptible | {"later-pre", "after-relist"}
    # A pod deleted with no reclaim of its node is held a while longer, and counted apart.
    fake.remove("Pod", "later-pre", "team")
    _wait(lambda: run.value("preemptguard_observer_pods_held", held="deleted") == 1,
          what="the deleted pod counted")  # fmt: skip
    assert run.value("preemptguard_observer_pods_held", held="on-node") == 5


def _reclaims(run: Running) -> float:
    return sum(run.value("preemptguard_reclaims_total", trigger=t) for t in ("event", "cordon"))


def test_an_event_a_tenant_forged_counts_nothing_and_the_real_reclaim_counts_in_full(
    fake: FakeApiServer,
    connect: Callable[[], Cluster],
    observers: Observers,
    policy: Policy,
    log_lines: Callable[[str], list[dict[str, Any]]],
) -> None:
    _cluster(fake, policy)
    run = observers.start("observer-a")
    _wait(run.observer.leading.is_set, what="leadership")
    # What a tenant's service account, allowed Events in its own namespace only, can write...
    fake.put(namespace("tenant"))
    forged = {"apiVersion": "example.com/v1", "namespace": "tenant"}
    fake.put(_preempted_event("spot.1", "tenant", forged))
    # ... and what someone allowed Events in default wrote about a kind of their own.
    fake.put(_preempted_event("pre-1.crd", involved={"apiVersion": "example.com/v1"}))
    _wait(lambda: log_lines("preempted_event_ignored"), what="the ignored Event logged")
    time.sleep(0.5)
    (ignored,) = log_lines("preempted_event_ignored")  # the tenant's is not even read
    assert (ignored["name"], ignored["node"]) == ("default/pre-1.crd", "pre-1")
    assert "example.com/v1" in ignored["reason"]
    assert _reclaims(run) == 0
    assert not [e for e in fake.list("Event") if e["reason"].startswith("Reclaim")]
    # The provider's reclaim that follows is recognised, and every pod judged.
    _reclaim(fake, connect(), "sweep", "web-7d9-x", "eval", "stuck", recognised=_by_event(run))
    for name, ns in (("sweep", "team"), ("web-7d9-x", "team"), ("eval", "team")):
        fake.remove("Pod", name, ns)
    fake.remove("Node", "pre-1")
    _wait(lambda: run.displaced() == 4, what="four outcomes")
    assert _reclaims(run) == 1
    (reclaim,) = log_lines("reclaim")
    assert reclaim["displaced"] == 4


def test_a_pod_it_cannot_read_is_told_and_stops_neither_the_list_nor_the_watch(
    fake: FakeApiServer,
    observers: Observers,
    policy: Policy,
    log_lines: Callable[[str], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    classify = inventory.pod_class

    def odd(pod: Obj, *args: Any) -> str:
        if pod["metadata"]["name"].startswith("odd"):
            raise ValueError("an odd pod")
        return classify(pod, *args)

    monkeypatch.setattr(inventory, "pod_class", odd)
    _cluster(fake, policy)
    fake.put(pod("odd-listed", workload="interruptible", node_name="pre-1"))
    run = observers.start("observer-a")
    _wait(run.observer.synced.is_set, what="the first lists")
    fake.put(pod("odd-watched", workload="interruptible", node_name="pre-1"))
    fake.put(pod("later", workload="interruptible", node_name="pre-1"))
    held = run.observer.tracker.pods.values
    _wait(lambda: "later" in {p.last.name for p in held()}, what="the pod after the odd one")
    assert {p.last.name for p in held()} == {"sweep", "web-7d9-x", "eval", "stuck", "later"}
    assert [line["pod"] for line in log_lines("pod_not_read")] == ["odd-listed", "odd-watched"]
    assert run.value("preemptguard_observer_watch_errors_total", resource="pods") == 0


def test_a_restart_that_sees_the_event_before_the_pods_counts_a_cordons_reclaim_once(
    fake: FakeApiServer, connect: Callable[[], Cluster], observers: Observers, policy: Policy
) -> None:
    _cluster(fake, policy)
    first = observers.start("observer-a")
    _wait(first.observer.leading.is_set, what="leadership")
    fake.modify("Node", "pre-1", spec={"unschedulable": True})
    connect().delete(path("pods", namespace="team", name="sweep"))
    _wait(lambda: first.value("preemptguard_reclaims_total", trigger="cordon") == 1,
          what="the reclaim seen by its cordon")  # fmt: skip
    fake.put(_preempted_event())  # the provider's Event, later
    time.sleep(0.5)
    first.halt()
    second = observers.start("observer-b")
    _wait(second.observer.leading.is_set, what="leadership after the restart")
    time.sleep(0.5)
    assert _reclaims(first) == 1
    assert _reclaims(second) == 0
    assert len(_events(fake, "ReclaimObserved")) == 1


def test_the_reclaim_observed_event_counts_the_pods_listed_with_it(
    fake: FakeApiServer, observers: Observers, policy: Policy
) -> None:
    """The provider stopped the pods without deleting them; the observer starts afterwards."""
    _cluster(fake, policy)
    fake.modify("Node", "pre-1", spec={"unschedulable": True})
    fake.put(_preempted_event())
    run = observers.start("observer-a")
    _wait(lambda: run.value("preemptguard_reclaims_total", trigger="event") == 1,
          what="the reclaim recognised")  # fmt: skip
    (node_event,) = _events(fake, "ReclaimObserved").values()
    assert "recognised (event): 4 pods displaced so far" in node_event["message"]


def _observe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", "observe", *args],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_a_metrics_port_out_of_range_is_a_usage_error(fake: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", namespace="preemptguard-system")
    out = _observe("--metrics-port", "99999", "--kubeconfig", str(kubeconfig))
    assert out.returncode == 2
    assert "Invalid value for '--metrics-port': 99999 is not in the range 0<=x<=65535" in out.stderr
    assert "internal error" not in out.stderr


def test_a_metrics_port_in_use_is_reported_plainly(fake: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", namespace="preemptguard-system")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _observe("--metrics-host", "127.0.0.1", "--metrics-port", str(port),
                       "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"error: cannot listen on 127.0.0.1:{port}: address already in use; "
        "pick another --metrics-port"
    )


# --- DisruptionTarget, and pods that completed during a reclaim --------------------------------


def _conditions(fake: FakeApiServer, name: str, ns: str = "team") -> dict[str, dict[str, Any]]:
    stored = fake.get("Pod", name, ns)
    assert stored is not None, name
    return {c["type"]: c for c in stored["status"].get("conditions", [])}


def _status_patches(fake: FakeApiServer) -> list[str]:
    return [r.path for r in fake.requests if r.method == "PATCH" and r.path.endswith("/status")]


def test_the_leader_marks_the_unfinished_pods_of_the_reclaimed_node_once(
    fake: FakeApiServer,
    connect: Callable[[], Cluster],
    observers: Observers,
    policy: Policy,
    log_lines: Callable[[str], list[dict[str, Any]]],
) -> None:
    _cluster(fake, policy)
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": stamp(time.time())}
    fake.modify("Pod", "sweep", "team", status={"conditions": [ready]})
    fake.put(pod("done", node_name="pre-1", phase="Succeeded"))
    a = observers.start("observer-a")
    _wait(a.observer.leading.is_set, what="a leads")
    b = observers.start("observer-b")
    _wait(b.observer.synced.is_set, what="b synced")
    _reclaim(fake, connect(), "sweep")  # one pod deleted, the others stopped by the provider
    marked = {"sweep", "web-7d9-x", "eval", "stuck"}
    _wait(lambda: a.value("preemptguard_reclaim_pods_marked_total") == 4, what="four marks")

    for name in marked:
        ns = "research" if name == "stuck" else "team"
        found = _conditions(fake, name, ns)["DisruptionTarget"]
        assert (found["status"], found["reason"]) == ("True", "PreemptibleNodeReclaimed")
        assert found["message"].startswith("preemptible node pre-1 is being reclaimed")
        assert found["lastTransitionTime"]
    assert _conditions(fake, "sweep")["Ready"] == ready  # the others kept
    for name in ("done", "elsewhere", "agent-x"):  # finished, another node, the node's own
        assert "DisruptionTarget" not in _conditions(fake, name)
    assert sorted(line["pod"] for line in log_lines("pod_marked")) == sorted(marked)
    assert b.value("preemptguard_reclaim_pods_marked_total") == 0  # only the leader writes

    # b takes over and replays what it saw: every pod carries the condition already.
    seen = b.observer.tracker.pods.values
    _wait(lambda: sum(p.last.marked for p in seen()) == 4, what="b to see the marks")
    a.halt()
    _wait(b.observer.leading.is_set, what="b leads")
    time.sleep(0.5)
    assert len(_status_patches(fake)) == 4
    assert b.value("preemptguard_reclaim_pods_marked_total") == 0


def test_a_pod_that_succeeds_during_the_reclaim_is_reported_on_its_owner(
    fake: FakeApiServer,
    connect: Callable[[], Cluster],
    observers: Observers,
    policy: Policy,
    log_lines: Callable[[str], list[dict[str, Any]]],
) -> None:
    _cluster(fake, policy)
    run = observers.start("observer-a")
    _wait(run.observer.leading.is_set, what="leadership")
    _reclaim(fake, connect(), recognised=_by_event(run))
    _wait(lambda: run.value("preemptguard_reclaim_pods_marked_total") == 4, what="the marks")
    # The Job's pod exits 0 on SIGTERM (its checkpoint done); eval exits 143.
    fake.modify("Pod", "sweep", "team", status={"phase": "Succeeded"})
    fake.modify("Pod", "eval", "team", status={"phase": "Failed"})
    _wait(lambda: run.displaced() == 2, what="two outcomes")

    counted = "preemptguard_reclaim_pods_completed_total"
    assert run.value(counted, workload_class="interruptible") == 1
    assert run.value(counted, workload_class="flexible") == 0
    (event,) = _events(fake, "CompletedDuringReclaim").values()
    assert event["involvedObject"]["kind"] == "Job"
    assert event["involvedObject"]["name"] == "sweep"
    assert event["type"] == "Normal"
    assert event["message"].startswith(
        "pod sweep (interruptible) on preemptible node pre-1 completed successfully during the "
        "node's reclaim"
    )
    (line,) = log_lines("completed_during_reclaim")
    assert (line["pod"], line["owner"], line["event_written"]) == ("sweep", "Job/sweep", True)
    assert "DisruptionTarget" in _conditions(fake, "sweep")  # marked, then succeeded
