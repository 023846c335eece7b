"""``audit --report`` as OpenReports (``openreports.io/v1alpha1``) against the fake API server:
one Report per object scoped to its top-level owner, valid by the upstream CRDs' schemas
(``tests/fixtures/openreports``), passing results on request, re-runs that replace and retire
what earlier ones wrote, the choice of format, and the calls it makes (its RBAC)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from harness import REPO
from tests.cluster.conftest import namespace, node, owned, pod, template
from tests.cluster.fake_apiserver import GROUP_KINDS, KINDS, RESOURCES, FakeApiServer
from tests.cluster.test_audit import SELECTOR, TOLERATE, _cluster_of, _cluster_with_custom_kinds
from webhook.cli import audit as audit_cli
from webhook.cli.main import main
from webhook.cluster import audit as auditing
from webhook.cluster import reports
from webhook.cluster.access import (
    AUDIT_OPEN_REPORTS,
    AUDIT_REPORTS,
    DISCOVERY,
    audit_access,
    cluster_roles,
)
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster, ClusterError

Obj = dict[str, Any]
FIXTURES = REPO / "tests" / "fixtures" / "openreports"
REPORTS = ("openreports.io", "v1alpha1", "reports")
CLUSTER_REPORTS = ("openreports.io", "v1alpha1", "clusterreports")
POLICY_REPORTS = ("wgpolicyk8s.io", "v1alpha2", "policyreports")
NOW = 1_900_000_000


@pytest.fixture
def served(fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    """The fake, serving the OpenReports kinds as their CRDs define them (and PolicyReports)."""
    for key, kind, namespaced in ((REPORTS, "Report", True),
                                  (CLUSTER_REPORTS, "ClusterReport", False)):  # fmt: skip
        monkeypatch.setitem(RESOURCES, key, (kind, namespaced))
        monkeypatch.setitem(KINDS, kind, key)
        monkeypatch.setitem(GROUP_KINDS, (key[0], kind), key)
        fake.served.add(key)
    return fake


def _audit(connect: Callable[[], Cluster], policy: Policy, *namespaces: str) -> auditing.Audit:
    scope = auditing.Scope(namespaces=namespaces)
    return auditing.audit_cluster(connect(), scope, policy)


def _publish(
    connect: Callable[[], Cluster], policy: Policy, *namespaces: str, **options: Any
) -> reports.Published:
    cluster = connect()
    result = _audit(connect, policy, *namespaces)
    return reports.publish(cluster, result, policy, now=options.pop("now", NOW), **options)


def _stored(fake: FakeApiServer) -> dict[str, Obj]:
    """Every Report and ClusterReport stored, by ``namespace/name`` (``name`` cluster-wide)."""
    found = fake.list("Report") + fake.list("ClusterReport")
    return {_key(r): r for r in found}


def _key(report: Obj) -> str:
    meta = report["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _by_scope(stored: dict[str, Obj]) -> dict[str, Obj]:
    return {f"{r['scope']['kind']}/{r['scope']['name']}": r for r in stored.values()}


# --- the upstream schema -------------------------------------------------------------------


def _schema(kind: str) -> Obj:
    plural = {"Report": "reports", "ClusterReport": "clusterreports"}[kind]
    crd = yaml.safe_load((FIXTURES / f"openreports.io_{plural}.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    return dict(version["schema"]["openAPIV3Schema"])


def _pruned(value: Any, schema: Obj, where: str = "") -> Iterator[str]:
    """The fields of ``value`` that the API server would prune: those a structural schema does
    not define (``metadata`` is ObjectMeta, checked by the API server itself)."""
    if isinstance(value, dict) and where != ".metadata":
        defined = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if defined is not None and key in defined:
                yield from _pruned(item, defined[key], f"{where}.{key}")
            elif isinstance(extra, dict):
                yield from _pruned(item, extra, f"{where}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{where}.{key}"
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from _pruned(item, schema["items"], f"{where}[{i}]")


def _valid(report: Obj) -> None:
    """Valid by its upstream CRD's schema, every field one the schema defines."""
    schema = _schema(report["kind"])
    jsonschema.validate(report, schema)
    assert not list(_pruned(report, schema)), report["metadata"]["name"]


