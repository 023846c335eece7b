"""Every review gets an answer, in time: deep, large and slow reviews, namespaces that cannot be
read, and bodies refused before they are read. Timings are in benchmarks/slow_review_bench.py."""

from __future__ import annotations

import base64
import copy
import io
import json
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from tests import adversarial
from tests.server.asgi import AppClient
from tests.server.helpers import ServerProcess, client_context, fixture
from webhook.admission import review
from webhook.admission.core import Hook
from webhook.admission.lookups import no_namespaces
from webhook.admission.lookups import offline_priority_classes as offline
from webhook.engine.decision import MAX_MESSAGE_CHARS, NamespaceMeta
from webhook.errors import NamespaceUnknown, OffloadFailed
from webhook.loading.policies import builtin_policy
from webhook.server import logs, offload
from webhook.server.app import create_app
from webhook.server.gate import LARGE_BODY_BYTES, MEDIUM_BODY_BYTES, LargeReviewGate
from webhook.server.offload import Offload

pytestmark = pytest.mark.slow

POLICY = builtin_policy()


@pytest.fixture(scope="module")
def offloaded() -> Iterator[Offload]:
    process = Offload()
    process.start()
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def quiet_logs() -> None:
    logs.configure("error", io.StringIO())


def app_client(offloaded: Offload, **options: Any) -> AppClient:
    return AppClient(create_app(lambda: POLICY, offloaded=offloaded, **options))


def post(client: AppClient, hook: str, body: bytes) -> tuple[int, Any]:
    reply = client.post(
        f"/{hook}?timeout=3s", data=body, headers={"Content-Type": "application/json"}
    )
    if reply.status_code != 200:
        return reply.status_code, reply.get_data(as_text=True)
    return 200, reply.get_json()


