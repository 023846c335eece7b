"""Reclaims that cost no retry, whole: the webhook gives an interruptible Job (or a JobSet's
job template) the podFailurePolicy rule that ignores DisruptionTarget, the observer marks the
pods of each reclaimed node with that condition before they exit, and the real Job controller
(and, for a JobSet, the real JobSet controller, ``harness.jobset``) replaces each reclaimed
pod instead of counting it. Nothing of the workload's own says to ignore anything: without the
observer the first reclaim fails it.

On 1.37 only: podFailurePolicy is served from 1.26, the JobSet CRD needs 1.25 or later. No
kubelet runs: ``harness.reclaim`` reclaims a node as the provider does and ends each pod as a
kubelet reports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import cluster, jobset, reclaim
from harness.controlplane import ControlPlane
from harness.kube import Kube
from harness.processes import Component, wait_until
from harness.webhook import WebhookServer
from tests.e2e import upstream

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.releases("1.37", reason="podFailurePolicy is served from Kubernetes 1.26"),
]

RULE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
JOBSETS = "jobset.x-k8s.io/v1alpha2"
RECLAIMS = 3

Obj = dict[str, Any]


# --- what runs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jobset_controller(
    kube: Kube, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Component]:
    """The JobSet CRD as upstream writes it, and its controller."""
    try:
        upstream.install(kube, upstream.crds("jobset"))
        controller = jobset.start(control_plane, kube, tmp_path_factory.mktemp("jobset"))
    except (upstream.UpstreamError, jobset.JobSetControllerError, TimeoutError) as exc:
        pytest.fail(str(exc), pytrace=False)
    yield controller
    jobset.stop(controller, kube)


@pytest.fixture
def observer(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Component]:
    """One ``preemptguard observe`` replica, acting without a Lease, once it has listed."""
    log = tmp_path / "observer.log"
    argv = [sys.executable, "-m", "webhook", "observe", "--no-leader-election",
            "--metrics-port", "0", "--kubeconfig", str(control_plane.kubeconfig)]  # fmt: skip
    process = Component("observer", argv, log)
    process.start()

    def started() -> bool:
        process.check_alive()
        return "observer_started" in log.read_text(errors="replace")

    wait_until(started, timeout=60, what="the observer to list the cluster")
    yield process
    process.stop()


# --- the workloads -------------------------------------------------------------------------


def _template(app: str, group: str) -> Obj:
    """An interruptible pod of ``app``, bound only to the nodes of ``group``."""
    return cluster.pod_template({"app": app}, workload="interruptible", restartPolicy="Never",
                                nodeSelector={reclaim.RECLAIM_GROUP: group})  # fmt: skip


def _job_spec(app: str, group: str) -> Obj:
    """``backoffLimit: 0``: the first failure that counts fails it. No podFailurePolicy."""
    return {"backoffLimit": 0, "parallelism": 1, "completions": 1,
            "template": _template(app, group)}  # fmt: skip


def _job(app: str, group: str) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": app},
            "spec": _job_spec(app, group)}  # fmt: skip


def _jobset(app: str, group: str) -> Obj:
    """One replicated job of one pod; ``maxRestarts: 0``: a failed Job fails the JobSet."""
    return {"apiVersion": JOBSETS, "kind": "JobSet", "metadata": {"name": app},
            "spec": {"failurePolicy": {"maxRestarts": 0},
                     "replicatedJobs": [{"name": "workers", "replicas": 1,
                                         "template": {"spec": _job_spec(app, group)}}]}}  # fmt: skip


def _collection(obj: Obj, namespace: str) -> str:
    plural = {"Job": "jobs", "JobSet": "jobsets"}[obj["kind"]]
    return f"/apis/{obj['apiVersion']}/namespaces/{namespace}/{plural}"


def _finished(kube: Kube, where: str) -> str | None:
    """``Complete``/``Failed`` (a Job) or ``Completed``/``Failed`` (a JobSet), once it is."""
    conditions = kube.get(where).get("status", {}).get("conditions") or []
    for c in conditions:
        if c["type"] in ("Complete", "Completed", "Failed") and c["status"] == "True":
            return str(c["type"])
    return None


def _the_job(kube: Kube, namespace: str, obj: Obj) -> Obj:
    """The Job that runs the pods: the object itself, or the one the JobSet controller made."""
    if obj["kind"] == "Job":
        return kube.get(f"{_collection(obj, namespace)}/{obj['metadata']['name']}")
    selector = f"jobset.sigs.k8s.io/jobset-name={obj['metadata']['name']}"

    def made() -> Obj | None:
        found = kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs", labelSelector=selector)
        return found["items"][0] if found["items"] else None

    return wait_until(made, timeout=60, what=f"the JobSet controller to make the Job of {selector}")


def _clean_up(kube: Kube, namespace: str, obj: Obj, nodes: list[str]) -> None:
    kube.call("DELETE", f"{_collection(obj, namespace)}/{obj['metadata']['name']}",
              {"propagationPolicy": "Background"})  # fmt: skip
    leftovers = [
        p["metadata"]["name"] for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    ]
    cluster.delete_pods(kube, namespace, leftovers)
    for node in nodes:
        kube.delete(f"/api/v1/nodes/{node}")


MAKERS: dict[str, Callable[[str, str], Obj]] = {"Job": _job, "JobSet": _jobset}


# --- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Job", "JobSet"])
def test_an_interruptible_workload_survives_reclaims_with_the_webhooks_rule_and_the_observer(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    jobset_controller: Component,
    observer: Component,
    namespace: str,
    kind: str,
) -> None:
    group = cluster.unique(f"retries-{kind.lower()}")
    node = reclaim.group_node(kube, group)
    obj = MAKERS[kind]("sweep", group)
    kube.create(_collection(obj, namespace), obj)
    job = _the_job(kube, namespace, obj)
    # The webhook's rule, on the Job the controller runs (from the JobSet's stored template).
    assert job["spec"]["podFailurePolicy"]["rules"][0] == RULE
    assert job["spec"]["podReplacementPolicy"] == "Failed"

    # Three pods killed by their reclaim; the fourth finishes its work on SIGTERM.
    reclaimed, last = reclaim.reclaim_each_marked_pod(kube, namespace, "app=sweep", group, node,
                                                      reclaims=RECLAIMS)  # fmt: skip
    used = [*dict.fromkeys(reclaimed.values()), last]
    where = f"{_collection(obj, namespace)}/sweep"
    finished = wait_until(lambda: _finished(kube, where), timeout=90, what=f"the {kind} to finish")
    assert finished in ("Complete", "Completed")

    pods = {
        p["metadata"]["name"]: p for p in cluster.pods_with_labels(kube, namespace, "app=sweep")
    }
    assert set(pods) == set(reclaimed)  # one pod per reclaim, none for a counted failure
    assert sorted(p["status"]["phase"] for p in pods.values()) == ["Failed"] * RECLAIMS + [
        "Succeeded"
    ]
    for name, on in reclaimed.items():
        condition = reclaim.disruption(kube, namespace, name)
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("True", "PreemptibleNodeReclaimed")
        assert f"preemptible node {on} is being reclaimed" in condition["message"]
    assert _the_job(kube, namespace, obj).get("status", {}).get("failed", 0) == 0
    _clean_up(kube, namespace, obj, used)


def test_without_the_observer_the_first_reclaim_fails_the_jobset(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    jobset_controller: Component,
    namespace: str,
) -> None:
    group = cluster.unique("retries-unobserved")
    node = reclaim.group_node(kube, group)
    obj = _jobset("sweep", group)
    kube.create(_collection(obj, namespace), obj)
    assert _the_job(kube, namespace, obj)["spec"]["podFailurePolicy"]["rules"][0] == RULE
    name = reclaim.running_pod(kube, namespace, "app=sweep", node)
    reclaim.provider_reclaims(kube, node)
    reclaim.kubelet_ends(kube, namespace, name, "Failed")
    where = f"{_collection(obj, namespace)}/sweep"
    finished = wait_until(lambda: _finished(kube, where), timeout=90, what="the JobSet to finish")
    assert finished == "Failed"
    assert reclaim.disruption(kube, namespace, name) is None  # the provider does not set it
    _clean_up(kube, namespace, obj, [node])
