"""The live-cluster commands on the real control plane, as users run them (subprocesses), each
with the rights the shipped roles of ``manifests/components/observer`` grant and nothing else:

- ``preemptguard audit`` finds the pods created while the webhook was switched off (and the
  workloads it would refuse), not those it admitted, and writes policy reports that the API
  server stores as written (the CRDs' structural schemas prune any field they lack): OpenReports
  where the upstream CRDs are installed, one per object scoped to its owner, and PolicyReports
  when asked; with the GPU operators' upstream CRDs installed (1.37), it judges their kinds too,
  each mistake once (a RayCluster a RayService made, a Job a JobSet made, are judged through
  their maker);
- ``preemptguard drill`` rehearses a reclaim of a preemptible node while two
  ``preemptguard observe`` replicas watch: with no kubelet, the test decides when each pod
  "exits" (a delete with grace 0 at a chosen time, one of them after its grace ran out, one
  never, then the node removed) and checks the drill's report, the observers' metrics, the
  Events on each pod's owner and the log lines; the leader is stopped half-way and the other
  replica takes over without counting anything twice;
- ``preemptguard observe`` gives the pods of a node the provider reclaims the
  ``DisruptionTarget`` condition before they exit: a Job whose ``podFailurePolicy`` ignores
  that condition (1.37; the policy is 1.26+) survives three reclaims and completes, where
  without the observer the same Job fails at the first; a pod that exits 0 during a reclaim is
  reported on its owner.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import REPO, cluster, reclaim
from harness.cluster import CLASS_LABEL, PLACEMENT, PREEMPTIBLE, STANDARD, WORKLOAD
from harness.controlplane import ControlPlane
from harness.kube import Kube, KubeError, write_kubeconfig
from harness.manifests import NAMESPACE, Tree, kustomize
from harness.processes import free_port, wait_until
from harness.webhook import (
    WebhookServer,
    local_webhook_configurations,
    register,
    unregister,
)
from tests.e2e import upstream
from webhook.cluster.access import audited_kinds
from webhook.loading.policies import builtin_policy

pytestmark = pytest.mark.e2e

CRD = REPO / "tests" / "cluster" / "policyreport-crd.yaml"
REPORTS = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/{}/policyreports/preemptguard"
OPEN_REPORTS = "/apis/openreports.io/v1alpha1/namespaces/{}/reports"
OPEN_REPORTS_FIXTURES = REPO / "tests" / "fixtures" / "openreports"
TOLERATE_ALL = [{"key": CLASS_LABEL, "operator": "Exists"}]
HOSTNAME = "kubernetes.io/hostname"
OBSERVER_SA = "preemptguard-observer"
WITH_OBSERVER = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../self-managed
components:
  - ../../components/observer
"""
PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}

Obj = dict[str, Any]


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def _path(obj: Obj) -> str:
    api = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    ns = obj["metadata"].get("namespace")
    where = f"{api}/namespaces/{ns}" if ns else api
    return f"{where}/{PLURALS[obj['kind']]}/{obj['metadata']['name']}"


# --- who runs what -------------------------------------------------------------------------


@dataclass(frozen=True)
class Identities:
    """Kubeconfigs of service accounts bound by the shipped roles only."""

    auditor: Path
    rehearser: Path
    observer: Path
    planner: Path


@pytest.fixture(scope="session")
def component(manifests: Tree) -> list[Obj]:
    """The self-managed overlay with the observer component, rendered by kustomize."""
    overlay = manifests.root / "overlays" / "with-observer"
    overlay.mkdir(exist_ok=True)
    (overlay / "kustomization.yaml").write_text(WITH_OBSERVER)
    proc = subprocess.run(
        [kustomize(), "build", str(overlay)], capture_output=True, text=True, check=True
    )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _token(kube: Kube, namespace: str, account: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    return str(kube.create(path, request).body["status"]["token"])


@pytest.fixture(scope="session")
def identities(
    kube: Kube,
    control_plane: ControlPlane,
    component: list[Obj],
    tmp_path_factory: pytest.TempPathFactory,
) -> Identities:
    """The component's RBAC applied as shipped; an auditor bound to the audit roles and a
    rehearser bound to the drill role, as an administrator would bind people."""
    work = tmp_path_factory.mktemp(f"live-{control_plane.release.id}")
    shipped = [o for o in component if o["kind"] in PLURALS]
    for obj in sorted(shipped, key=lambda o: o["kind"] != "Namespace"):
        kube.apply(_path(obj), obj)
    people = {
        "auditor": ["preemptguard-audit", "preemptguard-audit-reports"],
        "rehearser": ["preemptguard-drill"],
        "planner": ["preemptguard-capacity"],
    }
    configs: dict[str, Path] = {}
    for person, roles in people.items():
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": person, "namespace": NAMESPACE}}  # fmt: skip
        kube.apply(_path(account), account)
        for role in roles:
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"e2e-{person}-{role}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": person, "namespace": NAMESPACE}],
            }
            kube.apply(_path(binding), binding)
        configs[person] = write_kubeconfig(work / f"{person}.kubeconfig", control_plane.server,
                                           control_plane.ca_file,
                                           _token(kube, NAMESPACE, person), person)  # fmt: skip
    observer = write_kubeconfig(work / "observer.kubeconfig", control_plane.server,
                                control_plane.ca_file, _token(kube, NAMESPACE, OBSERVER_SA),
                                OBSERVER_SA)  # fmt: skip
    return Identities(configs["auditor"], configs["rehearser"], observer, configs["planner"])


@pytest.fixture(scope="session")
def policy_report_crd(kube: Kube) -> None:
    crd = yaml.safe_load(CRD.read_text())
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    kube.apply(path, crd)

    def served() -> bool:
        conditions = kube.get(path).get("status", {}).get("conditions", [])
        established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        return established and kube.exists("/apis/wgpolicyk8s.io/v1alpha2/policyreports")

    wait_until(served, timeout=30, what="the PolicyReport CRD to be served")