def interruptible(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["annotations"]["together.ai/workload"] = "interruptible"
    pod["spec"].pop("nodeSelector", None)
    return pod


@pytest.mark.parametrize("hook", ["mutate", "validate"])
def test_managed_fields_as_deep_as_the_api_server_takes_get_a_review(
    offloaded: Offload, hook: str
) -> None:
    client = app_client(offloaded)
    body = adversarial.encode(adversarial.review_of(adversarial.deep_managed_fields(depth=10_000)))
    status, doc = post(client, hook, body)
    assert status == 200, doc
    response = doc["response"]
    assert response["uid"] == "slow-0"
    assert not response["allowed"]
    assert "class serving must run on standard nodes" in response["status"]["message"]


def test_a_deep_interruptible_pod_is_placed_with_a_patch_that_leaves_managed_fields_alone(
    offloaded: Offload,
) -> None:
    client = app_client(offloaded)
    pod = interruptible(adversarial.deep_managed_fields(depth=10_000))
    status, doc = post(client, "mutate", adversarial.encode(adversarial.review_of(pod)))
    assert status == 200
    ops = json.loads(base64.b64decode(doc["response"]["patch"]))
    assert {op["path"] for op in ops} == {
        "/spec/affinity",
        "/metadata/annotations/together.ai~1placement",
        # Resolved in the parent process, passed to the one reading the large review.
        "/spec/priorityClassName",
        "/spec/priority",
        "/spec/preemptionPolicy",
    }
    assert not any("managedFields" in op["path"] for op in ops)


@pytest.mark.parametrize("name", ["many-expressions", "too-many-terms", "deep-and-dense"])
def test_large_reviews_are_answered_by_the_offload_process(offloaded: Offload, name: str) -> None:
    client = app_client(offloaded)
    body = adversarial.encode(adversarial.review_of(adversarial.SLOW_PODS[name](), uid=name))
    assert len(body) > LARGE_BODY_BYTES
    status, doc = post(client, "mutate", body)
    assert status == 200, doc
    response = doc["response"]
    assert (response["uid"], response["allowed"]) == (name, False)
    assert len(response["status"]["message"]) <= MAX_MESSAGE_CHARS


def test_a_large_review_in_a_namespace_the_server_looks_up_first(offloaded: Offload) -> None:
    seen: list[str] = []

    def lookup(namespace: str) -> NamespaceMeta:
        seen.append(namespace)
        return NamespaceMeta(annotations={"together.ai/default-workload": "interruptible"})

    client = app_client(offloaded, namespaces=lookup)
    pod = adversarial.many_tolerations()
    del pod["metadata"]["annotations"]["together.ai/workload"]
    del pod["spec"]["nodeSelector"]
    status, doc = post(client, "mutate", adversarial.encode(adversarial.review_of(pod)))
    assert status == 200
    assert doc["response"]["auditAnnotations"]["workload-class"] == "interruptible"
    assert seen == ["team-a"]


def test_a_large_review_that_cannot_start_in_time_is_refused_as_busy(offloaded: Offload) -> None:
    gate = LargeReviewGate(running=1, waiting=0)
    client = app_client(offloaded, gate=gate)
    body = adversarial.encode(adversarial.review_of(adversarial.many_tolerations(), uid="late"))
    assert gate.enter(len(body), _far_deadline())  # another large review holds the only slot
    try:
        status, doc = post(client, "validate", body)
    finally:
        gate.leave()
    assert status == 200
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    response = doc["response"]
    assert (response["uid"], response["allowed"], response["status"]["code"]) == (
        "late",
        False,
        429,
    )
    assert response["status"]["message"].startswith("preemptguard is checking other large objects")
    # Not written as an API server writes it (apiVersion first): no review to answer with,
    # and the body is not read to find one.
    doc = json.loads(body)
    reordered = json.dumps({"apiVersion": doc["apiVersion"], **doc}).encode()
    assert gate.enter(len(body), _far_deadline())
    try:
        status, text = post(client, "validate", reordered)
    finally:
        gate.leave()
    assert status == 503
    assert text.startswith("busy: ")


def _far_deadline() -> Any:
    import time

    from webhook.server.gate import Deadline

    return Deadline(time.monotonic() + 60)


def test_a_namespace_that_cannot_be_read_fails_the_review(offloaded: Offload) -> None:
    def lookup(namespace: str) -> NamespaceMeta:
        raise NamespaceUnknown(f"namespace {namespace} cannot be read: connection refused")

    client = app_client(offloaded, namespaces=lookup)
    small = fixture("create-pod-sweep-mutate")
    reply = client.post("/mutate", json=small)
    assert reply.status_code == 500
    assert "namespace team-a cannot be read: connection refused" in reply.get_data(as_text=True)
    large = adversarial.encode(adversarial.review_of(adversarial.many_tolerations()))
    status, text = post(client, "mutate", large)
    assert status == 500
    assert "namespace team-a cannot be read" in text


def test_the_namespace_is_read_only_when_the_engine_needs_it(offloaded: Offload) -> None:
    seen: list[str] = []

    def lookup(namespace: str) -> NamespaceMeta:
        seen.append(namespace)
        return NamespaceMeta()

    client = app_client(offloaded, namespaces=lookup)
    assert (
        client.post("/mutate", json=fixture("delete-pod-coordinator-0-mutate")).status_code == 200
    )
    # A pod update that changes nothing that classifies the pod (a finalizer, say).
    unchanged = copy.deepcopy(fixture("update-pod-coordinator-0-validate"))
    request = unchanged["request"]
    request["object"]["metadata"]["labels"] = request["oldObject"]["metadata"].get("labels")
    assert client.post("/validate", json=unchanged).status_code == 200
    excluded = copy.deepcopy(fixture("create-pod-sweep-mutate"))
    excluded["request"]["namespace"] = "kube-system"
    assert client.post("/mutate", json=excluded).status_code == 200
    assert seen == []
    assert client.post("/mutate", json=fixture("create-pod-sweep-mutate")).status_code == 200
    assert seen == ["team-a"]
    # One that relabels it: classified again, in its namespace.
    relabelled = fixture("update-pod-coordinator-0-validate")
    assert client.post("/validate", json=relabelled).status_code == 200
    assert seen == ["team-a", relabelled["request"]["namespace"]]


def test_a_refusal_before_the_body_is_read_closes_the_connection(server: ServerProcess) -> None:
    """Refused on its headers, the unread body must not be taken for the next request."""
    review = json.dumps(fixture("create-pod-sweep-mutate")).encode()
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    conn = client_context(server.ca).wrap_socket(raw, server_hostname="127.0.0.1")
    request = (
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(review), review)
    )
    conn.sendall(request)
    answer = _read_all(conn)  # until the server closes the connection
    conn.close()
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 400")
    assert b"connection: close" in head


