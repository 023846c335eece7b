"""``preemptguard audit`` against the fake API server: what it finds, how it reads the cluster
(one paginated pass, nothing per object), its output and exit status, and its PolicyReports."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from tests.cluster.conftest import namespace, node, owned, pod, template
from tests.cluster.fake_apiserver import FakeApiServer
from webhook.cli.main import main
from webhook.cluster import audit as auditing
from webhook.cluster import reports
from webhook.cluster.client import Cluster, ClusterError
from webhook.engine.policy import Policy

CRD = Path(__file__).with_name("policyreport-crd.yaml")
SELECTOR = {"nodeSelector": {"together.ai/compute-class": "preemptible"}}
TOLERATE = {"tolerations": [{"key": "together.ai/compute-class", "operator": "Exists"}]}


def _cluster_of(fake: FakeApiServer, policy: Policy) -> None:
    fake.put(node("pre-1", "preemptible"))
    fake.put(node("std-1", "standard"))
    fake.put(node("std-bare", None))
    fake.put(namespace("team"))
    fake.put(namespace("research", **{"together.ai/default-workload": "interruptible"}))
    fake.put(namespace("kube-system"))
    put = fake.put
    # Admitted through the webhook: nothing to find.
    put(pod("sweep-ok", workload="interruptible", node_name="pre-1", placed=True, policy=policy))
    put(pod("api-ok", workload="serving", node_name="std-1", placed=True, policy=policy))
    put(pod("plain", node_name="std-bare"))  # unclassified, left as written
    # Created while the webhook was not answering.
    put(pod("sweep-late", workload="interruptible", node_name="std-1"))
    put(pod("api-late", workload="serving", node_name="pre-1", **TOLERATE))
    put(pod("api-pinned", workload="serving", node_name="pre-1", **SELECTOR, **TOLERATE))
    put(pod("eval-default", "research", node_name="pre-1", **TOLERATE))
    put(pod("waiting", workload="interruptible", phase="Pending"))
    put(pod("done", workload="interruptible", node_name="std-1", phase="Succeeded"))
    put(pod("dns", "kube-system", workload="serving", node_name="pre-1"))
    # A DaemonSet's pod (its DaemonSet exists with that uid) and one that only says so.
    put(owned("DaemonSet", "gpu-plugin"))
    put(pod("gpu-plugin-x", workload="serving", node_name="pre-1",
            owner=("apps/v1", "DaemonSet", "gpu-plugin")))  # fmt: skip
    put(
        pod(
            "fake-ds",
            workload="serving",
            node_name="pre-1",
            owner=("apps/v1", "DaemonSet", "ghost"),
        )
    )
    # Workloads: one the webhook would refuse now, its ReplicaSet (covered), a finished Job.
    bad = template("serving", **SELECTOR)
    put(owned("Deployment", "frontend", spec={"selector": {}, "template": bad}))
    put(owned("ReplicaSet", "frontend-abc", spec={"selector": {}, "template": bad},
              metadata={"ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "frontend", "uid": "uid-frontend",
                                             "controller": True}]}))  # fmt: skip
    put(owned("Job", "old-run", spec={"template": bad},
              status={"conditions": [{"type": "Complete", "status": "True"}]}))  # fmt: skip
    put(owned("Job", "sweep-job", spec={"template": template("interruptible")}))


def _problems(result: auditing.Audit) -> dict[str, list[str]]:
    return {
        f"{r.kind}/{r.namespace}/{r.name}": sorted(p.code.value for p in r.problems)
        for r in result.findings
    }


def test_the_audit_finds_what_got_past_the_webhook_and_nothing_it_admitted(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(fake, policy)
    cluster = connect()
    result = auditing.audit(auditing.read_cluster(cluster, auditing.Scope()), policy)
    assert _problems(result) == {
        "Pod/team/sweep-late": ["interruptible-on-standard", "unplaced"],
        "Pod/team/api-late": ["critical-on-preemptible", "unplaced"],
        "Pod/team/api-pinned": ["critical-on-preemptible", "refused"],
        "Pod/research/eval-default": ["unplaced"],
        "Pod/team/waiting": ["unplaced"],
        "Pod/team/fake-ds": ["critical-on-preemptible", "unplaced"],
        "Deployment/team/frontend": ["refused"],
    }
    judged = {f"{r.kind}/{r.name}" for r in result.results}
    assert "Pod/done" not in judged  # finished pods hold no capacity
    assert "ReplicaSet/frontend-abc" not in judged  # its Deployment is judged
    assert "Job/old-run" not in judged  # finished
    by_name = {r.name: r for r in result.results}
    assert by_name["gpu-plugin-x"].judgement.decision.skipped  # its DaemonSet exists
    assert by_name["dns"].judgement.decision.skipped  # kube-system is excluded
    late = by_name["api-late"]
    assert (late.node, late.node_class, late.phase) == ("pre-1", "preemptible", "Running")
    codes = {f["code"] for f in late.as_json()["findings"]}
    assert {"affinity-required", "placement-recorded"} <= codes
    assert result.summary()["findings"] == {
        "refused": 2,
        "unplaced": 5,
        "critical-on-preemptible": 3,
        "interruptible-on-standard": 1,
    }


def test_a_pod_admitted_by_the_webhook_is_clean_whatever_its_class(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    fake.put(node("pre-1", "preemptible"))
    fake.put(node("std-1", "standard"))
    fake.put(namespace("team"))
    for klass in policy.classes:
        place = "pre-1" if klass in ("interruptible", "flexible") else "std-1"
        fake.put(pod(f"p-{klass}", workload=klass, node_name=place, placed=True, policy=policy,
                     annotations={"together.ai/checkpoint-seconds": "120"}))  # fmt: skip
    result = auditing.audit(auditing.read_cluster(connect(), auditing.Scope()), policy)
    assert len(result.results) == len(policy.classes)
    assert not result.findings


def test_ten_thousand_pods_are_read_in_pages_with_nothing_read_per_pod(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    fake.put(node("pre-1", "preemptible"))
    fake.put(node("std-1", "standard"))
    fake.put(namespace("team"))
    for i in range(10_000):
        placed = i % 100 != 0  # one in a hundred got past the webhook
        fake.put(pod(f"sweep-{i:05d}", workload="interruptible", placed=placed, policy=policy,
                     node_name="pre-1" if placed else "std-1"))  # fmt: skip
    fake.reset_requests()
    seen: list[tuple[str, int]] = []
    result = auditing.audit(
        auditing.read_cluster(connect(), auditing.Scope(), lambda k, n: seen.append((k, n))),
        policy,
    )
    assert result.summary()["pods"] == 10_000
    assert len(result.findings) == 100
    pod_pages = [r for r in fake.requests if r.path == "/api/v1/pods"]
    assert len(pod_pages) == 20  # 500 per page, as kubectl asks
    assert {r.method for r in fake.requests} == {"GET"}
    assert all(r.access.verb == "list" for r in fake.requests)
    assert ("Pod", 10_000) in seen


def test_an_expired_continue_token_starts_the_list_again(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    fake.put(namespace("team"))
    for i in range(1200):
        fake.put(pod(f"p{i}", workload="interruptible"))
    fake.expire_next_continue = True
    snapshot = auditing.read_cluster(connect(), auditing.Scope())
    assert len(snapshot.pods) == 1200


def test_a_cluster_without_batch_v1_cronjobs_is_audited_with_a_note(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    fake.served.discard(("batch", "v1", "cronjobs"))  # Kubernetes before 1.21
    fake.put(namespace("team"))
    snapshot = auditing.read_cluster(connect(), auditing.Scope())
    assert snapshot.notes == ["batch/v1 CronJob is not served by this cluster: not audited"]


def test_namespace_and_label_filters_reach_the_lists(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(fake, policy)
    fake.put(pod("labelled", workload="interruptible", labels={"app": "sweep"}))
    scope = auditing.Scope(namespaces=("team",), label_selector="app=sweep")
    result = auditing.audit(auditing.read_cluster(connect(), scope), policy, scope)
    assert [r.name for r in result.results] == ["labelled"]
    assert result.namespaces == ["team"]
    pod_lists = [r for r in fake.requests if r.path.endswith("/pods")]
    assert {r.path for r in pod_lists} == {"/api/v1/namespaces/team/pods"}
    assert all("labelSelector=app%3Dsweep" in r.query for r in pod_lists)


# --- the command ---------------------------------------------------------------------------


def _run(fake: FakeApiServer, tmp_path: Path, *args: str) -> Any:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    return CliRunner().invoke(main, ["audit", "--kubeconfig", str(kubeconfig), *args])


def test_the_command_exits_1_on_findings_and_prints_them_like_check(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _cluster_of(fake, policy)
    text = _run(fake, tmp_path)
    assert text.exit_code == 1, text.output
    assert (
        "Pod team/api-late  class=serving (annotation)  node=pre-1 (preemptible)  Running"
        in text.output
    )
    assert "    critical-on-preemptible: class serving must run on standard nodes" in text.output
    assert '    patch: add /metadata/annotations/together.ai~1placement "serving"' in text.output
    assert text.output.rstrip().endswith(
        "11 pods and 2 workloads in 3 namespaces audited: 7 with findings (2 refused, "
        "5 unplaced, 3 critical-on-preemptible, 1 interruptible-on-standard), 2 untouched"
    )
    out = _run(fake, tmp_path, "-o", "json")
    doc = json.loads(out.stdout)
    assert set(doc) == {"results", "summary", "notes", "reports"}
    first = doc["results"][0]
    check_keys = {"kind", "namespace", "name", "class", "source", "sourceDetail", "allowed",
                  "refused", "skipped", "reasons", "warnings", "changes", "findings", "patch"}  # fmt: skip
    assert check_keys | {"uid", "node", "nodeClass", "phase", "problems"} == set(first)


def test_the_command_exits_0_on_a_clean_cluster_and_2_without_one(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    fake.put(namespace("team"))
    fake.put(node("pre-1", "preemptible"))
    fake.put(pod("ok", workload="interruptible", node_name="pre-1", placed=True, policy=policy))
    clean = _run(fake, tmp_path)
    assert clean.exit_code == 0, clean.output
    assert "1 pod and 0 workloads in 1 namespace audited: 0 with findings" in clean.output
    missing = CliRunner().invoke(main, ["audit", "--kubeconfig", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "error: cannot use the cluster configuration" in missing.output
    fake.close()
    gone = _run(fake, tmp_path)
    assert gone.exit_code == 2
    assert "error: GET /api/v1/namespaces" in gone.output


def test_the_command_refuses_conflicting_filters(fake: FakeApiServer, tmp_path: Path) -> None:
    both = _run(fake, tmp_path, "-n", "team", "-A")
    assert both.exit_code == 2
    assert "not both" in both.output
    report = _run(fake, tmp_path, "--report", "-l", "app=x")
    assert report.exit_code == 2
    assert "--report describes whole namespaces" in report.output


# --- PolicyReports -------------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def test_reports_follow_the_policyreport_schema_one_per_namespace(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(fake, policy)
    cluster = connect()
    result = auditing.audit(auditing.read_cluster(cluster, auditing.Scope()), policy)
    written = reports.write(cluster, result, policy, now=1_900_000_000)
    assert written == ["research", "team"]  # kube-system: everything there is left alone
    team = fake.get("PolicyReport", "preemptguard", "team")
    assert team is not None
    jsonschema.validate(team, _schema())
    assert team["summary"] == {"pass": 4, "fail": 10, "warn": 0, "error": 0, "skip": 1}
    rules = sorted((r["resources"][0]["name"], r["rule"]) for r in team["results"])
    assert ("api-late", "critical-on-preemptible") in rules
    assert ("frontend", "refused") in rules
    late = next(r for r in team["results"] if r["resources"][0]["name"] == "api-late"
                and r["rule"] == "critical-on-preemptible")  # fmt: skip
    assert late["severity"] == "high"
    assert late["properties"]["node"] == "pre-1"
    assert late["policy"] == "preemptguard/default"
    assert late["source"] == "preemptguard"
    assert late["resources"][0]["kind"] == "Pod"


def test_a_namespace_that_became_clean_gets_an_empty_report(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(fake, policy)
    cluster = connect()
    first = auditing.audit(auditing.read_cluster(cluster, auditing.Scope()), policy)
    reports.write(cluster, first, policy, now=1)
    for name in ("eval-default",):
        fake.remove("Pod", name, "research")
    second = auditing.audit(auditing.read_cluster(cluster, auditing.Scope()), policy)
    reports.write(cluster, second, policy, now=2)
    research = fake.get("PolicyReport", "preemptguard", "research")
    assert research is not None
    assert research["results"] == []
    assert research["summary"]["fail"] == 0


def test_results_past_the_limit_are_counted_and_said_to_be_missing(policy: Policy) -> None:
    many = [pod(f"p{i}", workload="interruptible", node_name="std-1") for i in range(1100)]
    snap = auditing.Snapshot(pods=many, nodes=[node("std-1", "standard")])
    result = auditing.audit(snap, policy)
    report = reports.build(result, policy, now=0)["team"]
    assert report["summary"]["fail"] == 2200
    assert len(report["results"]) == reports.MAX_RESULTS + 1
    assert report["results"][-1]["rule"] == "truncated"
    assert "1200 more findings" in report["results"][-1]["message"]
    jsonschema.validate(report, _schema())


def test_a_cluster_without_the_crd_gets_told_what_to_install(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _cluster_of(fake, policy)
    fake.served.discard(("wgpolicyk8s.io", "v1alpha2", "policyreports"))
    out = _run(fake, tmp_path, "--report")
    assert out.exit_code == 2
    assert (
        "does not serve wgpolicyk8s.io/v1alpha2 PolicyReport: install the PolicyReport CRD"
        in out.output
    )


def test_cluster_errors_say_which_call_failed(
    fake: FakeApiServer, connect: Callable[[], Cluster]
) -> None:
    cluster = connect()
    fake.close()
    with pytest.raises(ClusterError, match="GET /api/v1/namespaces"):
        auditing.read_cluster(cluster, auditing.Scope())