@pytest.fixture(scope="session")
def openreports_crds(kube: Kube) -> None:
    """The OpenReports CRDs as upstream publishes them (``hack/upstream-crds.sh``): the same as
    the copies in tests/fixtures/openreports that the unit tests validate reports against."""
    try:
        crds = upstream.crds("openreports")
        upstream.install(kube, crds)
    except (upstream.UpstreamError, TimeoutError) as exc:
        pytest.fail(str(exc), pytrace=False)
    for crd in crds:
        copy = (
            OPEN_REPORTS_FIXTURES / f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"
        )
        assert yaml.safe_load(copy.read_text()) == crd, copy


def _preemptguard(
    kubeconfig: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip


# --- the audit -----------------------------------------------------------------------------


@contextmanager
def webhook_switched_off(
    kube: Kube, server: WebhookServer, base: list[Obj], namespace: str
) -> Iterator[None]:
    """No webhook configuration registered (as while no replica answers); back afterwards."""
    unregister(kube, local_webhook_configurations(base, server.url, server.ca_file.read_bytes()))

    def unplaced() -> bool:
        probe = cluster.pod("probe", workload="interruptible")
        body = kube.create(_pods(namespace), probe, dry_run=True).body
        return PLACEMENT not in body["metadata"].get("annotations", {})

    wait_until(unplaced, timeout=30, what="the API server to stop calling the webhook")
    # Nor the admission policies of an earlier test's install, which the API server's policy
    # cache may still hold a moment after their deletion.
    cluster.wait_admission_policies_gone(kube, namespace)
    try:
        yield
    finally:
        register(kube, server, base)


def _expected_notes(kube: Kube) -> list[str]:
    """What the audit notes about the default policy's kinds on this API server: the groups
    discovery does not list (those of CRDs not installed), in the policy's order. Kubernetes'
    own kinds are all served: 1.20's CronJobs at batch/v1beta1, found there."""
    discovered = {group["name"]: group for group in kube.get("/apis")["groups"]}
    kinds = audited_kinds(builtin_policy())
    groups = dict.fromkeys(k.group for k in kinds if k.group)
    missing = [g for g in groups if g not in discovered]
    prefix = "API groups not served by this cluster (their workload kinds are not audited): "
    notes = [prefix + ", ".join(missing)] if missing else []
    # A group that is served but lacks one of the kinds (an older CRD release): named per kind.
    for kind in kinds:
        if not kind.group or kind.group not in discovered or kind.cluster_scoped:
            continue
        group = discovered[kind.group]
        preferred = group["preferredVersion"]["version"]
        versions = [preferred] + [
            v["version"] for v in group["versions"] if v["version"] != preferred
        ]
        if not any(
            kind.plural in {r["name"] for r in kube.get(f"/apis/{kind.group}/{v}")["resources"]}
            for v in versions
        ):
            tried = ", ".join(f"{kind.group}/{v}" for v in versions)
            notes.append(
                f"{kind.name} is not served by this cluster (none of {tried} serves "
                f"{kind.plural}): not audited"
            )
    return notes


def test_audit_finds_what_got_in_while_the_webhook_was_off_and_reports_it(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    base_objects: list[Obj],
    identities: Identities,
    policy_report_crd: None,
) -> None:
    placed = cluster.unique("audit-placed")
    late = cluster.unique("audit-late")
    old_server = int(kube.get("/version")["minor"].rstrip("+")) < 21
    cluster.create_namespace(kube, placed)
    cluster.create_namespace(
        kube, late, annotations={"together.ai/default-workload": "interruptible"}
    )
    for name, workload in (("sweep", "interruptible"), ("api", "serving")):
        kube.create(_pods(placed), cluster.pod(name, workload=workload))
    with webhook_switched_off(kube, webhook, base_objects, late):
        kube.create(_pods(late), cluster.pod("sweep", workload="interruptible"))
        kube.create(_pods(late), cluster.pod("api", workload="serving", tolerations=TOLERATE_ALL,
                                             nodeSelector={HOSTNAME: "preemptible-1"}))  # fmt: skip
        kube.create(_pods(late), cluster.pod("eval", tolerations=TOLERATE_ALL,  # namespace default
                                             nodeSelector={CLASS_LABEL: PREEMPTIBLE}))  # fmt: skip
        template = cluster.pod_template({"app": "web"}, workload="serving",
                                        nodeSelector={CLASS_LABEL: PREEMPTIBLE})  # fmt: skip
        web = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                        "template": template}}  # fmt: skip
        kube.create(f"/apis/apps/v1/namespaces/{late}/deployments", web)
        # A CronJob, as each release serves it (1.20: batch/v1beta1 only), suspended.
        batch = "batch/v1beta1" if old_server else "batch/v1"
        nightly = {"apiVersion": batch, "kind": "CronJob", "metadata": {"name": "nightly"},
                   "spec": {"schedule": "0 0 1 1 *", "suspend": True, "jobTemplate": {"spec": {
                       "template": {**template, "spec": {**template["spec"],
                                                         "restartPolicy": "Never"}}}}}}  # fmt: skip
        kube.create(f"/apis/{batch}/namespaces/{late}/cronjobs", nightly)
    # Admission never sees a DaemonSet (nor, from the DaemonSet controller, its pods): a
    # serving one pinned to preemptible nodes gets in with the webhook on. Its selector matches
    # no node here, so that the DaemonSet controller makes no pod.
    proxy_template = cluster.pod_template({"app": "proxy"}, workload="serving", nodeSelector={
        CLASS_LABEL: PREEMPTIBLE, "preemptguard.test/no-such-node": "true"})  # fmt: skip
    proxy = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "proxy"},
             "spec": {"selector": {"matchLabels": {"app": "proxy"}},
                      "template": proxy_template}}  # fmt: skip
    kube.create(f"/apis/apps/v1/namespaces/{late}/daemonsets", proxy)
    for ns, name in (
        (placed, "sweep"),
        (placed, "api"),
        (late, "sweep"),
        (late, "api"),
        (late, "eval"),
    ):
        cluster.wait_scheduled(kube, ns, name)
    assert nodes[kube.get(f"{_pods(late)}/sweep")["spec"]["nodeName"]] == STANDARD

    started = time.monotonic()
    out = _preemptguard(identities.auditor, "audit", "-n", placed, "-n", late, "-o", "json",
                        "--report", "--report-api", "wgpolicyk8s")  # fmt: skip
    took = time.monotonic() - started
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    found = {(r["namespace"], r["kind"], r["name"]): sorted(p["code"] for p in r["problems"])
             for r in doc["results"]}  # fmt: skip
    assert found == {
        (late, "Pod", "sweep"): ["interruptible-on-standard", "unplaced"],
        (late, "Pod", "api"): ["critical-on-preemptible", "unplaced"],
        (late, "Pod", "eval"): ["unplaced"],
        (late, "Deployment", "web"): ["refused"],
        (late, "CronJob", "nightly"): ["refused"],
        (late, "DaemonSet", "proxy"): ["left-alone-on-preemptible"],
    }
    api = next(r for r in doc["results"] if r["name"] == "api")
    assert (api["node"], api["nodeClass"], api["phase"], api["class"]) == (
        "preemptible-1", "preemptible", "Pending", "serving")  # fmt: skip
    assert doc["reports"] == sorted([f"{placed}/preemptguard", f"{late}/preemptguard"])
    assert doc["reportApi"] == "wgpolicyk8s.io/v1alpha2"
    # Read at the version the release serves: batch/v1beta1 on 1.20, found by discovery.
    nightly_found = next(r for r in doc["results"] if r["name"] == "nightly")
    assert nightly_found["reasons"], nightly_found
    assert doc["notes"] == _expected_notes(kube)
    assert took < 30

    late_report = kube.get(REPORTS.format(late))
    assert late_report["summary"] == {"pass": 0, "fail": 8, "warn": 0, "error": 0, "skip": 0}
    # Stored as written: the CRD's schema would have pruned any field it does not define.
    result = late_report["results"][0]
    assert set(result) == {"policy", "rule", "category", "result", "severity", "scored",
                           "source", "message", "resources", "properties", "timestamp"}  # fmt: skip
    named = {(r["resources"][0]["name"], r["rule"]) for r in late_report["results"]}
    assert ("api", "critical-on-preemptible") in named
    assert ("web", "refused") in named
    placed_report = kube.get(REPORTS.format(placed))
    assert placed_report["summary"]["pass"] == 2
    assert placed_report["results"] == []

    text = _preemptguard(identities.auditor, "audit", "-n", late)
    assert text.returncode == 1
    assert (
        f"Pod {late}/api  class=serving (annotation)  node=preemptible-1 (preemptible)  Pending"
        in text.stdout
    )


