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
from webhook.cli.drill import render
from webhook.cli.main import main
from webhook.cluster import drill
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster, ClusterError

Obj = dict[str, Any]

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
    # Each pod deleted was first given DisruptionTarget, as the observer does in a reclaim.
    assert all(r.marked and r.mark_error is None for r in report.results)
    (marked,) = [c for c in batch["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (marked["status"], marked["reason"]) == ("True", "PreemptibleNodeReclaimed")
    assert marked["message"] == (
        "preemptguard drill: reclaim of preemptible node pre-1 rehearsed; the pod is deleted"
    )
    patched = [r.path for r in timed.requests if r.method == "PATCH" and "/pods/" in r.path]
    assert sorted(patched) == sorted(f"/api/v1/namespaces/team/pods/{n}/status"
                                     for n in ("api", "batch", "eval", "sweep"))  # fmt: skip
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


# --- what the drill must never do ----------------------------------------------------------


def _pods_of(timed: FakeApiServer, node_name: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in timed.list("Pod", "team")
        if p["spec"].get("nodeName") == node_name
    }


def test_a_pod_recreated_under_its_name_after_the_plan_is_left_alone(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=5)
    # While the prompt waits, two planned pods go and their StatefulSet makes them again under
    # the same names: one on the standard node, one on the drilled node itself.
    timed.remove("Pod", "batch", "team")
    timed.put(pod("batch", workload="interruptible", node_name="std-1", grace=60))
    timed.remove("Pod", "eval", "team")
    timed.put(pod("eval", workload="flexible", node_name="pre-1", grace=5))
    report = drill.execute(cluster, the_plan, clock)
    for name in ("batch", "eval"):
        recreated = timed.get("Pod", name, "team")
        assert recreated is not None
        assert "deletionTimestamp" not in recreated["metadata"], name
    deleted = {r.path.rsplit("/", 1)[-1] for r in timed.requests if r.method == "DELETE"}
    assert deleted == {"api", "sweep"}
    by_name = {r.pod.name: r for r in report.results}
    assert by_name["batch"].describe() == (
        "gone before the drill deleted it (a new pod of that name, if any, was left alone)"
    )
    assert by_name["eval"].outcome == "exited-in-time"
    assert render(report).startswith(
        f"Drill of pre-1: TogetherPreempted Event {report.event}, 2 pods deleted (2 gone before "
        "their delete), waited 5 s\n"
    )


class _Refusing(Cluster):
    """A client whose deletes of some pods are refused as the API server refuses them."""

    refusals: dict[str, int] = {}  # noqa: RUF012 - set per test before connecting

    def delete(
        self, resource_path: str, *, grace_seconds: int | None = None, uid: str | None = None
    ) -> Obj:
        status = self.refusals.get(resource_path.rsplit("/", 1)[-1])
        if status is not None:
            raise ClusterError(f"DELETE {resource_path}: HTTP {status}", status=status)
        return super().delete(resource_path, grace_seconds=grace_seconds, uid=uid)


def test_a_delete_refused_as_conflict_or_not_found_counts_the_planned_pod_as_gone(
    timed: FakeApiServer, policy: Policy, clock: FakeClock, tmp_path: Path
) -> None:
    _node_with_pods(timed, policy)
    # 409: the name now belongs to another pod (the uid precondition failed); 404: no pod.
    _Refusing.refusals = {"batch": 409, "eval": 404, "sweep": 403}
    cluster = _Refusing.connect(str(timed.kubeconfig(tmp_path / "kubeconfig")))
    try:
        the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=5)
        report = drill.execute(cluster, the_plan, clock)
    finally:
        cluster.close()
    outcomes = {r.pod.name: r.outcome for r in report.results}
    assert outcomes == {
        "api": "still-running",
        "batch": "exited-in-time",
        "eval": "exited-in-time",
        "sweep": "not-deleted",
    }


def test_a_name_taken_between_the_last_look_and_the_delete_is_left_alone(
    timed: FakeApiServer, policy: Policy, clock: FakeClock, tmp_path: Path
) -> None:
    """The delete names the planned pod's uid: the pod that took its name is not touched."""
    _node_with_pods(timed, policy)

    class Racing(Cluster):
        """The StatefulSet wins the race: the pod is replaced just before its delete."""

        def delete(
            self, resource_path: str, *, grace_seconds: int | None = None, uid: str | None = None
        ) -> Obj:
            if resource_path.endswith("/sweep"):
                timed.remove("Pod", "sweep", "team")
                replacement = pod("sweep", workload="interruptible", node_name="std-1", grace=240)
                replacement["metadata"]["uid"] = "uid-sweep-replacement"
                timed.put(replacement)
            return super().delete(resource_path, grace_seconds=grace_seconds, uid=uid)

    cluster = Racing.connect(str(timed.kubeconfig(tmp_path / "kubeconfig")))
    try:
        the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=1)
        report = drill.execute(cluster, the_plan, clock)
    finally:
        cluster.close()
    (sweep,) = [r for r in report.results if r.pod.name == "sweep"]
    assert sweep.gone_before
    assert sweep.outcome == "exited-in-time"
    replacement = timed.get("Pod", "sweep", "team")
    assert replacement is not None
    assert replacement["metadata"]["uid"] == "uid-sweep-replacement"
    assert "deletionTimestamp" not in replacement["metadata"]


