"""``preemptguard drill NODE`` against the fake API server, on a clock the test moves: the plan,
the reclaim as the provider does it, the report per pod, and the refusals."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.cluster.conftest import FakeClock, namespace, node, owned, pod
from tests.cluster.fake_apiserver import FakeApiServer
from webhook.cli.main import main
from webhook.cluster import drill
from webhook.cluster.client import Cluster
from webhook.engine.policy import Policy

TOLERATE: dict[str, Any] = {
    "tolerations": [{"key": "together.ai/compute-class", "operator": "Exists"}]
}


@pytest.fixture
def timed(clock: FakeClock) -> Iterator[FakeApiServer]:
    """The fake API server writing times from the test's clock."""
    server = FakeApiServer(now=clock.now)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def timed_connect(timed: FakeApiServer, tmp_path: Path) -> Iterator[Callable[[], Cluster]]:
    kubeconfig = timed.kubeconfig(tmp_path / "kubeconfig")
    made: list[Cluster] = []

    def make() -> Cluster:
        made.append(Cluster.connect(str(kubeconfig)))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _node_with_pods(fake: FakeApiServer, policy: Policy) -> None:
    fake.put(node("pre-1", "preemptible", taints=[]))
    fake.put(node("std-1", "standard"))
    fake.put(namespace("team"))
    put = fake.put
    put(pod("sweep", workload="interruptible", node_name="pre-1", placed=True, policy=policy,
            grace=240, annotations={"together.ai/checkpoint-seconds": "210"},
            owner=("batch/v1", "Job", "sweep")))  # fmt: skip
    put(pod("eval", workload="flexible", node_name="pre-1", placed=True, policy=policy, grace=5))
    put(pod("batch", workload="interruptible", node_name="pre-1", placed=True, policy=policy,
            grace=60))  # fmt: skip
    put(pod("api", workload="serving", node_name="pre-1", **TOLERATE))  # got past the webhook
    put(owned("DaemonSet", "gpu-plugin"))
    put(pod("gpu-plugin-x", node_name="pre-1", owner=("apps/v1", "DaemonSet", "gpu-plugin")))
    put(pod("finished", node_name="pre-1", phase="Succeeded"))
    put(pod("elsewhere", workload="interruptible", node_name="std-1"))


def test_the_plan_lists_every_pod_its_class_grace_and_the_critical_ones(
    timed: FakeApiServer, timed_connect: Callable[[], Cluster], policy: Policy
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=300)
    summary = [(p.name, p.workload_class, p.grace, p.checkpoint, p.action) for p in the_plan.pods]
    assert summary == [
        ("api", "serving", 30, None, "delete"),
        ("batch", "interruptible", 60, None, "delete"),
        ("eval", "flexible", 5, None, "delete"),
        ("sweep", "interruptible", 240, 210, "delete"),
        ("gpu-plugin-x", "unclassified", 30, None, "daemonset"),
    ]
    assert [p.name for p in the_plan.critical] == ["api"]
    assert {a.verb for a in cluster.calls} == {"get", "list"}  # a plan changes nothing


def test_the_drill_cordons_emits_deletes_and_reports_each_pod(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=300)
    # With no kubelet, the test decides when each pod exits.
    clock.at(41, lambda: timed.remove("Pod", "sweep", "team"))
    clock.at(8, lambda: timed.remove("Pod", "eval", "team"))
    clock.at(3, lambda: timed.remove("Pod", "api", "team"))
    seen: list[tuple[float, int, int]] = []
    report = drill.execute(
        cluster, the_plan, clock, progress=lambda w, t, g, n: seen.append((w, g, n))
    )
    outcomes = {r.pod.name: (r.outcome, r.exited_after) for r in report.results}
    assert outcomes == {
        "api": ("exited-in-time", 3.0),
        "eval": ("grace-expired", 8.0),
        "sweep": ("exited-in-time", 41.0),
        "batch": ("still-running", None),
    }
    by_name = {r.pod.name: r for r in report.results}
    assert by_name["sweep"].describe() == "exited after 41 s (grace period 240 s)"
    assert by_name["eval"].describe() == (
        "exited after 8 s, 3 s past its 5 s grace period (the kubelet would have killed it)"
    )
    assert by_name["batch"].describe() == "still running at the deadline (grace period 60 s)"
    assert report.waited == 300
    assert not report.clean
    # As the provider does it: cordoned, the Event on the Node, each pod deleted with its own
    # grace period; the DaemonSet's pod left running; the node not uncordoned.
    pre = timed.get("Node", "pre-1")
    assert pre is not None
    assert pre["spec"]["unschedulable"] is True
    (event,) = timed.list("Event", "default")
    assert event["reason"] == "TogetherPreempted"
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == "pre-1"
    batch = timed.get("Pod", "batch", "team")
    assert batch is not None
    assert batch["metadata"]["deletionGracePeriodSeconds"] == 60
    assert timed.get("Pod", "gpu-plugin-x", "team") is not None
    assert timed.get("Pod", "elsewhere", "team") is not None
    deletes = [r for r in timed.requests if r.method == "DELETE"]
    assert len(deletes) == 4
    assert seen[-1] == (300, 3, 4)