def _reports_by_scope(kube: Kube, namespace: str) -> dict[str, Obj]:
    found = kube.get(OPEN_REPORTS.format(namespace))["items"]
    return {f"{r['scope']['kind']}/{r['scope']['name']}": r for r in found}


def test_audit_writes_openreports_where_served_one_per_owner_and_policyreports_when_asked(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    base_objects: list[Obj],
    identities: Identities,
    policy_report_crd: None,
    openreports_crds: None,
) -> None:
    """With the OpenReports CRDs installed as upstream publishes them, ``audit --report`` (the
    auditor: the shipped roles only) writes Reports: one per object with something to list,
    scoped to its top-level owner (a Deployment's pod in the Deployment's) and owned by it. The
    API server validates them against the CRDs' schemas and stores them as sent: a second run
    finds nothing to write. ``--report-api wgpolicyk8s`` writes a PolicyReport and deletes the
    Reports; back to OpenReports, the PolicyReport is emptied; the garbage collector deletes a
    Report with its object."""
    ns = cluster.unique("audit-openreports")
    cluster.create_namespace(kube, ns)
    kube.create(_pods(ns), cluster.pod("ok", workload="interruptible"))
    template = cluster.pod_template({"app": "batch"}, workload="interruptible")
    batch = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "batch"},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "batch"}},
                      "template": template}}  # fmt: skip
    with webhook_switched_off(kube, webhook, base_objects, ns):
        kube.create(_pods(ns), cluster.pod("api", workload="serving", tolerations=TOLERATE_ALL,
                                           nodeSelector={HOSTNAME: "preemptible-1"}))  # fmt: skip
        kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", batch)
        made = wait_until(lambda: cluster.pods_with_labels(kube, ns, "app=batch") or None,
                          timeout=30, what="the Deployment's pod")  # fmt: skip
    worker = made[0]["metadata"]["name"]
    for name in ("ok", "api", worker):
        cluster.wait_scheduled(kube, ns, name)

    first = _preemptguard(identities.auditor, "audit", "-n", ns, "--report", "--report-passing",
                          "-o", "json")  # fmt: skip
    assert first.returncode == 1, first.stderr
    doc = json.loads(first.stdout)
    assert doc["reportApi"] == "openreports.io/v1alpha1"
    stored = _reports_by_scope(kube, ns)
    assert set(stored) == {"Deployment/batch", "Pod/api", "Pod/ok"}
    assert doc["reports"] == sorted(f"{ns}/{r['metadata']['name']}" for r in stored.values())
    uid = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/batch")["metadata"]["uid"]
    report = stored["Deployment/batch"]
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "batch", "uid": uid}
    assert report["scope"] == {**owner, "namespace": ns}
    assert report["metadata"]["ownerReferences"] == [owner]
    assert report["metadata"]["name"] == f"preemptguard-{uid}"
    assert report["summary"] == {"pass": 1, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    failed = {r["rule"]: r for r in report["results"] if r["result"] == "fail"}
    assert set(failed) == {"unplaced", "interruptible-on-standard"}
    assert set(failed["unplaced"]) == {"policy", "rule", "category", "result", "severity",
                                       "scored", "source", "message", "resources", "properties",
                                       "timestamp"}  # fmt: skip
    assert [(r["kind"], r["name"]) for r in failed["unplaced"]["resources"]] == [("Pod", worker)]
    (passed,) = [r for r in report["results"] if r["result"] == "pass"]
    assert "resources" not in passed  # the Deployment itself: the report's scope
    assert stored["Pod/ok"]["summary"]["pass"] == 1
    api_rules = {r["rule"] for r in stored["Pod/api"]["results"]}
    assert api_rules == {"unplaced", "critical-on-preemptible"}

    again = _preemptguard(identities.auditor, "audit", "-n", ns, "--report", "--report-passing")
    assert again.returncode == 1, again.stderr
    unchanged = f"Reports (openreports.io/v1alpha1): 3 in 1 namespace ({ns}); 0 written, 3 up"
    assert f"{unchanged} to date, 0 retired" in again.stdout

    forced = _preemptguard(identities.auditor, "audit", "-n", ns, "--report", "--report-api",
                           "wgpolicyk8s")  # fmt: skip
    assert forced.returncode == 1, forced.stderr
    switched = f"PolicyReports (wgpolicyk8s.io/v1alpha2): 1 in 1 namespace ({ns}); 1 written"
    assert f"{switched}, 0 up to date, 3 retired" in forced.stdout
    assert _reports_by_scope(kube, ns) == {}
    policy_report = kube.get(REPORTS.format(ns))
    assert policy_report["summary"] == {"pass": 2, "fail": 4, "warn": 0, "error": 0, "skip": 0}

    back = _preemptguard(identities.auditor, "audit", "-n", ns, "--report")
    assert back.returncode == 1, back.stderr
    assert "; 2 written, 0 up to date, 1 retired" in back.stdout
    assert kube.get(REPORTS.format(ns))["results"] == []
    name = _reports_by_scope(kube, ns)["Deployment/batch"]["metadata"]["name"]
    kube.delete(f"/apis/apps/v1/namespaces/{ns}/deployments/batch")
    wait_until(lambda: not kube.exists(f"{OPEN_REPORTS.format(ns)}/{name}"), timeout=120,
               what="the garbage collector to delete the Deployment's Report")  # fmt: skip


@pytest.mark.releases("1.37", reason="the upstream CRDs need 1.25+ (see test_workload_kinds)")
def test_audit_judges_the_operators_kinds_and_what_they_made_through_them(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    base_objects: list[Obj],
    identities: Identities,
) -> None:
    """With the upstream CRDs installed, the auditor (the shipped audit role, nothing more)
    lists RayServices, RayClusters, RayJobs, JobSets and Jobs: a RayService and a JobSet
    created while the webhook was off are refused, the RayCluster and the Job made from them
    (controller references, as KubeRay and JobSet set them) are not judged again, and an
    admitted RayJob is clean."""
    try:
        upstream.installed(kube)
    except (upstream.UpstreamError, TimeoutError) as exc:
        pytest.fail(str(exc), pytrace=False)
    ns = cluster.unique("audit-kinds")
    cluster.create_namespace(kube, ns)
    samples = REPO / "tests" / "fixtures" / "upstream"

    def sample(relative: str, kind: str) -> Obj:
        docs = yaml.safe_load_all((samples / relative).read_text())
        return next(d for d in docs if isinstance(d, dict) and d.get("kind") == kind)

    def owner(obj: Obj) -> list[Obj]:
        meta = obj["metadata"]
        return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
                 "uid": meta["uid"], "controller": True}]  # fmt: skip

    ray = f"/apis/ray.io/v1/namespaces/{ns}"
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}"
    with webhook_switched_off(kube, webhook, base_objects, ns):
        rayservice = sample("kuberay/modified/rayservice-workers-on-preemptible.yaml", "RayService")
        made = kube.create(f"{ray}/rayservices", rayservice).body
        raycluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                      "metadata": {"name": "rayservice-sample-raycluster-x",
                                   "ownerReferences": owner(made)},
                      "spec": rayservice["spec"]["rayClusterConfig"]}  # fmt: skip
        kube.create(f"{ray}/rayclusters", raycluster)
        jobset = sample("jobset/paralleljobs.yaml", "JobSet")
        driver = jobset["spec"]["replicatedJobs"][1]["template"]
        driver["spec"]["template"]["metadata"] = {"annotations": {WORKLOAD: "serving"}}
        driver["spec"]["template"]["spec"]["nodeSelector"] = {CLASS_LABEL: PREEMPTIBLE}
        driver["spec"]["template"]["spec"]["restartPolicy"] = "Never"
        made = kube.create(f"{jobsets}/jobsets", jobset).body
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "paralleljobs-driver-0", "ownerReferences": owner(made)},
               "spec": {**driver["spec"], "suspend": True}}  # fmt: skip
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    rayjob = sample("kuberay/ray-job.sample.yaml", "RayJob")
    workers = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    workers.setdefault("metadata", {})["annotations"] = {WORKLOAD: "interruptible"}
    kube.create(f"{ray}/rayjobs", rayjob)  # through the webhook: admitted

    out = _preemptguard(identities.auditor, "audit", "-n", ns, "-o", "json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    found = {(r["kind"], r["name"]): sorted(p["code"] for p in r["problems"])
             for r in doc["results"]}  # fmt: skip
    assert found == {("RayService", "rayservice-sample"): ["refused"],
                     ("JobSet", "paralleljobs"): ["refused"]}  # fmt: skip
    rayservice_found = next(r for r in doc["results"] if r["kind"] == "RayService")
    assert any("spec.rayClusterConfig.workerGroupSpecs[0].template: class serving" in reason
               for reason in rayservice_found["reasons"])  # fmt: skip
    # The RayService, the JobSet and the RayJob: the RayCluster and the Job are their makers'.
    assert doc["summary"]["workloads"] == 3
    assert doc["notes"] == _expected_notes(kube)
    assert "ray.io" not in " ".join(doc["notes"])


