"""Retries that do not count, through the real API server, the real ``preemptguard serve`` with
the shipped webhook configurations, and the real Job controller: a Job of a preemptible class
is stored with the podFailurePolicy rule that ignores reclaims, and a pod failed with the
condition DisruptionTarget is replaced instead of failing the Job. No kubelet runs: the test
marks the pod as the observer (the condition) and a kubelet (the phase) would."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from harness import cluster
from harness.binaries import Release
from harness.kube import Kube
from harness.processes import wait_until
from harness.webhook import WebhookServer

pytestmark = pytest.mark.e2e

RULE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
USERS_RULE = {
    "action": "FailJob",
    "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
}
ON_1_37 = "podFailurePolicy and podReplacementPolicy are not served by Kubernetes 1.20"


def _job(name: str, workload: str | None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": cluster.pod_template(
                {"app": name}, workload=workload, restartPolicy="Never"
            ),
        },
    }


def _jobs(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fail_disrupted(kube: Kube, namespace: str, pod: dict[str, Any]) -> None:
    """The pod marked DisruptionTarget (as a reclaim's), then failed as a kubelet reports it."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status"
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TogetherPreempted",
        "message": "the preemptible node is being reclaimed",
        "lastTransitionTime": _now(),
    }
    kube.merge_patch(path, {"status": {"conditions": [condition]}})
    terminated = {"exitCode": 143, "reason": "Error", "startedAt": _now(), "finishedAt": _now()}
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "main",
                "image": "registry.invalid/e2e:1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    kube.merge_patch(path, {"status": status})


def _pods_of(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return cluster.pods_with_labels(kube, namespace, f"job-name={name}")


def _first_pod(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    pods: list[dict[str, Any]] = wait_until(
        lambda: _pods_of(kube, namespace, name) or None,
        timeout=30,
        what=f"the Job controller to create a pod of {name}",
    )
    return pods[0]


def _failed(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions") or []
    return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)


@pytest.mark.releases("1.37", reason=ON_1_37)
def test_an_interruptible_job_is_stored_with_the_rule_ahead_of_its_own(
    kube: Kube, webhook: WebhookServer, namespace: str
) -> None:
    job = _job("sweep", "interruptible", podFailurePolicy={"rules": [USERS_RULE]})
    kube.create(_jobs(namespace), job)
    stored = kube.get(f"{_jobs(namespace)}/sweep")
    assert stored["spec"]["podFailurePolicy"]["rules"] == [RULE, USERS_RULE]
    assert stored["spec"]["podReplacementPolicy"] == "Failed"


@pytest.mark.releases("1.37", reason=ON_1_37)
def test_a_reclaimed_pod_does_not_fail_a_job_with_the_rule_and_does_fail_one_without(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    kube.create(_jobs(namespace), _job("eval", "interruptible"))
    kube.create(_jobs(namespace), _job("plain", None))
    assert "podFailurePolicy" in kube.get(f"{_jobs(namespace)}/eval")["spec"]
    assert "podFailurePolicy" not in kube.get(f"{_jobs(namespace)}/plain")["spec"]

    reclaimed = _first_pod(kube, namespace, "eval")
    _fail_disrupted(kube, namespace, reclaimed)
    replacements = wait_until(
        lambda: (
            [
                p
                for p in _pods_of(kube, namespace, "eval")
                if p["metadata"]["uid"] != reclaimed["metadata"]["uid"]
            ]
            or None
        ),
        timeout=30,
        what="the Job controller to replace the reclaimed pod",
    )
    assert len(replacements) == 1
    job = kube.get(f"{_jobs(namespace)}/eval")
    assert not _failed(job), job.get("status")
    assert job.get("status", {}).get("failed", 0) == 0

    _fail_disrupted(kube, namespace, _first_pod(kube, namespace, "plain"))

    def failed_job() -> dict[str, Any] | None:
        job = kube.get(f"{_jobs(namespace)}/plain")
        return job if _failed(job) else None

    plain = wait_until(failed_job, timeout=30, what="the Job without the rule to fail")
    assert plain["status"]["failed"] == 1
    assert len(_pods_of(kube, namespace, "plain")) == 1


def test_a_cronjobs_job_template_gets_the_rule_where_the_server_knows_it(
    kube: Kube, release: Release, webhook: WebhookServer, namespace: str
) -> None:
    """On 1.20 (CronJob batch/v1beta1, no podFailurePolicy) the API server drops the fields the
    webhook adds to the template, without an error; on 1.37 the template keeps them."""
    version = "v1" if release.name == "1.37" else "v1beta1"
    cronjob = {
        "apiVersion": f"batch/{version}",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": _job("x", "interruptible")["spec"]},
        },
    }
    path = f"/apis/batch/{version}/namespaces/{namespace}/cronjobs"
    kube.create(path, cronjob)
    spec = kube.get(f"{path}/nightly")["spec"]["jobTemplate"]["spec"]
    if release.name == "1.37":
        assert spec["podFailurePolicy"] == {"rules": [RULE]}
        assert spec["podReplacementPolicy"] == "Failed"
    else:
        assert "podFailurePolicy" not in spec
        assert "podReplacementPolicy" not in spec
    # On both, the webhook did patch the template: 1.20 dropped what it does not know.
    mutated = [r for r in webhook.admissions(namespace, "nightly") if r["hook"] == "mutate"]
    assert [r["outcome"] for r in mutated] == ["patched"], webhook.log_tail()


def test_an_interruptible_job_is_admitted_on_every_release(
    kube: Kube, release: Release, webhook: WebhookServer, namespace: str
) -> None:
    """On 1.20 the Job carries no podReplacementPolicy to prove the server knows the fields,
    so it gets no patch and is stored as written."""
    kube.create(_jobs(namespace), _job("batch", "interruptible"))
    spec = kube.get(f"{_jobs(namespace)}/batch")["spec"]
    if release.name == "1.37":
        assert spec["podFailurePolicy"] == {"rules": [RULE]}
    else:
        assert "podFailurePolicy" not in spec