def test_a_pod_that_cannot_be_marked_is_still_deleted_and_says_why(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=5)

    def refused(self: Cluster, resource_path: str, body: Obj) -> Obj:
        message = 'pods "x" is forbidden: cannot patch resource "pods/status"'
        raise ClusterError(f"PATCH {resource_path}: HTTP 403: {message}", status=403)

    monkeypatch.setattr(Cluster, "strategic_merge_patch", refused)
    report = drill.execute(cluster, the_plan, clock)
    assert len([r for r in timed.requests if r.method == "DELETE"]) == 4
    by_name = {r.pod.name: r for r in report.results}
    batch = by_name["batch"]
    assert not batch.marked
    assert batch.describe() == (
        "still running at the deadline (grace period 60 s); not marked DisruptionTarget: "
        'PATCH /api/v1/namespaces/team/pods/batch/status: HTTP 403: pods "x" is forbidden: '
        'cannot patch resource "pods/status"'
    )
    assert batch.as_json()["disruptionTarget"] is False
    assert batch.as_json()["markError"].startswith("PATCH /api/v1/namespaces/team/pods/batch")


def _refuse_events(monkeypatch: pytest.MonkeyPatch) -> None:
    def create(self: Cluster, resource_path: str, obj: Obj) -> Obj:
        if "/events" in resource_path:
            raise ClusterError(f"POST {resource_path}: HTTP 403: events is forbidden", status=403)
        return {}

    monkeypatch.setattr(Cluster, "create", create)


