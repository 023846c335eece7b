"""The Flask app with injected policy, namespace lookup and engine (no network)."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

import pytest

from tests.server.asgi import AppClient
from tests.server.helpers import WARN_POLICY, fixture, with_object
from webhook.engine.decision import Context, Decision, NamespaceMeta, Obj
from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy, parse_policy
from webhook.server import logs
from webhook.server.app import create_app
from webhook.server.metrics import Metrics
from webhook.server.transport import Transport, timeout_parameter

SWEEP = fixture("create-pod-sweep-mutate")


def warn_policy() -> Policy:
    return parse_policy(WARN_POLICY, source="warn.yaml")


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    logs.configure("info", stream=stream)
    yield stream
    logs.configure("info")


def client_for(app: Transport) -> AppClient:
    return AppClient(app)


def review_of(client: AppClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(path, json=body)
    assert reply.status_code == 200, reply.data
    doc: dict[str, Any] = reply.get_json()
    return doc


def test_engine_failure_is_an_http_500_naming_the_uid(log_stream: io.StringIO) -> None:
    """Not a review refusing the pod: the API server applies the webhook's failurePolicy."""

    def broken(obj: Obj, policy: Policy, ctx: Context) -> Decision:
        raise RuntimeError("engine bug")

    metrics = Metrics()
    app = create_app(builtin_policy, evaluate=broken, metrics=metrics)
    reply = client_for(app).post("/mutate", json=SWEEP)
    assert reply.status_code == 500
    assert reply.mimetype == "text/plain"
    text = reply.get_data(as_text=True)
    assert text.count("\n") == 1
    assert text.endswith("\n")
    assert SWEEP["request"]["uid"] in text
    assert "team-a/sweep-" in text
    assert "Traceback" not in text
    assert "engine bug" not in text
    events = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["admission_failed"]
    failed = events[0]
    assert failed["level"] == "error"
    assert failed["uid"] == SWEEP["request"]["uid"]
    assert failed["exception"][0]["exc_value"] == "engine bug"
    # The frames' local variables (the pod, the request) stay out of the log.
    assert all("locals" not in frame for frame in failed["exception"][0]["frames"])
    assert "sweep-" not in json.dumps(failed["exception"])
    sample = 'preemptguard_admissions_total{hook="mutate",outcome="error",workload_class="none"}'
    assert f"{sample} 1.0" in metrics.render().decode()


def test_without_a_policy_reviews_are_refused_and_not_ready() -> None:
    client = client_for(create_app(lambda: None))
    response = review_of(client, "/mutate", SWEEP)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.data == b"not ready: no policy loaded\n"
    assert client.get("/healthz").status_code == 200


def test_readiness_reports_the_problem() -> None:
    problem: list[str | None] = [None]
    client = client_for(create_app(builtin_policy, readiness=lambda: problem[0]))
    assert client.get("/readyz").status_code == 200
    problem[0] = "shutting down"
    reply = client.get("/readyz")
    assert (reply.status_code, reply.data) == (503, b"not ready: shutting down\n")


def test_namespace_annotations_reach_the_engine() -> None:
    seen: list[str | None] = []

    def lookup(namespace: str) -> NamespaceMeta:
        seen.append(namespace)
        return NamespaceMeta(annotations={"together.ai/default-workload": "interruptible"})

    pod = copy.deepcopy(SWEEP["request"]["object"])
    del pod["metadata"]["annotations"]
    client = client_for(create_app(builtin_policy, lookup))
    response = review_of(client, "/mutate", with_object(SWEEP, pod))["response"]
    assert seen == ["team-a"]
    assert response["auditAnnotations"]["workload-class"] == "interruptible"
    assert response["auditAnnotations"]["classified-by"] != "annotation"
    assert response["patchType"] == "JSONPatch"


def test_warn_mode_lets_an_unplaced_pod_through_with_a_warning() -> None:
    policy = warn_policy()
    client = client_for(create_app(lambda: policy))
    response = review_of(client, "/validate", fixture("create-pod-sweep-validate"))["response"]
    assert response["allowed"] is True
    assert any(
        w.startswith("would be refused in enforce mode: the pod reached validation")
        for w in response["warnings"]
    )


def test_warn_mode_allows_what_enforce_refuses() -> None:
    policy = warn_policy()
    client = client_for(create_app(lambda: policy))
    review = fixture("create-pod-coordinator-0-mutate")
    response = review_of(client, "/mutate", review)["response"]
    assert response["allowed"] is True
    assert any(w.startswith("would be refused in enforce mode") for w in response["warnings"])


def test_v1beta1_is_answered_in_v1beta1() -> None:
    review = copy.deepcopy(SWEEP)
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    doc = review_of(client_for(create_app(builtin_policy)), "/mutate", review)
    assert doc["apiVersion"] == "admission.k8s.io/v1beta1"


def test_excluded_namespace_is_skipped() -> None:
    review = copy.deepcopy(fixture("create-pod-coordinator-0-mutate"))
    review["request"]["namespace"] = "kube-system"
    review["request"]["object"]["metadata"]["namespace"] = "kube-system"
    response = review_of(client_for(create_app(builtin_policy)), "/mutate", review)["response"]
    assert response == {"uid": review["request"]["uid"], "allowed": True}


