"""``preemptguard audit`` against the fake API server: what it finds, how it reads the cluster
(one paginated pass, nothing per object), its output and exit status, and its wgpolicyk8s.io
PolicyReports (its OpenReports: ``test_reports.py``)."""

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
from tests.cluster.fake_apiserver import RESOURCES, FakeApiServer
from webhook.cli.main import main
from webhook.cluster import audit as auditing
from webhook.cluster import inventory, reports
from webhook.cluster.access import audited_kinds
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster, ClusterError
from webhook.loading.policies import load_policy

CRD = Path(__file__).with_name("policyreport-crd.yaml")
SELECTOR: dict[str, Any] = {"nodeSelector": {"together.ai/compute-class": "preemptible"}}
TOLERATE: dict[str, Any] = {
    "tolerations": [{"key": "together.ai/compute-class", "operator": "Exists"}]
}


# A policy of its own that lists one workload kind (tests add more after it).
RAY_SERVICE_POLICY = """\
apiVersion: preemptguard.together.ai/v1alpha1
kind: PlacementPolicy
metadata: {name: own}
spec:
  classes: [{name: serving, placement: standard}]
  workloadKinds:
    - group: ray.io
      kind: RayService
      templates:
        - path: "spec.rayClusterConfig.workerGroupSpecs[*].template"
          defaultClass: serving
"""


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
    result = auditing.audit_cluster(cluster, auditing.Scope(), policy)
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
    assert by_name["gpu-plugin-x"].verdict.skipped  # its DaemonSet exists
    assert by_name["dns"].verdict.skipped  # kube-system is excluded
    late = by_name["api-late"]
    assert (late.node, late.node_class, late.phase) == ("pre-1", "preemptible", "Running")
    codes = {f["code"] for f in late.as_json()["findings"]}
    assert {"affinity-required", "placement-recorded"} <= codes
    assert result.summary()["findings"] == {
        "refused": 2,
        "unplaced": 5,
        "critical-on-preemptible": 3,
        "interruptible-on-standard": 1,
        "left-alone-on-preemptible": 0,
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
    result = auditing.audit_cluster(connect(), auditing.Scope(), policy)
    assert len(result.results) == len(policy.classes)
    assert not result.findings


def test_a_workload_naming_a_clean_owner_is_judged_on_its_own_template(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    """An ownerReference is its writer's claim: a Deployment that names another, clean one as
    its controller is still reported, and so is a ReplicaSet whose template is not its clean
    Deployment's (one left from an earlier revision: a rollback would bring it back)."""
    fake.put(namespace("team"))
    bad = template("serving", **SELECTOR)
    clean = template("serving")
    fake.put(owned("Deployment", "parent", spec={"selector": {}, "template": clean}))
    fake.put(owned("ReplicaSet", "parent-new", spec={"selector": {}, "template": clean},
                   controller=("apps/v1", "Deployment", "parent")))  # fmt: skip
    fake.put(owned("ReplicaSet", "parent-old", spec={"selector": {}, "template": bad},
                   controller=("apps/v1", "Deployment", "parent")))  # fmt: skip
    fake.put(owned("Deployment", "evil", spec={"selector": {}, "template": bad},
                   controller=("apps/v1", "Deployment", "parent")))  # fmt: skip
    fake.put(owned("Deployment", "control", spec={"selector": {}, "template": bad}))
    result = auditing.audit_cluster(connect(), auditing.Scope(), policy)
    assert _problems(result) == {
        "Deployment/team/evil": ["refused"],
        "ReplicaSet/team/parent-old": ["refused"],
        "Deployment/team/control": ["refused"],
    }
    judged = {f"{r.kind}/{r.name}" for r in result.results}
    assert "ReplicaSet/parent-new" not in judged  # its Deployment is judged, and clean


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
    result = auditing.audit_cluster(
        connect(), auditing.Scope(), policy, lambda k, n: seen.append((k, n))
    )
    assert result.summary()["pods"] == 10_000
    assert len(result.findings) == 100
    # What is kept of a pod once judged: what names it, never the pod.
    clean = next(r for r in result.results if not r.problems)
    assert clean.judgement is None
    assert set(clean.obj["metadata"]) <= {"name", "namespace", "uid", "ownerReferences"}
    late = result.findings[0]
    assert late.judgement is not None
    assert late.judgement.patch
    assert late.judgement.decision.mutated is late.obj  # the pod's copy is not held
    # Equal verdicts are one object.
    assert len({id(r.verdict) for r in result.results}) == len({r.verdict for r in result.results})
    pod_pages = [r for r in fake.requests if r.path == "/api/v1/pods"]
    assert len(pod_pages) == 20  # 500 per page, as kubectl asks
    assert {r.method for r in fake.requests} == {"GET"}
    # One discovery request (which groups and versions are served), lists otherwise.
    assert [r.path for r in fake.requests if r.access.non_resource] == ["/apis"]
    assert all(r.access.verb == "list" for r in fake.requests if not r.access.non_resource)
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
    fake.expire_next_continue = True
    judged = auditing.audit_cluster(connect(), auditing.Scope(), policy)
    assert judged.summary()["pods"] == 1200  # the pods judged before the restart are dropped


def test_a_cluster_without_batch_v1_cronjobs_is_audited_with_a_note(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    fake.served.discard(("batch", "v1", "cronjobs"))  # as 1.20, without batch/v1beta1
    fake.put(namespace("team"))
    snapshot = auditing.read_cluster(connect(), auditing.Scope())
    assert snapshot.notes == [
        "CronJob.batch is not served by this cluster (none of batch/v1 serves cronjobs): "
        "not audited"
    ]


# --- the policy's workload kinds ----------------------------------------------------------

ON_PREEMPTIBLE: dict[str, Any] = {"nodeSelector": {"together.ai/compute-class": "preemptible"}}
RAY = "ray.io/v1"


def _ray_cluster_spec(*, head: Any = None, worker: Any = None) -> Any:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": head or template()},
        "workerGroupSpecs": [{"groupName": "small", "replicas": 1, "rayStartParams": {},
                              "template": worker or template()}],
    }  # fmt: skip


def _cluster_with_custom_kinds(fake: FakeApiServer) -> None:
    """Objects of the default policy's CRD kinds, each mistake made once, and what the
    operators make of them (controller references to their makers)."""
    fake.put(namespace("team"))
    put = fake.put
    # A RayService whose workers (serving: the kind's template default) require preemptible
    # nodes, and the RayCluster KubeRay made of it.
    serving = _ray_cluster_spec(worker=template(**ON_PREEMPTIBLE))
    put(owned("RayService", "chat", api_version=RAY, spec={"rayClusterConfig": serving}))
    put(owned("RayCluster", "chat-raycluster-x", api_version=RAY, spec=serving,
              controller=(RAY, "RayService", "chat")))  # fmt: skip
    # A RayCronJob whose head (a coordinator) is pinned to preemptible nodes, the RayJob it
    # made and that RayJob's RayCluster: one mistake, reported on the RayCronJob.
    pinned = _ray_cluster_spec(head=template(**ON_PREEMPTIBLE))
    put(owned("RayCronJob", "nightly", api_version=RAY,
              spec={"schedule": "@daily", "jobTemplate": {"rayClusterSpec": pinned}}))  # fmt: skip
    put(owned("RayJob", "nightly-x", api_version=RAY, spec={"rayClusterSpec": pinned},
              controller=(RAY, "RayCronJob", "nightly")))  # fmt: skip
    put(owned("RayCluster", "nightly-x-raycluster", api_version=RAY, spec=pinned,
              controller=(RAY, "RayJob", "nightly-x")))  # fmt: skip
    # The same head in a RayCluster nobody made, and in one whose maker is not there (a uid
    # that matches nothing read): both judged.
    put(owned("RayCluster", "hand-made", api_version=RAY, spec=pinned))
    put(owned("RayCluster", "orphan", api_version=RAY, spec=pinned,
              controller=(RAY, "RayJob", "gone")))  # fmt: skip
    # A JobSet with a serving replicated job pinned to preemptible nodes, and its Job.
    job_template = {"spec": {"template": template("serving", **ON_PREEMPTIBLE)}}
    put(owned("JobSet", "infer", api_version="jobset.x-k8s.io/v1alpha2",
              spec={"replicatedJobs": [{"name": "driver", "template": job_template}]}))  # fmt: skip
    put(owned("Job", "infer-driver-0", spec=job_template["spec"],
              controller=("jobset.x-k8s.io/v1alpha2", "JobSet", "infer")))  # fmt: skip
    # A LeaderWorkerSet (serving by default) on preemptible nodes, and its StatefulSet.
    lws = {"leaderWorkerTemplate": {"workerTemplate": template(**ON_PREEMPTIBLE)}}
    put(owned("LeaderWorkerSet", "llm", api_version="leaderworkerset.x-k8s.io/v1", spec=lws))
    put(owned("StatefulSet", "llm", uid="uid-llm-sts",
              spec={"selector": {}, "template": template(**ON_PREEMPTIBLE)},
              controller=("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llm")))  # fmt: skip
    # A Volcano Job (batch.volcano.sh: not a batch Job) with a serving task on preemptible
    # nodes, made by a Volcano CronJob; a StatefulSet that claims a batch Job of the same
    # name and uid as its maker is judged: the kinds differ by group.
    tasks = {"tasks": [{"name": "serve", "template": template("serving", **ON_PREEMPTIBLE)}]}
    put(owned("CronJob", "vc-nightly", api_version="batch.volcano.sh/v1alpha1",
              spec={"schedule": "@daily", "jobTemplate": {"spec": tasks}}))  # fmt: skip
    put(owned("Job", "vc-nightly-1", api_version="batch.volcano.sh/v1alpha1", spec=tasks,
              controller=("batch.volcano.sh/v1alpha1", "CronJob", "vc-nightly")))  # fmt: skip
    put(owned("StatefulSet", "claims", uid="uid-claims",
              spec={"selector": {}, "template": template("serving", **ON_PREEMPTIBLE)},
              controller=("batch/v1", "Job", "vc-nightly-1")))  # fmt: skip
    # mpi-operator's MPIJob, served at kubeflow.org/v2beta1 only (v1 is the group's preferred
    # version, for the training operator's kinds): its launcher pinned to preemptible nodes.
    put(owned("MPIJob", "allreduce", api_version="kubeflow.org/v2beta1",
              spec={"mpiReplicaSpecs": {"Launcher": {"template": template(**ON_PREEMPTIBLE)},
                                        "Worker": {"template": template("interruptible")}}}))  # fmt: skip
    # A cluster-scoped runtime whose trainer is serving and pinned.
    runtime = {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
        "spec": {"template": template("serving", **ON_PREEMPTIBLE)}}}]}}}  # fmt: skip
    crt = owned("ClusterTrainingRuntime", "torch", api_version="trainer.kubeflow.org/v1alpha1",
                spec=runtime)  # fmt: skip
    del crt["metadata"]["namespace"]
    put(crt)