def test_the_shipped_roles_grant_the_live_commands_nothing_more(
    kube: Kube, identities: Identities
) -> None:
    """What each part may not do (the runs here show what it may)."""

    def can(account: str, verb: str, resource: str, group: str = "") -> bool:
        name, _, sub = resource.partition("/")
        attributes = {"verb": verb, "resource": name, "group": group, "subresource": sub}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{NAMESPACE}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                "resourceAttributes": attributes,
            },
        }
        answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review).body
        return bool(answer["status"].get("allowed"))

    assert can("auditor", "list", "pods")
    assert not can("auditor", "delete", "pods")
    assert can("auditor", "delete", "reports", "openreports.io")
    assert not can("auditor", "delete", "policyreports", "wgpolicyk8s.io")  # emptied instead
    assert not can("auditor", "get", "secrets")
    assert not can("auditor", "watch", "pods")
    assert can(OBSERVER_SA, "watch", "pods")
    assert not can(OBSERVER_SA, "delete", "pods")
    assert not can(OBSERVER_SA, "patch", "nodes")
    assert not can(OBSERVER_SA, "update", "events")
    assert can(OBSERVER_SA, "patch", "pods/status")  # DisruptionTarget, and nothing else
    assert not can(OBSERVER_SA, "patch", "pods")
    assert not can(OBSERVER_SA, "update", "pods/status")
    assert can("rehearser", "patch", "pods/status")
    assert not can("rehearser", "patch", "pods")
    assert can("rehearser", "delete", "pods")
    assert not can("rehearser", "delete", "nodes")
    assert not can("rehearser", "create", "pods/eviction")
    assert not can("rehearser", "get", "secrets")
    assert can("planner", "list", "events")
    assert not can("planner", "watch", "pods")
    assert not can("planner", "create", "events")
    assert not can("planner", "list", "deployments", "apps")


