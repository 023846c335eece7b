"""Placement through the real API server, the real ``preemptguard serve`` and the shipped webhook
configurations: what is stored, what the scheduler does with it, and what is refused.

Namespaces here carry ``kubernetes.io/metadata.name`` because the fixtures set it: 1.21+ (the
main release, 1.37) sets it on every namespace, the 1.20 API server does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness import cluster
from harness.cluster import CLASS_LABEL, PLACEMENT, PREEMPTIBLE, STANDARD, WORKLOAD
from harness.kube import Kube, KubeError
from harness.processes import wait_until
from harness.webhook import WebhookServer

pytestmark = pytest.mark.e2e

PREEMPTIBLE_TOLERATION = {
    "key": CLASS_LABEL,
    "operator": "Equal",
    "value": PREEMPTIBLE,
    "effect": "NoSchedule",
}
IN_PREEMPTIBLE = {"key": CLASS_LABEL, "operator": "In", "values": [PREEMPTIBLE]}
NOT_IN_PREEMPTIBLE = {"key": CLASS_LABEL, "operator": "NotIn", "values": [PREEMPTIBLE]}


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def _deployments(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments"


def _required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {})
    return list(required.get("nodeSelectorTerms", []))


def _deployment(name: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def _assert_refused(exc: KubeError, hook: str, *fragments: str) -> None:
    assert cluster.refused(exc), exc.message
    assert f'admission webhook "{hook}" denied the request' in exc.message
    for fragment in fragments:
        assert fragment in exc.message


@pytest.fixture
def preemptible_cordoned(kube: Kube, nodes: dict[str, str]) -> Iterator[list[str]]:
    """Every preemptible node cordoned, as the provider does at T+0 of a reclaim."""
    names = [n for n, c in nodes.items() if c == PREEMPTIBLE]
    for name in names:
        cluster.cordon(kube, name)
    try:
        yield names
    finally:
        for name in names:
            cluster.cordon(kube, name, cordoned=False)


def test_interruptible_pod_lands_on_preemptible_node_with_toleration_affinity_and_clamped_grace(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    manifest = cluster.pod(
        "sweep", workload="interruptible", gpus=1, terminationGracePeriodSeconds=900
    )
    created = kube.create(_pods(namespace), manifest)
    assert any("lowered from 900 to 300" in w for w in created.warnings), created.warnings

    stored = cluster.wait_scheduled(kube, namespace, "sweep")
    assert stored["spec"]["terminationGracePeriodSeconds"] == 300
    assert PREEMPTIBLE_TOLERATION in stored["spec"]["tolerations"]
    terms = _required_terms(stored)
    assert terms
    assert all(IN_PREEMPTIBLE in t["matchExpressions"] for t in terms)
    assert stored["metadata"]["annotations"][PLACEMENT] == "interruptible"
    assert nodes[stored["spec"]["nodeName"]] == PREEMPTIBLE


def test_coordinator_that_tolerates_the_taint_is_kept_on_standard_nodes(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    # Tolerating the taint would let the scheduler use any of the six nodes, half of them
    # preemptible; only the injected NotIn affinity keeps all six pods on standard ones.
    tolerate_all = [{"key": CLASS_LABEL, "operator": "Exists"}]
    names = [f"head-{i}" for i in range(6)]
    for name in names:
        kube.create(
            _pods(namespace),
            cluster.pod(name, workload="coordinator", tolerations=tolerate_all),
        )
    for name in names:
        stored = cluster.wait_scheduled(kube, namespace, name)
        assert all(NOT_IN_PREEMPTIBLE in t["matchExpressions"] for t in _required_terms(stored))
        assert tolerate_all[0] in stored["spec"]["tolerations"]  # what the user wrote stays
        assert nodes[stored["spec"]["nodeName"]] == STANDARD


def test_serving_pod_with_a_preemptible_node_selector_is_refused_with_our_message(
    kube: Kube, webhook: WebhookServer, namespace: str
) -> None:
    manifest = cluster.pod(
        "web",
        workload="serving",
        nodeSelector={CLASS_LABEL: PREEMPTIBLE},
        tolerations=[PREEMPTIBLE_TOLERATION],
    )
    with pytest.raises(KubeError) as refusal:
        kube.create(_pods(namespace), manifest)
    assert refusal.value.status == 403
    assert cluster.refused(refusal.value)
    assert "class serving must run on standard nodes" in refusal.value.message
    assert "nodeSelector together.ai/compute-class=preemptible" in refusal.value.message
    assert not kube.exists(f"{_pods(namespace)}/web")


def test_serving_deployment_whose_template_requires_preemptible_nodes_is_refused_at_create(
    kube: Kube, webhook: WebhookServer, namespace: str
) -> None:
    template = cluster.pod_template(
        {"app": "chat"},
        workload="serving",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [IN_PREEMPTIBLE]}]
                }
            }
        },
    )
    with pytest.raises(KubeError) as refusal:
        kube.create(_deployments(namespace), _deployment("chat", 2, template))
    _assert_refused(
        refusal.value,
        "workloads.validate.preemptguard.together.ai",
        "class serving must run on standard nodes",
        "required node affinity",
    )
    assert not kube.exists(f"{_deployments(namespace)}/chat")
    assert not kube.get(_pods(namespace))["items"]


def test_allowed_serving_deployment_gets_all_its_pods_on_standard_nodes(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    # The template tolerates the taint, so nothing but the webhook keeps replicas off preemptible.
    template = cluster.pod_template(
        {"app": "api"}, workload="serving", tolerations=[PREEMPTIBLE_TOLERATION]
    )
    kube.create(_deployments(namespace), _deployment("api", 6, template))
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=api", 6)
    assert {nodes[p["spec"]["nodeName"]] for p in pods} == {STANDARD}
    for pod in pods:
        assert pod["metadata"]["annotations"][PLACEMENT] == "serving"
        # Created by the ReplicaSet controller, not by us.
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    # ...under its own identity, as in a kubeadm cluster: the webhook sees who creates a pod.
    creators = {r["user"] for r in webhook.admissions(namespace) if r["kind"] == "Pod"}
    assert creators == {"system:serviceaccount:kube-system:replicaset-controller"}

    # Templates are checked on UPDATE as well: scaling passes, turning it preemptible does not.
    path = f"{_deployments(namespace)}/api"
    kube.merge_patch(path, {"spec": {"replicas": 3}})
    with pytest.raises(KubeError) as refusal:
        kube.merge_patch(
            path,
            {"spec": {"template": {"spec": {"nodeSelector": {CLASS_LABEL: PREEMPTIBLE}}}}},
        )
    _assert_refused(
        refusal.value,
        "workloads.validate.preemptguard.together.ai",
        "class serving must run on standard nodes",
    )
    stored = kube.get(path)
    assert "nodeSelector" not in stored["spec"]["template"]["spec"]
    assert stored["spec"]["replicas"] == 3


def test_interruptible_job_pods_land_on_preemptible_nodes(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "eval"},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "backoffLimit": 0,
            "template": cluster.pod_template(
                {"app": "eval"}, workload="interruptible", gpus=1, restartPolicy="Never"
            ),
        },
    }
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=eval", 4)
    assert {nodes[p["spec"]["nodeName"]] for p in pods} == {PREEMPTIBLE}
    for pod in pods:
        assert PREEMPTIBLE_TOLERATION in pod["spec"]["tolerations"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_flexible_work_still_runs_when_every_preemptible_node_is_cordoned(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
    preemptible_cordoned: list[str],
) -> None:
    template = cluster.pod_template({"app": "batch"}, workload="flexible", gpus=1)
    kube.create(_deployments(namespace), _deployment("batch", 3, template))
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=batch", 3)
    assert {nodes[p["spec"]["nodeName"]] for p in pods} == {STANDARD}
    for pod in pods:
        assert PREEMPTIBLE_TOLERATION in pod["spec"]["tolerations"]
        assert not _required_terms(pod)  # a preference only, so the fallback is allowed
        preferred = pod["spec"]["affinity"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert any(IN_PREEMPTIBLE in p["preference"]["matchExpressions"] for p in preferred)

    # Interruptible work, by contrast, waits for preemptible capacity.
    kube.create(_pods(namespace), cluster.pod("waits", workload="interruptible"))
    wait_until(
        lambda: "FailedScheduling" in cluster.scheduling_events(kube, namespace, "waits"),
        timeout=30,
        what="the scheduler to give up on the interruptible pod",
    )
    assert not kube.get(f"{_pods(namespace)}/waits")["spec"].get("nodeName")


def test_a_namespace_default_class_is_honoured(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer
) -> None:
    namespace = cluster.unique("batch-team")
    cluster.create_namespace(
        kube, namespace, annotations={cluster.DEFAULT_WORKLOAD: "interruptible"}
    )

    # The server learns namespace annotations through a watch, not at admission time.
    def placed() -> bool:
        body = kube.create(_pods(namespace), cluster.pod("probe"), dry_run=True).body
        annotations: dict[str, str] = body["metadata"].get("annotations", {})
        return annotations.get(PLACEMENT) == "interruptible"

    wait_until(placed, timeout=30, what="the namespace annotation to reach the server")
    kube.create(_pods(namespace), cluster.pod("unannotated", gpus=1))
    stored = cluster.wait_scheduled(kube, namespace, "unannotated")
    assert WORKLOAD not in stored["metadata"].get("annotations", {})
    assert stored["metadata"]["annotations"][PLACEMENT] == "interruptible"
    assert nodes[stored["spec"]["nodeName"]] == PREEMPTIBLE


def test_dry_run_creates_change_nothing(kube: Kube, webhook: WebhookServer, namespace: str) -> None:
    answer = kube.create(
        _pods(namespace),
        cluster.pod("dry", workload="interruptible", terminationGracePeriodSeconds=900),
        dry_run=True,
    )
    # The answer shows what a real create would store...
    assert answer.body["metadata"]["annotations"][PLACEMENT] == "interruptible"
    assert answer.body["spec"]["terminationGracePeriodSeconds"] == 300
    template = cluster.pod_template({"app": "dry"}, workload="serving")
    kube.create(_deployments(namespace), _deployment("dry", 2, template), dry_run=True)
    # ...but nothing was stored, and the server was told it was a dry run.
    assert not kube.get(_pods(namespace))["items"]
    assert not kube.get(_deployments(namespace))["items"]
    records = webhook.admissions(namespace, "dry")
    assert records
    assert all(r["dry_run"] is True for r in records)


def test_pod_update_and_delete_pass_untouched(
    kube: Kube, webhook: WebhookServer, namespace: str
) -> None:
    kube.create(_pods(namespace), cluster.pod("job-0", workload="interruptible"))
    before = cluster.wait_scheduled(kube, namespace, "job-0")
    assert {r["operation"] for r in webhook.admissions(namespace, "job-0")} == {"CREATE"}

    path = f"{_pods(namespace)}/job-0"
    # Even an annotation that would now be refused at create passes an UPDATE: only a change
    # into a standard-only class the pod's constraints do not keep is refused (see
    # test_attacks.py), and pods are never rewritten after they are created.
    updated = kube.merge_patch(
        path, {"metadata": {"labels": {"step": "42"}, "annotations": {WORKLOAD: "bogus"}}}
    )
    assert updated["metadata"]["labels"] == {"step": "42"}
    assert updated["spec"] == before["spec"]
    kube.call("DELETE", path, {"gracePeriodSeconds": 0})
    wait_until(lambda: not kube.exists(path), timeout=10, what="the pod to be deleted")
    records = webhook.admissions(namespace, "job-0")
    assert {r["operation"] for r in records} == {"CREATE", "UPDATE"}
    updates = [r for r in records if r["operation"] == "UPDATE"]
    assert {(r["hook"], r["outcome"]) for r in updates} == {("validate", "skipped")}