def test_every_kind_of_the_policy_is_judged_and_what_an_owner_made_only_through_it(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_with_custom_kinds(fake)
    result = auditing.audit_cluster(connect(), auditing.Scope(), policy)
    assert _problems(result) == {
        "RayService/team/chat": ["refused"],
        "RayCronJob/team/nightly": ["refused"],
        "RayCluster/team/hand-made": ["refused"],
        "RayCluster/team/orphan": ["refused"],
        "JobSet/team/infer": ["refused"],
        "LeaderWorkerSet/team/llm": ["refused"],
        "CronJob/team/vc-nightly": ["refused"],
        "StatefulSet/team/claims": ["refused"],
        "MPIJob/team/allreduce": ["refused"],
        "ClusterTrainingRuntime//torch": ["refused"],
    }
    judged = {f"{r.kind}/{r.name}" for r in result.results}
    for made in ("RayCluster/chat-raycluster-x", "RayJob/nightly-x",
                 "RayCluster/nightly-x-raycluster", "Job/infer-driver-0", "StatefulSet/llm",
                 "Job/vc-nightly-1"):  # fmt: skip
        assert made not in judged, made
    assert not result.notes
    by_name = {r.name: r for r in result.results}
    chat = by_name["chat"]
    assert chat.obj["apiVersion"] == "ray.io/v1"
    assert "spec.rayClusterConfig.workerGroupSpecs[0].template: class serving" in (
        chat.problems[0].message
    )
    assert by_name["vc-nightly"].obj["apiVersion"] == "batch.volcano.sh/v1alpha1"
    # Found at the version that serves it, after the group's preferred one did not.
    assert by_name["allreduce"].obj["apiVersion"] == "kubeflow.org/v2beta1"
    mpijob_lists = [r.path for r in fake.requests if r.path.endswith("/mpijobs")]
    assert mpijob_lists == ["/apis/kubeflow.org/v1/mpijobs", "/apis/kubeflow.org/v2beta1/mpijobs"]
    assert by_name["torch"].namespace == ""
    assert result.summary()["workloads"] == 10  # those ten: nothing they made


def test_namespaced_audits_leave_cluster_scoped_kinds_alone(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_with_custom_kinds(fake)
    scope = auditing.Scope(namespaces=("team",))
    result = auditing.audit_cluster(connect(), scope, policy)
    assert "ClusterTrainingRuntime//torch" not in _problems(result)
    assert "RayService/team/chat" in _problems(result)
    assert not [r for r in fake.requests if "clustertrainingruntimes" in r.path]
    assert [r.path for r in fake.requests if r.path.endswith("/rayservices")] == [
        "/apis/ray.io/v1/namespaces/team/rayservices"
    ]


def test_groups_the_cluster_does_not_serve_are_noted_once_and_never_listed(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    own = {"", "apps", "batch", "coordination.k8s.io", "wgpolicyk8s.io"}
    fake.served = {key for key in RESOURCES if key[0] in own}  # no CRD installed
    fake.put(namespace("team"))
    fake.put(owned("Deployment", "web", spec={"selector": {}, "template": template()}))
    snapshot = auditing.read_cluster(connect(), auditing.Scope())
    assert snapshot.notes == [
        "API groups not served by this cluster (their workload kinds are not audited): "
        "ray.io, kubeflow.org, trainer.kubeflow.org, jobset.x-k8s.io, leaderworkerset.x-k8s.io, "
        "disaggregatedset.x-k8s.io, batch.volcano.sh, flow.volcano.sh, workload.codeflare.dev"
    ]
    assert [w["metadata"]["name"] for w in snapshot.workloads] == ["web"]
    listed_groups = {r.access.group for r in fake.requests if not r.access.non_resource}
    assert listed_groups == {"", "apps", "batch"}


def test_the_kinds_listed_are_the_given_policys(
    fake: FakeApiServer, connect: Callable[[], Cluster], tmp_path: Path
) -> None:
    trainer = (
        "    - group: example.com\n      kind: Trainer\n      templates: [{path: spec.template}]\n"
    )
    (tmp_path / "policy.yaml").write_text(RAY_SERVICE_POLICY + trainer)
    own = load_policy(tmp_path)
    assert [k.kind for k in audited_kinds(own)] == ["RayService", "Trainer"]
    _cluster_with_custom_kinds(fake)
    fake.reset_requests()
    snapshot = auditing.read_cluster(connect(), auditing.Scope(), policy=own)
    listed = {r.access.resource for r in fake.requests if not r.access.non_resource}
    assert listed == {"namespaces", "nodes", "pods", "daemonsets", "rayservices"}
    assert snapshot.notes == [
        "API groups not served by this cluster (their workload kinds are not audited): example.com"
    ]
    result = auditing.audit(snapshot, own)
    assert _problems(result) == {"RayService/team/chat": ["refused"]}


def test_namespace_and_label_filters_reach_the_lists(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(fake, policy)
    fake.put(pod("labelled", workload="interruptible", labels={"app": "sweep"}))
    scope = auditing.Scope(namespaces=("team",), label_selector="app=sweep")
    result = auditing.audit_cluster(connect(), scope, policy)
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
    assert set(doc) == {"results", "summary", "notes", "reports", "reportApi"}
    assert (doc["reports"], doc["reportApi"]) == ([], None)
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
    assert (
        f"error: cannot use the cluster configuration: kubeconfig {tmp_path / 'nope'} does not exist"
        in missing.output
    )
    folder = CliRunner().invoke(main, ["audit", "--kubeconfig", str(tmp_path)])
    assert folder.exit_code == 2
    assert f"kubeconfig {tmp_path} is not a file" in folder.output
    fake.close()
    gone = _run(fake, tmp_path)
    assert gone.exit_code == 2
    assert "error: GET /api/v1/namespaces" in gone.output


def test_a_namespace_that_does_not_exist_is_an_error_not_a_clean_audit(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _cluster_of(fake, policy)
    typo = _run(fake, tmp_path, "-n", "team", "-n", "tema")
    assert typo.exit_code == 2, typo.output
    assert "error: no namespace tema in this cluster: check -n/--namespace" in typo.output
    assert _run(fake, tmp_path, "-n", "team").exit_code == 1


def test_the_command_lists_the_kinds_of_the_policy_it_is_given(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "policy.yaml").write_text(RAY_SERVICE_POLICY)
    _cluster_with_custom_kinds(fake)
    fake.reset_requests()
    out = _run(fake, tmp_path, "--policies", str(tmp_path / "policy"), "-o", "json")
    assert out.exit_code == 1, out.output
    listed = {r.access.resource for r in fake.requests if not r.access.non_resource}
    assert listed == {"namespaces", "nodes", "pods", "daemonsets", "rayservices"}
    found = {f"{r['kind']}/{r['name']}" for r in json.loads(out.stdout)["results"]}
    assert "RayService/chat" in found


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
    result = auditing.audit_cluster(cluster, auditing.Scope(), policy)
    written = reports.write(cluster, result, policy, now=1_900_000_000)
    # kube-system: everything there is left alone
    assert written == ["research/preemptguard", "team/preemptguard"]
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
    first = auditing.audit_cluster(cluster, auditing.Scope(), policy)
    reports.write(cluster, first, policy, now=1)
    for name in ("eval-default",):
        fake.remove("Pod", name, "research")
    second = auditing.audit_cluster(cluster, auditing.Scope(), policy)
    reports.write(cluster, second, policy, now=2)
    research = fake.get("PolicyReport", "preemptguard", "research")
    assert research is not None
    assert research["results"] == []
    assert research["summary"]["fail"] == 0
    # The same again, later: nothing to write (the results' timestamps aside, nothing changed).
    fake.reset_requests()
    assert reports.write(cluster, second, policy, now=3) == ["team/preemptguard"]
    assert {r.method for r in fake.requests} == {"GET"}


def test_results_past_the_limit_are_counted_and_said_to_be_missing(policy: Policy) -> None:
    many = [pod(f"p{i}", workload="interruptible", node_name="std-1") for i in range(1100)]
    snap = auditing.Snapshot(pods=many, nodes=[node("std-1", "standard")])
    result = auditing.audit(snap, policy)
    report = reports.build(result, policy, now=0)[("team", "preemptguard")]
    assert report["summary"]["fail"] == 2200
    assert report["summary"]["warn"] == 1
    assert len(report["results"]) == reports.MAX_RESULTS
    assert report["results"][-1]["rule"] == "truncated"
    assert report["results"][-1]["message"] == (
        "1201 more findings are not listed here: run `preemptguard audit -n team` to see them all"
    )
    jsonschema.validate(report, _schema())


def test_passing_results_list_each_clean_object_of_the_namespace(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    _cluster_of(fake, policy)
    cluster = connect()
    result = auditing.audit_cluster(cluster, auditing.Scope(), policy)
    target = reports.Target(reports.WGPOLICYK8S)
    reports.write(cluster, result, policy, now=1_900_000_000, target=target, passing=True)
    team = fake.get("PolicyReport", "preemptguard", "team")
    assert team is not None
    jsonschema.validate(team, _schema())
    assert team["summary"] == {"pass": 4, "fail": 10, "warn": 0, "error": 0, "skip": 1}
    passed = {r["resources"][0]["name"] for r in team["results"] if r["result"] == "pass"}
    assert passed == {"sweep-ok", "api-ok", "plain", "sweep-job"}
    assert "scope" not in team  # per namespace: each result names its object


def test_a_cluster_without_the_crd_gets_told_what_to_install(
    fake: FakeApiServer, tmp_path: Path, policy: Policy
) -> None:
    _cluster_of(fake, policy)
    fake.served.discard(("wgpolicyk8s.io", "v1alpha2", "policyreports"))
    out = _run(fake, tmp_path, "--report")
    assert out.exit_code == 2
    assert (
        "error: this cluster serves no policy report API, neither openreports.io/v1alpha1 nor "
        "wgpolicyk8s.io/v1alpha2: install the OpenReports CRDs" in out.output
    )
    assert "or the PolicyReport CRD (Kyverno installs it" in out.output


def test_cluster_errors_say_which_call_failed(
    fake: FakeApiServer, connect: Callable[[], Cluster]
) -> None:
    cluster = connect()
    fake.close()
    with pytest.raises(ClusterError, match="GET /api/v1/namespaces"):
        auditing.read_cluster(cluster, auditing.Scope())


def _daemonsets(fake: FakeApiServer) -> None:
    fake.put(node("pre-1", "preemptible"))
    fake.put(namespace("team"))
    fake.put(namespace("kube-system"))
    pinned = template("serving", **SELECTOR, **TOLERATE)
    fake.put(owned("DaemonSet", "proxy", spec={"selector": {}, "template": pinned},
                   metadata={"labels": {"app": "proxy"}}))  # fmt: skip
    fake.put(owned("DaemonSet", "agent", spec={"selector": {}, "template": template("serving")}))
    fake.put(
        owned("DaemonSet", "spot-agent", spec={"selector": {}, "template": template(**SELECTOR)})
    )
    fake.put(owned("DaemonSet", "dns", "kube-system", spec={"selector": {}, "template": pinned}))


def test_a_daemonset_whose_standard_only_pods_require_preemptible_nodes_is_reported(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    """Admission leaves DaemonSets alone, so a serving one pinned to preemptible nodes gets
    there unchecked: the audit says so; one left as written, an unclassified one pinned to
    preemptible nodes and one in an excluded namespace are nothing to report."""
    _daemonsets(fake)
    cluster = connect()
    result = auditing.audit_cluster(cluster, auditing.Scope(), policy)
    assert _problems(result) == {"DaemonSet/team/proxy": ["left-alone-on-preemptible"]}
    (found,) = result.findings
    (problem,) = found.problems
    assert problem.severity == "high"
    assert "nothing keeps these off preemptible nodes: spec.template: class serving" in (
        problem.message
    )
    assert found.verdict.skipped  # still left alone, as admission leaves it
    assert result.summary()["findings"]["left-alone-on-preemptible"] == 1
    assert result.summary()["untouched"] == 0
    written = reports.write(cluster, result, policy, now=1_900_000_000)
    assert written == ["team/preemptguard"]
    team = fake.get("PolicyReport", "preemptguard", "team")
    assert team is not None
    jsonschema.validate(team, _schema())
    assert team["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    (entry,) = team["results"]
    assert (entry["rule"], entry["severity"]) == ("left-alone-on-preemptible", "high")
    assert entry["resources"][0]["kind"] == "DaemonSet"
    assert entry["resources"][0]["name"] == "proxy"


@pytest.mark.parametrize(("selector", "reported"), [("app=proxy", True), ("app=other", False)])
def test_daemonsets_are_reported_as_the_label_selector_says(
    fake: FakeApiServer,
    connect: Callable[[], Cluster],
    policy: Policy,
    selector: str,
    reported: bool,
) -> None:
    _daemonsets(fake)
    scope = auditing.Scope(label_selector=selector)
    snap = auditing.read_cluster(connect(), scope)
    assert {d["metadata"]["name"] for d in snap.daemonsets} == {
        "proxy",
        "agent",
        "spot-agent",
        "dns",
    }
    result = auditing.audit(snap, policy, scope)
    expected = {"DaemonSet/team/proxy": ["left-alone-on-preemptible"]} if reported else {}
    assert _problems(result) == expected


def test_a_daemonset_takes_its_class_from_its_namespace_as_its_pods_would(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    fake.put(namespace("front", **{"together.ai/default-workload": "serving"}))
    fake.put(namespace("team"))
    unclassified = template(**SELECTOR, **TOLERATE)
    for ns in ("front", "team"):
        fake.put(owned("DaemonSet", "cache", ns, spec={"selector": {}, "template": unclassified}))
    result = auditing.audit_cluster(connect(), auditing.Scope(), policy)
    assert _problems(result) == {"DaemonSet/front/cache": ["left-alone-on-preemptible"]}
    (problem,) = result.findings[0].problems
    assert "class serving must run on standard nodes" in problem.message


def test_a_listed_object_is_kept_lean_and_a_judged_one_by_its_identity() -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "run", "uid": "j1", "controller": True}
    listed = {
        "metadata": {
            "name": "p", "namespace": "team", "uid": "u1", "labels": {"a": "b"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "ownerReferences": [{"kind": "Other", "name": "x", "uid": "o"}, ref],
        },
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "images": [{"names": ["x"]}]},
    }  # fmt: skip
    lean = inventory.lean(listed)
    assert "managedFields" not in lean["metadata"]
    assert "images" not in lean["status"]
    assert lean["metadata"]["labels"] == {"a": "b"}
    assert lean["spec"] == listed["spec"]
    assert inventory.identity({"apiVersion": "v1", "kind": "Pod", **lean}) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team", "uid": "u1", "ownerReferences": [ref]},
    }