def test_capacity_runs_with_its_role_alone(kube: Kube, identities: Identities) -> None:
    """The GPUs of every node, by class, as the API server lists them, counted by a planner
    bound to the shipped capacity role only."""
    expected = {PREEMPTIBLE: 0, STANDARD: 0}
    for node in kube.get("/api/v1/nodes")["items"]:
        labels = node["metadata"].get("labels", {})
        node_class = PREEMPTIBLE if labels.get(CLASS_LABEL) == PREEMPTIBLE else STANDARD
        allocatable = node.get("status", {}).get("allocatable", {})
        expected[node_class] += int(allocatable.get("nvidia.com/gpu", "0"))
    proc = _preemptguard(identities.planner, "capacity", "-o", "json", "-q")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {nc: figures["gpus"] for nc, figures in doc["nodes"].items()} == expected
    assert doc["suggestion"]["currentPreemptibleGpus"] == expected[PREEMPTIBLE]
    text = _preemptguard(identities.planner, "capacity")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[-1].startswith("Suggested preemptible target: ")


def test_the_observer_deployment_and_service_pass_a_server_side_dry_run(
    kube: Kube, component: list[Obj], identities: Identities
) -> None:
    """The rest of the component (its RBAC is applied for real by ``identities``)."""
    for obj in component:
        if obj["metadata"]["name"] != OBSERVER_SA or obj["kind"] not in ("Deployment", "Service"):
            continue
        group = "apps/v1" if obj["kind"] == "Deployment" else "v1"
        api = "/api/v1" if group == "v1" else f"/apis/{group}"
        plural = obj["kind"].lower() + "s"
        path = f"{api}/namespaces/{NAMESPACE}/{plural}/{obj['metadata']['name']}"
        stored = kube.apply(path, obj, dry_run=True)
        assert stored["metadata"]["name"] == OBSERVER_SA


# --- the drill and the observer --------------------------------------------------------------


@dataclass
class ObserverProcess:
    identity: str
    proc: subprocess.Popen[bytes]
    metrics_url: str
    log: Path

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = requests.get(self.metrics_url, timeout=5).text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)

    def displaced(self) -> float:
        return sum(v for (name, _), v in self.metrics().items()
                   if name == "preemptguard_displaced_pods_total")  # fmt: skip

    def leading(self) -> bool:
        return self.value("preemptguard_observer_leader") == 1

    def lines(self, event: str) -> list[Obj]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == event:
                    out.append(record)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def observers(identities: Identities, tmp_path: Path) -> Iterator[list[ObserverProcess]]:
    """Two `preemptguard observe` replicas, as the component's Deployment runs them."""
    started = []
    env = {**os.environ, "KUBECONFIG": str(identities.observer), "PYTHONUNBUFFERED": "1"}
    for identity in ("observer-a", "observer-b"):
        port = free_port()
        log = tmp_path / f"{identity}.log"
        argv = [sys.executable, "-m", "webhook", "observe", "--metrics-host", "127.0.0.1",
                "--metrics-port", str(port), "--lease-namespace", NAMESPACE,
                "--identity", identity]  # fmt: skip
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        started.append(ObserverProcess(identity, proc, f"http://127.0.0.1:{port}/metrics", log))
        if identity == "observer-a":
            # a first, so that it is the one to lead
            wait_until(lambda: started[0].leading(), timeout=60, what="observer-a to lead")
    try:
        yield started
    finally:
        for observer in started:
            observer.stop()