def test_one_log_line_per_admission(log_stream: io.StringIO) -> None:
    client = client_for(create_app(builtin_policy))
    review_of(client, "/mutate", SWEEP)
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert len(lines) == 1
    line = lines[0]
    assert line["event"] == "admission"
    assert line["level"] == "info"
    expected = {
        "uid": SWEEP["request"]["uid"],
        "hook": "mutate",
        "operation": "CREATE",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "sweep-",
        "user": "admin",
        "dry_run": False,
        "workload_class": "interruptible",
        "source": "annotation",
        "outcome": "patched",
        "allowed": True,
        "patch_ops": 7,  # affinity, toleration, record; priority class, priority, policy
        "warnings": 1,
    }
    assert {k: line[k] for k in expected} == expected
    assert isinstance(line["duration_ms"], float)
    assert "timestamp" in line


def test_a_failure_outside_the_engine_is_an_http_500_logged_with_its_path(
    log_stream: io.StringIO,
) -> None:
    class BrokenMetrics(Metrics):
        def count_admission(self, hook: str, outcome: str, wclass: str, seconds: float) -> None:
            raise RuntimeError("metrics bug")

    reply = client_for(create_app(builtin_policy, metrics=BrokenMetrics())).post(
        "/validate", json=SWEEP
    )
    assert reply.status_code == 500
    assert reply.get_data(as_text=True) == "internal error; see the preemptguard log\n"
    events = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    failed = [e for e in events if e["event"] == "request_failed"]
    assert [e["path"] for e in failed] == ["/validate"]
    assert failed[0]["exception"][0]["exc_value"] == "metrics bug"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_the_hooks_answer_only_post(method: str) -> None:
    reply = client_for(create_app(builtin_policy)).open("/mutate", method=method)
    assert reply.status_code == 405
    assert reply.headers["Allow"] == "POST"
    assert reply.get_data(as_text=True) == "405 Method Not Allowed\n"


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Content-Type": "application/json; charset=utf-8"}, None),
        ({"Content-Type": "Application/JSON"}, None),
        ({"Content-Type": "text/json"}, "content type must be application/json, not 'text/json'"),
        ({}, "content type must be application/json, not 'none'"),
    ],
)
def test_the_content_type_is_read_as_its_media_type(
    headers: dict[str, str], reason: str | None
) -> None:
    body = json.dumps(SWEEP).encode()
    reply = client_for(create_app(builtin_policy)).post("/mutate", data=body, headers=headers)
    if reason is None:
        assert reply.status_code == 200, reply.data
        assert reply.get_json()["response"]["allowed"] is True
    else:
        assert reply.status_code == 400
        assert reply.get_data(as_text=True) == reason + "\n"


@pytest.mark.parametrize("operation", [{"op": "CREATE"}, ["CREATE"], 1, None, True, "create"])
def test_an_operation_of_any_other_value_or_type_is_refused(operation: object) -> None:
    review = copy.deepcopy(SWEEP)
    review["request"]["operation"] = operation
    reply = client_for(create_app(builtin_policy)).post("/mutate", json=review)
    # The uid can be echoed: a refusal, not an HTTP error the failurePolicy would decide.
    assert reply.status_code == 200
    response = reply.get_json()["response"]
    assert (response["uid"], response["allowed"]) == (SWEEP["request"]["uid"], False)
    assert "is not one of CREATE, UPDATE, DELETE, CONNECT" in response["status"]["message"]


@pytest.mark.parametrize(
    "query",
    [
        "timeout=10s",
        "timeout=3s",
        "timeout=",
        "timeout=10s&timeout=2s",
        "a=1&timeout=7s",
        "timeout=1%30s",
        "time%6Fut=4s",
        "timeout=5s;x=1",
        "timeout=+5s",
        "timeout=1234567s",
        "timeouts=4s",
        "notimeout=4s",
    ],
)
def test_the_timeout_is_read_as_the_query_parser_reads_it(query: str) -> None:
    assert timeout_parameter(query) == dict(parse_qsl(query)).get("timeout")


def test_a_workload_with_a_partial_template_without_a_spec_is_answered() -> None:
    """A partial template (a patch laid over an operator's template) may hold only metadata;
    an error answer would let the object in, the webhook failing open."""
    serving = {"annotations": {"together.ai/workload": "serving"}}
    pinned = {
        "metadata": serving,
        "spec": {"nodeSelector": {"together.ai/compute-class": "preemptible"}},
    }
    patches = [
        {"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": pod}}}]}}}}
        for pod in (pinned, {"metadata": serving})
    ]  # fmt: skip
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "tj", "namespace": "team-a"},
                "spec": {"runtimeRef": {"name": "torch"}, "runtimePatches": patches}}  # fmt: skip
    review = with_object(fixture("create-deployment-serve-validate"), trainjob)
    review["request"]["kind"] = {
        "group": "trainer.kubeflow.org",
        "version": "v1alpha1",
        "kind": "TrainJob",
    }
    review["request"]["resource"] = {
        "group": "trainer.kubeflow.org",
        "version": "v1alpha1",
        "resource": "trainjobs",
    }
    client = client_for(create_app(builtin_policy))
    response = review_of(client, "/validate", review)["response"]
    assert response["allowed"] is False
    assert "requires preemptible capacity" in response["status"]["message"]
    del patches[0]
    response = review_of(client, "/validate", review)["response"]
    assert response["allowed"] is True