def _refuse_uncordon(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = Cluster.merge_patch

    def merge_patch(self: Cluster, resource_path: str, body: Obj) -> Obj:
        if body == {"spec": {"unschedulable": None}}:
            raise ClusterError(f"PATCH {resource_path}: HTTP 403: nodes is forbidden", status=403)
        return patch(self, resource_path, body)

    monkeypatch.setattr(Cluster, "merge_patch", merge_patch)


def _cordoned(timed: FakeApiServer, name: str = "pre-1") -> bool:
    found = timed.get("Node", name)
    assert found is not None
    return bool(found["spec"].get("unschedulable"))


def test_an_event_refused_undoes_the_drills_cordon_before_anything_is_deleted(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=5)
    _refuse_events(monkeypatch)
    with pytest.raises(ClusterError) as raised:
        drill.execute(cluster, the_plan, clock)  # not even asked to uncordon
    assert "HTTP 403: events is forbidden" in str(raised.value)
    assert str(raised.value).endswith(
        "nothing was deleted, and the drill's cordon of node pre-1 was undone"
    )
    assert not _cordoned(timed)
    assert not [r for r in timed.requests if r.method == "DELETE"]


def test_an_event_refused_and_the_cordon_not_undone_says_how_to_uncordon(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=5)
    _refuse_events(monkeypatch)
    _refuse_uncordon(monkeypatch)
    with pytest.raises(ClusterError) as raised:
        drill.execute(cluster, the_plan, clock, uncordon=True)
    message = str(raised.value)
    assert "nothing was deleted, but node pre-1 is left cordoned" in message
    assert "HTTP 403: nodes is forbidden" in message
    assert message.endswith("run `kubectl uncordon pre-1`")
    assert _cordoned(timed)


def test_an_uncordon_that_fails_at_the_end_still_reports_the_pods(
    fake: FakeApiServer, tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    _node_with_pods(fake, policy)
    _refuse_uncordon(monkeypatch)
    out = _run(fake, tmp_path, "pre-1", "--yes", "--wait", "0", "--uncordon")
    assert out.exit_code == 2, out.output
    assert "Outcomes: 4 still-running" in out.output
    assert (
        "Node pre-1: left cordoned: uncordoning it failed (PATCH /api/v1/nodes/pre-1: HTTP 403: "
        "nodes is forbidden): run `kubectl uncordon pre-1`"
    ) in out.output
    assert _cordoned(fake)


def test_the_command_says_the_event_was_refused_and_the_cordon_undone(
    fake: FakeApiServer, tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    _node_with_pods(fake, policy)
    _refuse_events(monkeypatch)
    out = _run(fake, tmp_path, "pre-1", "--yes")
    assert out.exit_code == 2, out.output
    assert "error: cannot write the TogetherPreempted Event" in out.output
    assert "the drill's cordon of node pre-1 was undone" in out.output
    assert not _cordoned(fake)


def test_uncordon_leaves_a_cordon_the_drill_did_not_make(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
) -> None:
    _node_with_pods(timed, policy)
    timed.modify("Node", "pre-1", spec={"unschedulable": True})  # someone's maintenance
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=1)
    assert the_plan.cordoned
    report = drill.execute(cluster, the_plan, clock, uncordon=True)
    assert _cordoned(timed)
    assert not report.uncordoned
    assert not [r for r in timed.requests if r.method == "PATCH" and "/nodes/" in r.path]
    assert report.node_state() == (
        "left cordoned: it was cordoned before the drill, and --uncordon undoes only the "
        "drill's own cordon"
    )


def test_a_cordon_made_while_the_prompt_waited_is_not_the_drills_either(
    timed: FakeApiServer,
    timed_connect: Callable[[], Cluster],
    policy: Policy,
    clock: FakeClock,
) -> None:
    _node_with_pods(timed, policy)
    cluster = timed_connect()
    the_plan = drill.plan(cluster, "pre-1", policy, wait_seconds=1)
    timed.modify("Node", "pre-1", spec={"unschedulable": True})
    report = drill.execute(cluster, the_plan, clock, uncordon=True)
    assert not report.cordoned_by_drill
    assert _cordoned(timed)


def test_the_command_says_it_left_an_earlier_cordon_in_place(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _node_with_pods(fake, policy)
    fake.modify("Node", "pre-1", spec={"unschedulable": True})
    out = _run(fake, tmp_path, "pre-1", "--yes", "--wait", "0", "--uncordon")
    assert out.exit_code == 1, out.output
    assert "Node pre-1: left cordoned: it was cordoned before the drill" in out.output
    assert _cordoned(fake)


@pytest.mark.parametrize("wait", ["nan", "NaN", "inf", "-inf", "infinity"])
@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_a_wait_that_is_not_a_finite_number_is_refused_before_anything(
    fake: FakeApiServer, tmp_path: Path, policy: Policy, wait: str, dry_run: tuple[str, ...]
) -> None:
    _node_with_pods(fake, policy)
    fake.reset_requests()
    out = _run(fake, tmp_path, "pre-1", "--yes", "--wait", wait, *dry_run)
    assert out.exit_code == 2, out.output
    assert "Invalid value for '--wait'" in out.output
    assert "a finite number of seconds" in out.output
    assert not fake.requests


def test_a_prompt_with_its_input_closed_is_a_drill_not_confirmed(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _node_with_pods(fake, policy)
    fake.reset_requests()
    out = _run(fake, tmp_path, "pre-1", stdin="")  # stdin at its end, as </dev/null
    assert out.exit_code == 2, out.output
    assert "Aborted!" not in out.output
    assert out.output.rstrip().endswith("drill not started")
    assert {r.method for r in fake.requests} == {"GET"}