def _deleting(kube: Kube, namespace: str, names: dict[str, str]) -> bool:
    pods = kube.get(_pods(namespace))["items"]
    by_name = {p["metadata"]["name"]: p for p in pods}
    return all(
        "deletionTimestamp" in by_name.get(n, {}).get("metadata", {}) for n in names.values()
    )


def _outcome_events(kube: Kube, namespace: str) -> dict[str, Obj]:
    events = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return {
        e["involvedObject"]["name"]: e
        for e in events
        if e["reason"] in ("ReclaimExitedInTime", "ReclaimGraceExpired", "ReclaimLostWithNode")
    }


def _seconds(message: str) -> int:
    match = re.search(r"(?:exited|gone|node) (\d+) s after SIGTERM", message)
    assert match is not None, message
    return int(match.group(1))


def test_a_drill_as_two_observers_watch_it(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    identities: Identities,
    observers: list[ObserverProcess],
    namespace: str,
) -> None:
    node = cluster.unique("preemptible-drill")
    cluster.create_node(kube, node, PREEMPTIBLE)
    on_node = {HOSTNAME: node}
    checkpoint = {"together.ai/checkpoint-seconds": "5"}  # the webhook makes its grace 35 s
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
           "spec": {"backoffLimit": 0, "template": cluster.pod_template(
               {"app": "train"}, workload="interruptible", annotations=checkpoint,
               nodeSelector=on_node, restartPolicy="Never")}}  # fmt: skip
    web = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": cluster.pod_template({"app": "web"}, workload="flexible",
                                                     nodeSelector=on_node)}}  # fmt: skip
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", web)
    kube.create(_pods(namespace), cluster.pod("eval", workload="flexible", nodeSelector=on_node,
                                              terminationGracePeriodSeconds=3))  # fmt: skip
    kube.create(_pods(namespace), cluster.pod("stuck", workload="interruptible",
                                              nodeSelector=on_node,
                                              terminationGracePeriodSeconds=60))  # fmt: skip
    train = cluster.wait_pods_scheduled(kube, namespace, "app=train", 1)[0]["metadata"]["name"]
    webpod = cluster.wait_pods_scheduled(kube, namespace, "app=web", 1)[0]["metadata"]["name"]
    for name in ("eval", "stuck"):
        assert cluster.wait_scheduled(kube, namespace, name)["spec"]["nodeName"] == node
    assert kube.get(f"{_pods(namespace)}/{train}")["spec"]["terminationGracePeriodSeconds"] == 35
    pods = {"train": train, "web": webpod, "eval": "eval", "stuck": "stuck"}
    a, b = observers
    wait_until(lambda: b.value("preemptguard_observer_leader") == 0 and b.metrics(),
               timeout=30, what="observer-b to follow")  # fmt: skip

    plan = _preemptguard(identities.rehearser, "drill", node, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "Critical pods on the node: none" in plan.stdout

    env = {**os.environ, "KUBECONFIG": str(identities.rehearser), "PYTHONUNBUFFERED": "1"}
    drill = subprocess.Popen(
        [sys.executable, "-m", "webhook", "drill", node, "--yes", "--wait", "20", "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        wait_until(lambda: _deleting(kube, namespace, pods), timeout=30, what="the drill's deletes")
        sigterm = time.monotonic()

        exited: dict[str, float] = {}  # when each pod went, in seconds after SIGTERM

        def exit_at(seconds: float, name: str) -> None:
            time.sleep(max(sigterm + seconds - time.monotonic(), 0))
            if name == train:
                # A Job with a podFailurePolicy (the webhook gives it one) keeps its pod's
                # finalizer until the pod is terminal: the phase a kubelet reports on exit.
                path = f"{_pods(namespace)}/{name}/status"
                kube.merge_patch(path, {"status": {"phase": "Failed"}})
            cluster.delete_pods(kube, namespace, [name])
            exited[name] = time.monotonic() - sigterm

        exit_at(2, train)
        wait_until(lambda: a.displaced() == 1, timeout=15, what="observer-a to record train")
        # The leader goes away (a rollout, a drained node): the other takes over.
        a_metrics = a.metrics()
        a.stop()
        wait_until(b.leading, timeout=15, what="observer-b to lead")
        exit_at(6, webpod)
        exit_at(9, "eval")  # 6 s after its 3 s grace ran out
        out, err = drill.communicate(timeout=60)
    finally:
        if drill.poll() is None:
            drill.kill()
    assert drill.returncode == 1, err.decode()
    report = json.loads(out)
    results = {r["name"]: r for r in report["results"]}
    assert {n: r["outcome"] for n, r in results.items()} == {
        train: "exited-in-time", webpod: "exited-in-time", "eval": "grace-expired",
        "stuck": "still-running"}  # fmt: skip
    for name in (train, webpod, "eval"):
        assert abs(results[name]["exitedAfterSeconds"] - exited[name]) < 1.5, (results, exited)
    assert report["criticalPods"] == []
    assert report["uncordoned"] is False
    assert kube.get(f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True
    assert "drill: [" in err.decode()  # the progress bar

    # The drill gave every pod it deleted DisruptionTarget first (the observer did too).
    conditions = kube.get(f"{_pods(namespace)}/stuck")["status"]["conditions"]
    (marked,) = [c for c in conditions if c["type"] == "DisruptionTarget"]
    assert (marked["status"], marked["reason"]) == ("True", "PreemptibleNodeReclaimed")
    assert all(r["disruptionTarget"] for r in report["results"])

    # T+5:00 comes early: the node is removed with "stuck" still inside its 60 s grace.
    kube.delete(f"/api/v1/nodes/{node}", grace_seconds=None)
    wait_until(lambda: b.displaced() == 3, timeout=30, what="observer-b to record the rest")

    counter = "preemptguard_displaced_pods_total"
    # The drill writes its Event just before its first delete, and the observer watches Events
    # and pods apart: whichever reaches it first opens the reclaim (its trigger), counted once.
    reclaims = "preemptguard_reclaims_total"
    assert sum(v for (name, _), v in a_metrics.items() if name == reclaims) == 1
    assert (
        a_metrics[(counter, (("outcome", "exited-in-time"), ("workload_class", "interruptible")))]
        == 1
    )
    for trigger in ("event", "cordon"):
        assert b.value(reclaims, trigger=trigger) == 0  # counted by a
    assert b.value(counter, workload_class="flexible", outcome="exited-in-time") == 1
    assert b.value(counter, workload_class="flexible", outcome="grace-expired") == 1
    assert b.value(counter, workload_class="interruptible", outcome="lost-with-node") == 1
    assert b.value(counter, workload_class="interruptible", outcome="exited-in-time") == 0
    assert b.value("preemptguard_displaced_pod_exit_seconds_count", workload_class="flexible") == 2

    events = _outcome_events(kube, namespace)
    assert set(events) == {"train", "web", "eval", "stuck"}  # the Job, the Deployment, the pods
    assert events["train"]["involvedObject"]["kind"] == "Job"
    assert events["web"]["involvedObject"]["kind"] == "Deployment"
    assert events["train"]["reason"] == "ReclaimExitedInTime"
    assert "checkpoint budget 35 s (declared checkpoint 5 s)" in events["train"]["message"]
    assert events["eval"]["reason"] == "ReclaimGraceExpired"
    assert events["stuck"]["reason"] == "ReclaimLostWithNode"
    for owner, name in (("train", train), ("web", webpod), ("eval", "eval")):
        assert abs(_seconds(events[owner]["message"]) - exited[name]) < 1.5, (events, exited)
    assert exited["eval"] > 3 + 1  # past its grace: what makes it grace-expired
    assert all(e["count"] == 1 for e in events.values())
    node_events = [e for e in kube.get("/api/v1/namespaces/default/events")["items"]
                   if e["involvedObject"]["name"] == node]  # fmt: skip
    assert sorted(e["reason"] for e in node_events) == ["ReclaimObserved", "TogetherPreempted"]

    lines = {line["pod"]: line for line in a.lines("displaced_pod") + b.lines("displaced_pod")}
    assert set(lines) == set(pods.values())
    assert lines[train]["grace_seconds"] == 35
    assert lines[train]["checkpoint_seconds"] == 5
    assert lines["stuck"]["outcome"] == "lost-with-node"
    assert (a.lines("reclaim")[0]["node"], b.lines("reclaim")) == (node, [])

    for kind, name in (
        ("batch/v1/namespaces/{}/jobs", "train"),
        ("apps/v1/namespaces/{}/deployments", "web"),
    ):
        kube.call("DELETE", f"/apis/{kind.format(namespace)}/{name}",
                  {"propagationPolicy": "Background"})  # fmt: skip
    leftovers = [p["metadata"]["name"] for p in kube.get(_pods(namespace))["items"]]
    cluster.delete_pods(kube, namespace, leftovers)


def test_drill_refuses_a_standard_node(
    kube: Kube, nodes: dict[str, str], identities: Identities
) -> None:
    out = _preemptguard(identities.rehearser, "drill", "standard-1", "--yes")
    assert out.returncode == 2
    assert "error: node standard-1 is a standard node" in out.stderr
    assert not kube.get("/api/v1/nodes/standard-1")["spec"].get("unschedulable")
    try:
        kube.get("/api/v1/nodes/standard-1")
    except KubeError:  # pragma: no cover - the node is one of the session's
        pytest.fail("standard-1 is gone")


# --- DisruptionTarget: what a Job's podFailurePolicy needs to see ----------------------------

IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore",
                                 "onPodConditions": [{"type": "DisruptionTarget"}]}]}  # fmt: skip


def _job(name: str, group: str) -> Obj:
    """``backoffLimit: 0``: the first failure that counts fails it; reclaims do not count."""
    template = cluster.pod_template({"app": name}, nodeSelector={reclaim.RECLAIM_GROUP: group},
                                    tolerations=TOLERATE_ALL, restartPolicy="Never")  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "podFailurePolicy": IGNORE_DISRUPTIONS,
                     "podReplacementPolicy": "Failed", "template": template}}  # fmt: skip


