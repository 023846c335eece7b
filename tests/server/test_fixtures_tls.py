"""Every recorded API-server request, posted to the running server over verified TLS."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from tests.server.helpers import Reply, ServerProcess, fixture, fixture_names, with_object
from webhook.admission.review import decode_patch

pytestmark = pytest.mark.slow

PREEMPTIBLE_TOLERATION = {
    "key": "together.ai/compute-class",
    "operator": "Equal",
    "value": "preemptible",
    "effect": "NoSchedule",
}
REQUIRE_PREEMPTIBLE = {
    "nodeSelectorTerms": [
        {
            "matchExpressions": [
                {"key": "together.ai/compute-class", "operator": "In", "values": ["preemptible"]}
            ]
        }
    ]
}
GRACE_WARNING = "grace period lowered from 600 to 300 s"
COORDINATOR_REFUSAL = (
    "class coordinator must run on standard nodes, but the pod requires preemptible capacity "
    "through its nodeSelector together.ai/compute-class=preemptible: remove that requirement"
)
SERVING_REFUSAL = (
    "class serving must run on standard nodes, but the pod requires preemptible capacity "
    "through its required node affinity terms: remove that requirement"
)


def post(server: ServerProcess, name: str, review: dict[str, Any] | None = None) -> Reply:
    hook = "validate" if "-validate" in name else "mutate"
    client = server.client()
    try:
        reply = client.post(f"/{hook}?timeout=5s", review or fixture(name))
    finally:
        client.close()
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "application/json"
    doc = reply.json()
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    assert doc["kind"] == "AdmissionReview"
    assert doc["response"]["uid"] == (review or fixture(name))["request"]["uid"]
    return reply


def applied(name: str, response: dict[str, Any]) -> dict[str, Any]:
    assert response["patchType"] == "JSONPatch"
    pod: dict[str, Any] = jsonpatch.apply_patch(
        fixture(name)["request"]["object"], decode_patch(response["patch"])
    )
    return pod


@pytest.mark.parametrize("name", ["create-pod-sweep-mutate", "create-pod-sweep-dryrun-mutate"])
def test_interruptible_pod_is_placed_on_preemptible_nodes(server: ServerProcess, name: str) -> None:
    response = post(server, name).response
    assert response["allowed"] is True
    assert "status" not in response
    pod = applied(name, response)
    spec = pod["spec"]
    assert PREEMPTIBLE_TOLERATION in spec["tolerations"]
    assert spec["tolerations"][:2] == fixture(name)["request"]["object"]["spec"]["tolerations"]
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == REQUIRE_PREEMPTIBLE
    assert spec["terminationGracePeriodSeconds"] == 300
    assert pod["metadata"]["annotations"]["together.ai/placement"] == "interruptible"
    assert pod["metadata"]["annotations"]["together.ai/workload"] == "interruptible"
    assert any(GRACE_WARNING in w for w in response["warnings"])
    assert response["auditAnnotations"] == {
        "workload-class": "interruptible",
        "classified-by": "annotation",
    }


def test_dry_run_gets_the_same_answer(server: ServerProcess) -> None:
    for hook in ("mutate", "validate"):
        real = post(server, f"create-pod-sweep-{hook}").response
        dry = post(server, f"create-pod-sweep-dryrun-{hook}").response
        assert {**real, "uid": ""} == {**dry, "uid": ""}


def test_mutated_pod_passes_validation_without_a_patch(server: ServerProcess) -> None:
    mutated = applied("create-pod-sweep-mutate", post(server, "create-pod-sweep-mutate").response)
    validate = fixture("create-pod-sweep-validate")
    final = {**mutated, "metadata": {**mutated["metadata"], "name": "sweep-2qwsx"}}
    response = post(server, "create-pod-sweep-validate", with_object(validate, final)).response
    assert response["allowed"] is True
    assert "patch" not in response
    assert "patchType" not in response
    assert response["auditAnnotations"]["workload-class"] == "interruptible"


def test_pod_that_skipped_the_mutating_hook_is_refused_by_validation(
    server: ServerProcess,
) -> None:
    response = post(server, "create-pod-sweep-validate").response
    assert response["allowed"] is False
    assert "patch" not in response
    status = response["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    message = status["message"]
    assert "reached validation without the placement of its class interruptible" in message
    assert "spec.tolerations" in message
    assert "spec.terminationGracePeriodSeconds" in message
    assert "MutatingWebhookConfiguration" in message


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("create-pod-coordinator-0-mutate", COORDINATOR_REFUSAL),
        ("create-pod-coordinator-0-validate", COORDINATOR_REFUSAL),
        ("create-deployment-serve-validate", SERVING_REFUSAL),
    ],
)
def test_refusals_say_what_to_change(server: ServerProcess, name: str, refusal: str) -> None:
    response = post(server, name).response
    assert response["allowed"] is False
    assert "patch" not in response
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"].startswith(refusal)


@pytest.mark.parametrize(
    ("name", "workload_class", "summary"),
    [
        ("create-job-eval-validate", "interruptible", "pods of this Job will get: requires"),
        ("create-statefulset-login-validate", "login", "pods of this StatefulSet will get:"),
    ],
)
def test_templates_are_validated_with_a_summary_of_what_pods_get(
    server: ServerProcess, name: str, workload_class: str, summary: str
) -> None:
    response = post(server, name).response
    assert response["allowed"] is True
    assert "patch" not in response
    assert any(w.startswith(summary) for w in response["warnings"])
    assert response["auditAnnotations"]["workload-class"] == workload_class


@pytest.mark.parametrize(
    ("name", "workload_class"),
    [
        ("create-deployment-serve-mutate", "serving"),
        ("create-job-eval-mutate", "interruptible"),
        ("create-statefulset-login-mutate", "login"),
    ],
)
def test_workloads_are_classified_but_not_patched_by_the_mutating_hook(
    server: ServerProcess, name: str, workload_class: str
) -> None:
    """The mutating workload hook changes only Jobs that show their API server serves a
    podFailurePolicy (these recorded ones do not); it still says how it classified them."""
    uid = fixture(name)["request"]["uid"]
    response = post(server, name).response
    assert response["uid"] == uid
    assert response["allowed"] is True
    assert "patch" not in response
    assert response["auditAnnotations"] == {
        "classified-by": "annotation",
        "workload-class": workload_class,
    }


@pytest.mark.parametrize(
    "name",
    [
        "delete-pod-coordinator-0-mutate",
        "delete-pod-coordinator-0-validate",
        "update-pod-coordinator-0-mutate",
        "update-pod-coordinator-0-mutate-again",
        "update-pod-coordinator-0-validate",
        "update-pod-coordinator-0-validate-again",
    ],
)
def test_left_untouched(server: ServerProcess, name: str) -> None:
    uid = fixture(name)["request"]["uid"]
    assert post(server, name).response == {"uid": uid, "allowed": True}


def test_every_fixture_is_answered_and_logged(server: ServerProcess) -> None:
    names = fixture_names()
    assert len(names) == 18
    for name in names:
        post(server, name)
    logged = {record["uid"]: record for record in server.log_events("admission")}
    for name in names:
        request = fixture(name)["request"]
        record = logged[request["uid"]]
        assert record["operation"] == request["operation"]
        assert record["kind"] == request["kind"]["kind"]
        assert record["namespace"] == request["namespace"]
        assert record["user"] == request["userInfo"]["username"]
        assert record["dry_run"] == request["dryRun"]
        assert record["duration_ms"] >= 0
        assert {"hook", "outcome", "workload_class", "source", "patch_ops", "warnings"} <= set(
            record
        )
    sweep = logged[fixture("create-pod-sweep-mutate")["request"]["uid"]]
    assert (sweep["name"], sweep["outcome"], sweep["patch_ops"]) == ("sweep-", "patched", 7)
    assert sweep["workload_class"] == "interruptible"


def test_subresource_is_allowed_untouched(server: ServerProcess) -> None:
    review = fixture("create-pod-coordinator-0-mutate")
    review["request"]["subResource"] = "binding"
    assert post(server, "create-pod-coordinator-0-mutate", review).response == {
        "uid": review["request"]["uid"],
        "allowed": True,
    }


def test_certificate_names_localhost_too(server: ServerProcess) -> None:
    from tests.server.helpers import Client

    client = Client(server.port, server.ca, host="localhost")
    assert client.get("/healthz").status == 200
    names = {value for kind, value in client.peer_certificate()["subjectAltName"]}
    assert {"localhost", "127.0.0.1"} <= names
    client.close()