def test_a_drill_where_everything_exits_in_time_is_clean_and_can_uncordon(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
) -> None:
    timed.put(node("pre-1", "preemptible"))
    timed.put(namespace("team"))
    timed.put(pod("sweep", workload="interruptible", node_name="pre-1", placed=True, policy=policy))
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=300)
    clock.at(12, lambda: timed.remove("Pod", "sweep", "team"))
    report = drill.execute(cluster, the_plan, clock, uncordon=True)
    assert report.clean
    assert report.waited == 12  # no waiting once every pod is gone
    pre = timed.get("Node", "pre-1")
    assert pre is not None
    assert "unschedulable" not in pre["spec"]


def test_a_standard_node_and_a_missing_one_are_refused(
    timed: FakeApiServer, timed_connect: Callable[[], Cluster], policy: Policy
) -> None:
    timed.put(node("std-bare", None))
    cluster = timed_connect()
    with pytest.raises(drill.DrillRefused, match="std-bare is a standard node"):
        drill.plan(cluster, "std-bare", policy, wait_seconds=1)
    with pytest.raises(drill.DrillRefused, match="node nope does not exist"):
        drill.plan(cluster, "nope", policy, wait_seconds=1)


# --- the command ---------------------------------------------------------------------------


def _run(fake: FakeApiServer, tmp_path: Path, *args: str, stdin: str | None = None) -> Result:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    return CliRunner().invoke(main, ["drill", "--kubeconfig", str(kubeconfig), *args], input=stdin)


def test_dry_run_prints_the_plan_and_changes_nothing(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _node_with_pods(fake, policy)
    fake.reset_requests()
    out = _run(fake, tmp_path, "pre-1", "--dry-run")
    assert out.exit_code == 0, out.output
    text = out.output
    assert text.startswith(
        "Plan: reclaim of preemptible node pre-1: cordon it, emit TogetherPreempted, delete 4 "
        "pods with their own grace period, wait up to 300 s\n"
    )
    assert (
        "  delete                       team/api  class=serving  grace=30 s  checkpoint=-  owner=-  CRITICAL: must not run on preemptible nodes"
        in text
    )
    assert "  leave (DaemonSet pod)        team/gpu-plugin-x" in text
    assert text.rstrip().endswith("Critical pods on the node: 1 (team/api (serving))")
    assert {r.method for r in fake.requests} == {"GET"}
    as_json = json.loads(_run(fake, tmp_path, "pre-1", "--dry-run", "-o", "json").output)
    assert as_json["criticalPods"] == ["team/api"]


def test_the_drill_asks_first_and_does_nothing_when_told_no(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _node_with_pods(fake, policy)
    fake.reset_requests()
    out = _run(fake, tmp_path, "pre-1", stdin="n\n")
    assert out.exit_code == 2
    assert "Cordon pre-1 and delete 4 pods now? [y/N]" in out.output
    assert {r.method for r in fake.requests} == {"GET"}


def test_the_command_runs_with_yes_shows_progress_and_exits_1_when_pods_stay(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _node_with_pods(fake, policy)
    out = _run(fake, tmp_path, "pre-1", "--yes", "--wait", "1", "--uncordon")
    assert out.exit_code == 1, out.output
    text = out.output
    assert "drill: [" in text
    assert "0 of 4 pods gone" in text
    assert "  team/batch (interruptible): still running at the deadline (grace period 60 s)" in text
    assert "Outcomes: 4 still-running" in text
    assert "Critical pods on the node: 1 (team/api (serving))" in text
    assert "Node pre-1: uncordoned" in text


def test_the_command_refuses_a_standard_node(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.put(node("std-1", "standard"))
    out = _run(fake, tmp_path, "std-1", "--yes")
    assert out.exit_code == 2
    assert "error: node std-1 is a standard node" in out.output