def _job_finished(kube: Kube, namespace: str, name: str) -> str | None:
    """``Complete`` or ``Failed`` once the Job is."""
    job = kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    for condition in job.get("status", {}).get("conditions", []):
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return str(condition["type"])
    return None


def _clean_up(kube: Kube, namespace: str, job: str, nodes: list[str]) -> None:
    kube.call("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}",
              {"propagationPolicy": "Background"})  # fmt: skip
    leftovers = [p["metadata"]["name"] for p in kube.get(_pods(namespace))["items"]]
    cluster.delete_pods(kube, namespace, leftovers)
    for node in nodes:
        kube.delete(f"/api/v1/nodes/{node}")


@pytest.mark.releases("1.37", reason="podFailurePolicy is served from Kubernetes 1.26")
def test_without_the_observer_a_reclaim_fails_a_job_that_ignores_disruptions(
    kube: Kube, nodes: dict[str, str], namespace: str
) -> None:
    group = cluster.unique("unobserved")
    node = reclaim.group_node(kube, group)
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", _job("train", group))
    name = reclaim.running_pod(kube, namespace, "app=train", node)
    reclaim.provider_reclaims(kube, node)
    reclaim.kubelet_ends(kube, namespace, name, "Failed")
    finished = wait_until(lambda: _job_finished(kube, namespace, "train"), timeout=60,
                          what="the Job to finish")  # fmt: skip
    assert finished == "Failed"
    assert reclaim.disruption(kube, namespace, name) is None  # the provider does not set it
    _clean_up(kube, namespace, "train", [node])