def test_the_pruning_check_finds_what_the_schema_lacks() -> None:
    schema = _schema("Report")
    report = {"results": [{"policy": "p", "subject": {}, "properties": {"a": "b"}}], "x": 1}
    assert list(_pruned(report, schema)) == [".results[0].subject", ".x"]


# --- one report per object, scoped to its owner --------------------------------------------


def test_each_object_with_findings_gets_a_report_scoped_to_its_top_level_owner(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(served, policy)
    # Two pods of the Deployment frontend's ReplicaSet (which its Deployment covers), created
    # while the webhook was not answering: the Deployment's report names them.
    for name in ("frontend-abc-1", "frontend-abc-2"):
        served.put(pod(name, workload="serving", node_name="std-1",
                       owner=("apps/v1", "ReplicaSet", "frontend-abc")))  # fmt: skip
    published = _publish(connect, policy)
    assert published.api is reports.OPENREPORTS
    stored = _stored(served)
    assert sorted(published.reports) == sorted(stored)
    assert (published.written, published.retired) == (len(stored), 0)
    scoped = _by_scope(stored)
    assert set(scoped) == {"Deployment/frontend", "Pod/sweep-late", "Pod/api-late",
                           "Pod/api-pinned", "Pod/eval-default", "Pod/waiting",
                           "Pod/fake-ds"}  # fmt: skip
    for report in stored.values():
        _valid(report)
        meta, scope = report["metadata"], report["scope"]
        assert report["kind"] == "Report"
        assert meta["name"] == f"preemptguard-{scope['uid']}"
        assert meta["namespace"] == scope["namespace"]
        assert meta["labels"] == {"app.kubernetes.io/managed-by": "preemptguard"}
        owner = {k: scope[k] for k in ("apiVersion", "kind", "name", "uid")}
        assert meta["ownerReferences"] == [owner]
        assert report["source"] == "preemptguard"
        assert report["configuration"] == {
            "limits": {"maxResults": reports.MAX_RESULTS, "statusFilter": ["fail", "warn"]}
        }
    frontend = scoped["Deployment/frontend"]
    assert frontend["scope"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "name": "frontend", "namespace": "team",
                                 "uid": "uid-frontend"}  # fmt: skip
    # The Deployment's own finding names no resource (it is the scope), its pods' name them.
    named = sorted(
        (r["rule"], r.get("resources", [{}])[0].get("name")) for r in frontend["results"]
    )
    assert named == [("refused", None), ("unplaced", "frontend-abc-1"),
                     ("unplaced", "frontend-abc-2")]  # fmt: skip
    pod_result = next(r for r in frontend["results"] if "resources" in r)
    (resource,) = pod_result["resources"]
    assert set(resource) == {"apiVersion", "kind", "name", "namespace", "uid"}
    assert (resource["apiVersion"], resource["kind"]) == ("v1", "Pod")
    assert frontend["summary"] == {"pass": 0, "fail": 3, "warn": 0, "error": 0, "skip": 0}
    late = scoped["Pod/api-late"]
    assert sorted(r["rule"] for r in late["results"]) == ["critical-on-preemptible", "unplaced"]
    assert all("resources" not in r for r in late["results"])
    assert late["results"][0]["properties"]["node"] == "pre-1"
    assert late["results"][0]["timestamp"] == {"seconds": NOW, "nanos": 0}


def test_the_scope_is_the_owner_the_audit_listed_with_the_kind_the_reference_names(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    """Up through controllers the audit listed (a RayJob's RayCronJob); an owner that is not
    there, or not of the group the reference names, leaves the object its own scope; a
    cluster-scoped object gets a ClusterReport."""
    _cluster_with_custom_kinds(served)
    served.put(pod("nightly-x-head", workload="coordinator", node_name=None,
                   owner=("ray.io/v1", "RayCluster", "nightly-x-raycluster")))  # fmt: skip
    _publish(connect, policy)
    scoped = _by_scope(_stored(served))
    assert set(scoped) == {
        "RayService/chat",
        "RayCronJob/nightly",
        "RayCluster/hand-made",
        "RayCluster/orphan",  # its RayJob "gone" was not listed
        "JobSet/infer",
        "LeaderWorkerSet/llm",
        "CronJob/vc-nightly",
        "StatefulSet/claims",  # names a batch Job: the uid is a Volcano Job's
        "MPIJob/allreduce",
        "ClusterTrainingRuntime/torch",
    }
    nightly = scoped["RayCronJob/nightly"]
    assert ("unplaced", "nightly-x-head") in {
        (r["rule"], r.get("resources", [{}])[0].get("name")) for r in nightly["results"]
    }
    torch = scoped["ClusterTrainingRuntime/torch"]
    _valid(torch)
    assert torch["kind"] == "ClusterReport"
    assert "namespace" not in torch["metadata"]
    assert "namespace" not in torch["scope"]
    assert served.get("ClusterReport", torch["metadata"]["name"]) is not None


def test_scope_of_walks_controllers_and_stops_at_what_is_not_there() -> None:
    deployment = owned("Deployment", "web")
    rs = owned("ReplicaSet", "web-1", controller=("apps/v1", "Deployment", "web"))
    child = pod("web-1-x", owner=("apps/v1", "ReplicaSet", "web-1"))
    owners = {"uid-web": deployment, "uid-web-1": rs}
    assert reports.scope_of(child, owners) is deployment
    assert reports.scope_of(child, {"uid-web-1": rs}) is rs
    assert reports.scope_of(child, {}) is child
    # A reference whose kind, name or namespace is not the object's with that uid.
    impostor = owned("StatefulSet", "web-1", uid="uid-web-1")
    assert reports.scope_of(child, {"uid-web-1": impostor}) is child
    elsewhere = owned("ReplicaSet", "web-1", "other")
    assert reports.scope_of(child, {"uid-web-1": elsewhere}) is child
    # A cycle of claims ends.
    a = owned("Deployment", "a", controller=("apps/v1", "Deployment", "b"))
    b = owned("Deployment", "b", controller=("apps/v1", "Deployment", "a"))
    assert reports.scope_of(a, {"uid-a": a, "uid-b": b}) is b


# --- passing results, summaries, limits ----------------------------------------------------


def test_passing_results_list_clean_objects_and_the_summary_counts_every_object(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(served, policy)
    served.put(owned("Deployment", "ok", spec={"selector": {}, "template": template("serving")}))
    served.put(pod("ok-1", workload="serving", node_name="std-1", placed=True, policy=policy,
                   owner=("apps/v1", "Deployment", "ok")))  # fmt: skip
    served.put(pod("ok-2", workload="serving", node_name="pre-1",
                   owner=("apps/v1", "Deployment", "ok"), **TOLERATE))  # fmt: skip
    _publish(connect, policy)
    without = set(_by_scope(_stored(served)))
    with_passing = _publish(connect, policy, passing=True)
    scoped = _by_scope(_stored(served))
    # Clean objects have reports of their own only when passing results are listed.
    assert set(scoped) - without == {"Pod/sweep-ok", "Pod/api-ok", "Pod/plain",
                                          "Job/sweep-job"}  # fmt: skip
    assert with_passing.written == len(scoped)  # every report listed more, or is new
    for report in scoped.values():
        _valid(report)
        limits = report["configuration"]["limits"]
        assert limits["statusFilter"] == ["pass", "fail", "warn"]
        listed = [r["result"] for r in report["results"]]
        assert report["summary"]["pass"] == listed.count("pass")
        assert report["summary"]["fail"] == listed.count("fail")
    ok = scoped["Deployment/ok"]
    assert ok["summary"] == {"pass": 2, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    passed = [r for r in ok["results"] if r["result"] == "pass"]
    assert {r.get("resources", [{}])[0].get("name") for r in passed} == {None, "ok-1"}
    assert all(r["rule"] == "placement" and "severity" not in r for r in passed)
    assert [r["result"] for r in ok["results"]] == ["fail", "fail", "pass", "pass"]
    plain = scoped["Pod/plain"]["results"][0]
    assert plain["properties"]["class"] == "unclassified"
    assert "the webhook would neither refuse nor change this pod now" in plain["message"]
    # A DaemonSet's pod is left alone: counted as skipped, in its DaemonSet's scope.
    assert "DaemonSet/gpu-plugin" not in scoped


def test_results_past_the_limit_are_counted_and_said_to_be_left_out(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    served.put(namespace("team"))
    served.put(node("std-1", "standard"))
    served.put(owned("Deployment", "big", spec={"selector": {}, "template": template()}))
    served.load([pod(f"p{i:04d}", workload="interruptible", node_name="std-1",
                     owner=("apps/v1", "Deployment", "big")) for i in range(600)])  # fmt: skip
    _publish(connect, policy, passing=True)
    (report,) = _stored(served).values()
    _valid(report)
    assert report["summary"] == {"pass": 1, "fail": 1200, "warn": 1, "error": 0, "skip": 0}
    assert len(report["results"]) == reports.MAX_RESULTS
    last = report["results"][-1]
    assert (last["rule"], last["result"]) == ("truncated", "warn")
    assert last["message"] == (
        "201 more findings and 1 more passing objects are not listed here: run "
        "`preemptguard audit -n team` to see them all"
    )


# --- re-runs: replaced, retired, left alone -------------------------------------------------


def test_a_rerun_rewrites_only_what_changed_and_deletes_what_is_clean_now(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(served, policy)
    first = _publish(connect, policy)
    served.reset_requests()
    again = _publish(connect, policy, now=NOW + 600)
    assert (again.written, again.retired) == (0, 0)  # only the timestamps would differ
    assert not [r for r in served.requests if r.method != "GET"]
    assert again.reports == first.reports
    # Fixed: a pod gone, the Deployment's template placed; one more pod got past the webhook.
    served.remove("Pod", "api-late", "team")
    placed = {"template": {"spec": {"nodeSelector": None}}}
    served.modify("Deployment", "frontend", "team", spec=placed)
    served.modify("ReplicaSet", "frontend-abc", "team", spec=placed)
    served.put(pod("late-2", workload="serving", node_name="pre-1", **TOLERATE))
    third = _publish(connect, policy, now=NOW + 1200)
    scoped = _by_scope(_stored(served))
    assert "Pod/api-late" not in scoped
    assert "Deployment/frontend" not in scoped
    assert "Pod/late-2" in scoped
    assert (third.written, third.retired) == (1, 2)
    assert sorted(third.reports) == sorted(_stored(served))


def test_a_namespaced_run_leaves_other_namespaces_and_cluster_reports_alone(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_with_custom_kinds(served)
    served.put(namespace("research"))
    served.put(pod("eval", "research", workload="serving", node_name=None, **SELECTOR))
    _publish(connect, policy)
    before = _stored(served)
    served.remove("Pod", "eval", "research")
    served.remove("RayService", "chat", "team")
    published = _publish(connect, policy, "team")
    after = _stored(served)
    assert published.retired == 1  # the RayService's report: its namespace was audited
    assert set(before) - set(after) == {"team/preemptguard-uid-chat"}
    assert any(k.startswith("research/") for k in after)  # not audited: left as it was
    assert "preemptguard-uid-torch" in after  # cluster-scoped: only an audit of all retires it


def test_a_switch_of_format_retires_the_other_formats_reports(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(served, policy)
    wgpolicy = reports.Target(reports.WGPOLICYK8S, (reports.OPENREPORTS,))
    _publish(connect, policy)
    written = len(_stored(served))
    to_policy_reports = _publish(connect, policy, target=wgpolicy)
    assert not _stored(served)  # every Report of the namespaces audited: deleted
    assert to_policy_reports.retired == written == 7
    team = served.get("PolicyReport", "preemptguard", "team")
    assert team is not None
    assert team["summary"]["fail"] == 10
    back = _publish(connect, policy)
    assert back.api is reports.OPENREPORTS
    team = served.get("PolicyReport", "preemptguard", "team")
    assert team is not None
    assert team["results"] == []
    assert team["summary"]["fail"] == 0
    assert back.retired == 2  # the PolicyReports of team and research, emptied


# --- the format ----------------------------------------------------------------------------


def test_the_format_is_openreports_where_served_else_wgpolicyk8s_or_the_one_asked_for(
    served: FakeApiServer, connect: Callable[[], Cluster]
) -> None:
    cluster = connect()
    both = reports.choose(cluster)
    assert both == reports.Target(reports.OPENREPORTS, (reports.WGPOLICYK8S,))
    assert reports.choose(cluster, "wgpolicyk8s") == reports.Target(
        reports.WGPOLICYK8S, (reports.OPENREPORTS,)
    )
    served.served -= {REPORTS, CLUSTER_REPORTS}
    assert reports.choose(cluster) == reports.Target(reports.WGPOLICYK8S)
    with pytest.raises(ClusterError) as asked:
        reports.choose(cluster, "openreports")
    assert str(asked.value).startswith(
        "this cluster does not serve openreports.io/v1alpha1 Reports (--report-api "
        "openreports): install the OpenReports CRDs"
    )
    served.served.discard(POLICY_REPORTS)
    with pytest.raises(ClusterError, match="serves no policy report API, neither"):
        reports.choose(cluster)
    assert audit_cli.REPORT_APIS == reports.API_NAMES


# --- the command ---------------------------------------------------------------------------


def _run(fake: FakeApiServer, tmp_path: Path, *args: str) -> Any:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    return CliRunner().invoke(main, ["audit", "--kubeconfig", str(kubeconfig), *args])


def test_the_command_writes_openreports_where_served_and_the_format_asked_for(
    served: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _cluster_of(served, policy)
    text = _run(served, tmp_path, "--report")
    assert text.exit_code == 1, text.output
    assert text.output.rstrip().endswith(
        "Reports (openreports.io/v1alpha1): 7 in 2 namespaces (research, team); 7 written, "
        "0 up to date, 0 retired"
    )
    out = _run(served, tmp_path, "--report", "--report-api", "wgpolicyk8s", "-o", "json")
    doc = json.loads(out.stdout)
    assert doc["reportApi"] == "wgpolicyk8s.io/v1alpha2"
    assert doc["reports"] == ["research/preemptguard", "team/preemptguard"]
    assert not _stored(served)
    passing = _run(served, tmp_path, "--report", "--report-passing", "-o", "json")
    doc = json.loads(passing.stdout)
    assert doc["reportApi"] == "openreports.io/v1alpha1"
    assert len(doc["reports"]) == 11  # and the four clean objects' (kube-system's: skipped)


def test_the_command_refuses_a_format_the_cluster_lacks_before_reading_it(
    served: FakeApiServer, tmp_path: Path
) -> None:
    served.served -= {REPORTS, CLUSTER_REPORTS}
    served.put(namespace("team"))
    out = _run(served, tmp_path, "--report", "--report-api", "openreports")
    assert out.exit_code == 2
    assert "error: this cluster does not serve openreports.io/v1alpha1 Reports" in out.output
    assert [r.path for r in served.requests] == ["/apis"]
    lonely = _run(served, tmp_path, "--report-passing")
    assert lonely.exit_code == 2
    assert "--report-api and --report-passing need --report" in lonely.output


# --- the calls it makes ----------------------------------------------------------------------


def test_writing_openreports_makes_exactly_the_calls_declared_for_them(
    served: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    """Lists, server-side apply (create and patch) and deletes of Reports and ClusterReports;
    nothing of PolicyReports where the cluster does not serve them. The shipped role grants
    both formats."""
    served.served.discard(POLICY_REPORTS)
    _cluster_with_custom_kinds(served)
    cluster = connect()
    reports.write(cluster, auditing.audit(auditing.read_cluster(cluster, auditing.Scope()),
                                          policy), policy, now=NOW)  # fmt: skip
    served.remove("RayService", "chat", "team")
    served.remove("ClusterTrainingRuntime", "torch")
    reports.write(cluster, auditing.audit(auditing.read_cluster(cluster, auditing.Scope()),
                                          policy), policy, now=NOW)  # fmt: skip
    assert cluster.calls - audit_access(policy) - DISCOVERY == AUDIT_OPEN_REPORTS
    assert cluster_roles(policy)["preemptguard-audit-reports"] == (
        AUDIT_REPORTS | AUDIT_OPEN_REPORTS
    )