def _read_all(conn: ssl.SSLSocket) -> bytes:
    data = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except (TimeoutError, ssl.SSLError, OSError):
            return data
        if not chunk:
            return data
        data += chunk


def test_a_child_still_starting_costs_a_review_no_more_than_its_deadline() -> None:
    """The child that checks large reviews takes a while to start (imports), and a task sent
    before it is ready would sit in the socket with no deadline: a review arriving then is
    refused as busy within its own time, and the next one is checked once the child is up."""
    body = json.dumps(fixture("create-pod-sweep-mutate")).encode()
    process = Offload()
    try:
        process.start()  # not waited for: its imports have only begun
        starting = process._child
        with pytest.raises(OffloadFailed, match="still starting"):
            process.run(Hook.MUTATE, body, POLICY, no_namespaces, offline(), timeout=0.001)
        assert process._child is starting  # left to start, not started over
        outcome = process.run(Hook.MUTATE, body, POLICY, no_namespaces, offline(), timeout=30)
        assert isinstance(outcome, offload.Answered)
        assert outcome.admission.review["response"]["allowed"] is True
    finally:
        process.stop()


@pytest.mark.parametrize(
    ("timeout", "padding"), [("1s", 2 * 2**20), ("3s", int(6.9 * 2**20))]
)  # fmt: skip
def test_a_review_too_large_for_any_deadline_is_refused_as_such_not_as_busy(
    offloaded: Offload, timeout: str, padding: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retrying cannot help a review that would not fit its deadline with nothing else to
    check: it is refused at once saying so, and never handed to the offload process."""
    review = fixture("create-pod-sweep-mutate")
    body = json.dumps(review).encode() + b" " * padding
    monkeypatch.setattr(offloaded, "run", lambda *args, **kwargs: pytest.fail("offloaded"))
    client = app_client(offloaded)
    reply = client.post(f"/mutate?timeout={timeout}", data=body, content_type="application/json")
    assert reply.status_code == 200
    response = reply.get_json()["response"]
    assert (response["uid"], response["allowed"]) == (review["request"]["uid"], False)
    assert response["status"]["code"] == 413
    assert "too large to check before the webhook times out" in response["status"]["message"]
    assert "retrying will not help" in response["status"]["message"]


def test_a_medium_review_over_its_share_of_any_deadline_is_refused_as_too_large(
    offloaded: Offload,
) -> None:
    """Reviews over 64 KiB may take half the time left: one whose cost is over half its whole
    deadline is turned away however idle the server is, so it is told so, not to retry."""
    pod = adversarial.deep_chains_under_the_cut(300 * 1024)
    body = adversarial.encode(adversarial.review_of(pod, uid="medium"))
    assert MEDIUM_BODY_BYTES < len(body) <= LARGE_BODY_BYTES
    client = app_client(offloaded)
    reply = client.post("/mutate?timeout=1s", data=body, content_type="application/json")
    response = reply.get_json()["response"]
    assert (response["uid"], response["allowed"]) == ("medium", False)
    assert response["status"]["code"] == 413
    assert "retrying will not help" in response["status"]["message"]
    reply = client.post("/mutate?timeout=3s", data=body, content_type="application/json")
    assert reply.get_json()["response"]["status"]["code"] == 403  # checked: the engine's


@pytest.mark.parametrize(
    ("written", "uid"), [('"705ab4f5-6393-11e8"', "705ab4f5-6393-11e8"), (r'"a\nb\u00e9"', "a\nbé")]
)  # fmt: skip
def test_a_refusal_unread_echoes_the_uid_as_the_request_has_it(written: str, uid: str) -> None:
    """Reviews refused without being read (too large, busy) still answer their uid, whatever
    JSON escapes it holds, so that the refusal is an answer and not an HTTP error."""
    body = (
        '{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":'
        + written
        + ',"namespace":"team-a","operation":"CREATE"}}'
    ).encode()
    env = review.envelope(body)
    assert env is not None
    assert (env.uid, env.namespace) == (uid, "team-a")