@pytest.mark.releases("1.37", reason="podFailurePolicy is served from Kubernetes 1.26")
def test_a_job_that_ignores_disruptions_survives_reclaims_the_observer_marks(
    kube: Kube, nodes: dict[str, str], observers: list[ObserverProcess], namespace: str
) -> None:
    group = cluster.unique("observed")
    node = reclaim.group_node(kube, group)
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", _job("train", group))
    # Three pods killed by their reclaim; the fourth finishes its work on SIGTERM.
    reclaimed, node = reclaim.reclaim_each_marked_pod(kube, namespace, "app=train", group,
                                                      node, reclaims=3)  # fmt: skip
    finished = wait_until(lambda: _job_finished(kube, namespace, "train"), timeout=60,
                          what="the Job to finish")  # fmt: skip
    assert finished == "Complete"

    pods = {
        p["metadata"]["name"]: p for p in cluster.pods_with_labels(kube, namespace, "app=train")
    }
    assert set(pods) == set(reclaimed)  # no more pods than reclaims
    phases = sorted(p["status"]["phase"] for p in pods.values())
    assert phases == ["Failed", "Failed", "Failed", "Succeeded"]
    for name, on in reclaimed.items():
        condition = reclaim.disruption(kube, namespace, name)
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("True", "PreemptibleNodeReclaimed")
        assert f"preemptible node {on} is being reclaimed" in condition["message"]

    a, b = observers
    wait_until(lambda: a.value("preemptguard_reclaim_pods_completed_total",
                               workload_class="unclassified") == 1,
               timeout=30, what="the completed pod counted")  # fmt: skip
    assert a.value("preemptguard_reclaim_pods_marked_total") == 4
    assert b.value("preemptguard_reclaim_pods_marked_total") == 0  # only the leader writes
    events = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    (completed,) = [e for e in events if e["reason"] == "CompletedDuringReclaim"]
    assert (completed["involvedObject"]["kind"], completed["involvedObject"]["name"]) == (
        "Job", "train")  # fmt: skip
    assert [line["pod"] for line in a.lines("completed_during_reclaim")] == [
        n for n, p in pods.items() if p["status"]["phase"] == "Succeeded"
    ]
    _clean_up(kube, namespace, "train", [*reclaimed.values(), node])


def test_the_observer_marks_only_the_unfinished_pods_of_the_reclaimed_node(
    kube: Kube, nodes: dict[str, str], observers: list[ObserverProcess], namespace: str
) -> None:
    group = cluster.unique("marked")
    node, other = reclaim.group_node(kube, group), reclaim.group_node(kube, group)
    for name, on in (("train", node), ("done", node), ("elsewhere", other)):
        kube.create(_pods(namespace), cluster.pod(name, nodeSelector={HOSTNAME: on},
                                                  tolerations=TOLERATE_ALL))  # fmt: skip
        cluster.wait_scheduled(kube, namespace, name)
    ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    kube.call("PATCH", f"{_pods(namespace)}/train/status", {"status": {"conditions": [ready]}},
              content_type="application/strategic-merge-patch+json")  # fmt: skip
    before = kube.get(f"{_pods(namespace)}/train")["status"]["conditions"]
    assert "Ready" in {c["type"] for c in before}
    reclaim.kubelet_ends(kube, namespace, "done", "Succeeded")
    time.sleep(2.5)  # finished well before the reclaim (times are whole seconds)
    reclaim.provider_reclaims(kube, node)
    condition = wait_until(lambda: reclaim.disruption(kube, namespace, "train"), timeout=30,
                           what="the observer to mark train")  # fmt: skip
    assert (condition["status"], condition["reason"]) == ("True", "PreemptibleNodeReclaimed")
    assert condition["message"].startswith(f"preemptible node {node} is being reclaimed")
    stored = kube.get(f"{_pods(namespace)}/train")["status"]["conditions"]
    assert [c for c in stored if c["type"] != "DisruptionTarget"] == before  # the others kept
    a, _ = observers
    reclaim.kubelet_ends(kube, namespace, "train", "Succeeded")
    wait_until(lambda: a.value("preemptguard_reclaim_pods_completed_total",
                               workload_class="unclassified") == 1,
               timeout=30, what="train counted as completed")  # fmt: skip
    assert reclaim.disruption(kube, namespace, "done") is None  # finished before the reclaim
    assert reclaim.disruption(kube, namespace, "elsewhere") is None  # another node
    # The uid the observer's patch carries is a precondition: another pod is not marked.
    wrong = {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"},
             "status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}}  # fmt: skip
    with pytest.raises(KubeError) as refused:
        kube.call("PATCH", f"{_pods(namespace)}/elsewhere/status", wrong,
                  content_type="application/strategic-merge-patch+json")  # fmt: skip
    assert refused.value.status in (409, 422), refused.value
    assert reclaim.disruption(kube, namespace, "elsewhere") is None
    assert a.value("preemptguard_reclaim_pods_marked_total") == 1
    (line,) = a.lines("completed_during_reclaim")
    assert (line["pod"], line["owner"]) == ("train", "Pod/train")
    cluster.delete_pods(kube, namespace, ["train", "done", "elsewhere"])
    for name in (node, other):
        kube.delete(f"/api/v1/nodes/{name}")
