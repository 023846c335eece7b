"""No way around the placement (issue 7): a user who may only create pods and DaemonSets in one
namespace tries to get a serving pod onto a preemptible node past the shipped webhook
configurations (failurePolicy Ignore, timeoutSeconds 3) and the real ``preemptguard serve``.

Every trick sends a serving pod that asks for preemptible nodes (nodeSelector and a toleration
of the taint), so that whatever the webhook fails to check lands on a preemptible node. Each
must end refused by the webhook at create or, if created, not bound to a preemptible node. A
refusal by the webhook is also the proof that it answered in time: under failurePolicy Ignore
a late answer would have let the pod through.

Object fields are written by whoever creates the object, so the webhook decides who made a pod
from ``request.userInfo``: a genuine DaemonSet's pods, created by the DaemonSet controller's
own service account (the harness runs the controller-manager with
``--use-service-account-credentials``, as kubeadm does), are left alone; a pod that merely
claims a DaemonSet owner, or to be a mirror pod, is not.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from harness import cluster
from harness.cluster import CLASS_LABEL, DEFAULT_WORKLOAD, PLACEMENT, PREEMPTIBLE, WORKLOAD
from harness.kube import Kube, KubeError
from harness.processes import wait_until
from harness.webhook import WebhookServer
from tests import adversarial
from tests.adversarial import SLOW_PODS, encode

pytestmark = pytest.mark.e2e

USER = "tenant"
# Pods and DaemonSets in its own namespace, and nothing else anywhere.
USER_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "delete", "patch", "update"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["daemonsets"],
        "verbs": ["create", "get", "list", "delete"],
    },
]
# The shipped webhook timeout; every answer must come well inside it.
TIMEOUT_MS = 3000
# The API server refuses request bodies over 3 MiB (413) and JSON nested over 10,000 levels.
MAX_BODY = 3 * 2**20
MAX_NESTING = 10_000
MIRROR = "kubernetes.io/config.mirror"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
# How the webhook refuses a large review it has no time to read while others are being read.
BUSY = "is checking other large objects"
MADE_UP_UID = "3f1d6a52-7c1e-4b5e-9a57-0d7c2b7e9d11"
MIRROR_HASH = "3b1f0e6c1a8d4f5e9c7b2a1d0e9f8c7b"
TOLERATE_PREEMPTIBLE = {
    "key": CLASS_LABEL,
    "operator": "Equal",
    "value": PREEMPTIBLE,
    "effect": "NoSchedule",
}
# Slow pods of the serving class (tests/adversarial.py). Not here: many-preferences (a
# flexible pod, which may run on preemptible nodes) and deep-managed-fields (its nesting is
# past what the API server accepts; see the deep test, which nests as deep as accepted).
SLOW_SERVING = [
    name for name in SLOW_PODS if name not in {"many-preferences", "deep-managed-fields"}
]
# How large each is sent: as large as the API server takes, but for many-annotations. At 3 MiB
# (some 97,000 annotations) the API server itself spends 15 s and more on it before it calls any
# webhook, and gives up at its own 34 s request timeout when the machine is busy: a test of
# that measures the API server. At 1 MiB it takes the API server a second or two, and the
# webhook still reads every near miss of together.ai/workload.
SIZES = {"many-annotations": 2**20}
# Sixteen at once of those whose cost is the webhook's.
BURST = [name for name in SLOW_SERVING if name != "many-annotations"]


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def serving_on_preemptible(name: str, **metadata: Any) -> dict[str, Any]:
    """A serving pod that asks for preemptible nodes: what every trick tries to get through."""
    pod = cluster.pod(
        name,
        workload="serving",
        nodeSelector={CLASS_LABEL: PREEMPTIBLE},
        tolerations=[TOLERATE_PREEMPTIBLE],
    )
    for key, value in metadata.items():
        if isinstance(value, dict):
            pod["metadata"].setdefault(key, {}).update(value)
        else:
            pod["metadata"][key] = value
    return pod


@dataclass
class Outcome:
    """What came of one create: the webhook's refusal, or the pod the API server stored."""

    name: str
    refusal: KubeError | None = None
    stored: dict[str, Any] | None = None
    node: str | None = None

    def describe(self) -> str:
        if self.refusal is not None:
            return f"{self.name}: refused (HTTP {self.refusal.status}): {self.refusal.message}"
        return f"{self.name}: created, bound to {self.node or 'no node'}"


def attempt(user: Kube, namespace: str, pod: dict[str, Any] | bytes, name: str) -> Outcome:
    """Create ``pod`` as ``user``; anything but a refusal by an admission webhook or a stored
    pod (an API server error, a timeout) fails the test: it would prove nothing either way."""
    body = pod if isinstance(pod, bytes) else encode(pod)
    try:
        stored = user.call("POST", _pods(namespace), data=body, timeout=120).body
    except KubeError as exc:
        if not cluster.refused(exc):
            raise AssertionError(
                f"{name}: neither refused by the webhook nor created: {exc}"
            ) from exc
        return Outcome(name, refusal=exc)
    return Outcome(name, stored=stored)


def settle(kube: Kube, namespace: str, outcome: Outcome) -> Outcome:
    """For a created pod: wait until the scheduler binds it or gives up, then delete it."""
    if outcome.stored is None:
        return outcome
    path = f"{_pods(namespace)}/{outcome.name}"

    def decided() -> str | None:
        node = kube.get(path)["spec"].get("nodeName")
        if node:
            return str(node)
        return (
            ""
            if "FailedScheduling" in cluster.scheduling_events(kube, namespace, outcome.name)
            else None
        )

    outcome.node = (
        wait_until(decided, timeout=60, what=f"the scheduler to decide on {outcome.name}") or None
    )
    kube.delete(path, grace_seconds=0)
    return outcome


def assert_kept_off_preemptible(outcome: Outcome, nodes: dict[str, str]) -> None:
    if outcome.refusal is None:
        assert outcome.node is None or nodes[outcome.node] != PREEMPTIBLE, (
            f"FOUND A WAY AROUND THE PLACEMENT: {outcome.describe()}; stored as "
            f"{_summary(outcome.stored or {})}"
        )


def _summary(pod: dict[str, Any]) -> str:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    return (
        f"annotations={meta.get('annotations')}, nodeSelector={spec.get('nodeSelector')}, "
        f"affinity={'yes' if spec.get('affinity') else 'none'}"
    )


def assert_answered_in_time(
    webhook: WebhookServer, namespace: str, name: str
) -> list[dict[str, Any]]:
    """The server's own records of this pod's reviews: every one answered inside the timeout."""
    records = webhook.admissions(namespace, name)
    assert records, f"the webhook never saw {name}"
    slow = [r for r in records if r["duration_ms"] >= TIMEOUT_MS]
    assert not slow, f"answered after the {TIMEOUT_MS} ms timeout: {slow}"
    return records


@pytest.fixture
def user(kube: Kube, namespace: str, webhook: WebhookServer) -> Iterator[Kube]:
    """A client of the namespace user (a ServiceAccount bound by a Role in ``namespace``)."""
    token = cluster.namespace_user(kube, namespace, USER, USER_RULES)
    with kube.with_token(token) as client:
        yield client


def test_the_user_may_use_pods_and_daemonsets_in_its_namespace_and_nothing_else(
    user: Kube, namespace: str
) -> None:
    user.get(_pods(namespace))
    user.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets")
    for method, path in (
        ("GET", "/api/v1/nodes"),
        ("GET", "/api/v1/namespaces/default/pods"),
        ("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments"),
        ("GET", f"/api/v1/namespaces/{namespace}/secrets"),
        ("PATCH", f"/api/v1/namespaces/{namespace}"),
        ("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"),
    ):
        with pytest.raises(KubeError) as denied:
            user.call(
                method,
                path,
                {} if method == "PATCH" else None,
                content_type="application/merge-patch+json",
            )
        assert denied.value.status == 403, f"{method} {path}: {denied.value}"


# --- 1 and 2: claims written into the pod -----------------------------------------------------


def _controller(api_version: str, kind: str, name: str) -> dict[str, Any]:
    """An ownerReference naming a controller that does not exist (a made-up uid)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": MADE_UP_UID,
        "controller": True,
    }


CLAIMS: dict[str, dict[str, Any]] = {
    "claims-an-apps-v1-daemonset-owner": {
        "ownerReferences": [_controller("apps/v1", "DaemonSet", "node-agent")]
    },
    "claims-an-extensions-daemonset-owner": {
        "ownerReferences": [_controller("extensions/v1beta1", "DaemonSet", "node-agent")]
    },
    "claims-a-custom-daemonset-owner": {
        "ownerReferences": [_controller("agents.example.com/v1", "DaemonSet", "node-agent")]
    },
    "claims-to-be-a-mirror-pod": {"annotations": {MIRROR: MIRROR_HASH}},
    "claims-to-be-a-mirror-pod-owned-by-a-node": {
        "annotations": {MIRROR: MIRROR_HASH},
        "ownerReferences": [_controller("v1", "Node", "preemptible-1")],
    },
}


@pytest.mark.parametrize("trick", list(CLAIMS))
def test_a_pod_that_claims_to_be_left_alone_is_placed_like_any_other(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
    trick: str,
) -> None:
    pod = serving_on_preemptible(trick, **CLAIMS[trick])
    outcome = settle(kube, namespace, attempt(user, namespace, pod, trick))
    assert_kept_off_preemptible(outcome, nodes)
    assert outcome.refusal is not None, outcome.describe()
    assert "class serving must run on standard nodes" in outcome.refusal.message
    # The claim was read and not believed: the answer says so, naming who created the pod.
    assert any("not trusted" in w for w in outcome.refusal.warnings), outcome.refusal.warnings
    records = assert_answered_in_time(webhook, namespace, trick)
    assert {r["user"] for r in records} == {f"system:serviceaccount:{namespace}:{USER}"}


# --- 3 and 4: pods built to be slow, large or deep --------------------------------------------


def fitted(name: str, namespace: str) -> bytes:
    """The slow pod ``name`` of tests/adversarial.py in ``namespace``, at its size in ``SIZES``
    or as large as the API server takes (the builders can overshoot 3 MiB), with managed
    fields the API server keeps."""
    limit = SIZES.get(name, MAX_BODY)
    target = min(adversarial.TARGET, limit)
    while True:
        builder: Callable[..., dict[str, Any]] = SLOW_PODS[name]
        pod = builder(target)
        pod["metadata"].update(name=name, namespace=namespace)
        for entry in pod["metadata"].get("managedFields", []):
            # Without an apiVersion the API server drops an entry before admission.
            entry.setdefault("apiVersion", "v1")
        body = encode(pod)
        if len(body) <= limit - 4096:
            return body
        target = int(target * (limit - 8192) / len(body))


@pytest.mark.parametrize("slow", SLOW_SERVING)
def test_a_pod_built_to_be_slow_is_answered_in_time(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
    slow: str,
) -> None:
    body = fitted(slow, namespace)
    assert len(body) > 0.6 * SIZES.get(slow, MAX_BODY)
    outcome = settle(kube, namespace, attempt(user, namespace, body, slow))
    assert_kept_off_preemptible(outcome, nodes)
    assert_answered_in_time(webhook, namespace, slow)


def renamed(body: bytes, old: str, new: str) -> bytes:
    """An encoded pod called ``old`` renamed ``new`` (its name is the first one written)."""
    before = f'"name":"{old}"'.encode()
    assert before in body
    return body.replace(before, f'"name":"{new}"'.encode(), 1)


def nesting(value: Any) -> int:
    """How deeply ``value`` nests objects and arrays (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def with_deep_managed_fields(pod: dict[str, Any], levels: int) -> dict[str, Any]:
    """``pod`` with one managedFields entry whose fieldsV1 nests the whole document ``levels``
    deep, written as the API server keeps it (an entry without apiVersion is dropped)."""
    pod = copy.deepcopy(pod)
    entry: dict[str, Any] = {
        "manager": "kubectl",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }
    pod["metadata"]["managedFields"] = [entry]
    # pod, metadata, managedFields, the entry and fieldsV1: five levels before the chain.
    chain: dict[str, Any] = {}
    for _ in range(levels - 6):
        chain = {"f:x": chain}
    entry["fieldsV1"] = {"f:metadata": chain}
    assert nesting(pod) == levels
    return pod


def test_a_pod_with_managed_fields_as_deep_as_the_api_server_accepts_is_answered(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
) -> None:
    # One level more is refused by the API server's own decoder: the webhook never sees it.
    too_deep = with_deep_managed_fields(serving_on_preemptible("too-deep"), MAX_NESTING + 1)
    with pytest.raises(KubeError) as refused:
        user.call("POST", _pods(namespace), data=encode(too_deep))
    assert refused.value.status == 400
    assert "exceeded max depth" in refused.value.message

    # As deep as accepted: the fields reach the webhook whole (an allowed pod, dry run).
    allowed = with_deep_managed_fields(
        cluster.pod("deep-sweep", workload="interruptible"), MAX_NESTING
    )
    answer = user.call(
        "POST", _pods(namespace), data=encode(allowed), params={"dryRun": "All"}
    ).body
    assert answer["metadata"]["annotations"][PLACEMENT] == "interruptible"
    kept = [e for e in answer["metadata"]["managedFields"] if e["manager"] == "kubectl"]
    assert kept
    assert nesting(answer) == MAX_NESTING

    deep = with_deep_managed_fields(serving_on_preemptible("deep"), MAX_NESTING)
    outcome = settle(kube, namespace, attempt(user, namespace, deep, "deep"))
    assert_kept_off_preemptible(outcome, nodes)
    assert outcome.refusal is not None, outcome.describe()
    assert "class serving must run on standard nodes" in outcome.refusal.message
    assert_answered_in_time(webhook, namespace, "deep")


# --- 5: a burst of slow pods does not crowd out ordinary ones ---------------------------------


def test_an_ordinary_pod_is_placed_while_sixteen_slow_pods_arrive(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
) -> None:
    bodies = {name: fitted(name, namespace) for name in BURST}
    burst = [(f"burst-{i}", BURST[i % len(BURST)]) for i in range(16)]

    def send_slow(name: str, builder: str) -> Outcome:
        body = renamed(bodies[builder], builder, name)
        with kube.with_token(user.token) as own:
            return attempt(own, namespace, body, name)

    def send_ordinary_until_done(slow: list[Future[Outcome]]) -> list[Outcome]:
        # One after another for as long as the slow ones are in flight, as a controller's
        # creates would come in: each must be placed, none pushed past the timeout.
        sent: list[Outcome] = []
        with kube.with_token(user.token) as own:
            while not all(f.done() for f in slow) or not sent:
                pod = cluster.pod(f"ordinary-{len(sent)}", workload="interruptible")
                sent.append(attempt(own, namespace, pod, pod["metadata"]["name"]))
                time.sleep(0.2)
        return sent

    with ThreadPoolExecutor(max_workers=17) as pool:
        slow_futures = [pool.submit(send_slow, name, builder) for name, builder in burst]
        time.sleep(0.5)  # the slow ones on their way first
        ordinary = pool.submit(send_ordinary_until_done, slow_futures).result()
        outcomes = [f.result() for f in slow_futures]

    for sent in ordinary:
        assert sent.stored is not None, sent.describe()
        assert sent.stored["metadata"]["annotations"][PLACEMENT] == "interruptible"
        placed = cluster.wait_scheduled(kube, namespace, sent.name)
        assert nodes[placed["spec"]["nodeName"]] == PREEMPTIBLE
        assert_answered_in_time(webhook, namespace, sent.name)

    busy = 0
    for outcome in outcomes:
        settle(kube, namespace, outcome)
        assert_kept_off_preemptible(outcome, nodes)
        if outcome.refusal is not None and BUSY in outcome.refusal.message:
            busy += 1  # refused unread, so logged without a name: checked below
        else:
            assert_answered_in_time(webhook, namespace, outcome.name)
    unread = [r for r in webhook.all_admissions() if r["outcome"] == "busy"]
    assert len(unread) >= busy
    assert all(r["duration_ms"] < TIMEOUT_MS for r in unread), unread


# --- a genuine DaemonSet ----------------------------------------------------------------------


def test_a_genuine_daemonsets_pods_are_left_alone_even_where_the_namespace_classifies_pods(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
) -> None:
    kube.merge_patch(
        f"/api/v1/namespaces/{namespace}",
        {"metadata": {"annotations": {DEFAULT_WORKLOAD: "interruptible"}}},
    )

    # The namespace default is in force: an ordinary pod of the user's is made interruptible.
    def classified() -> bool:
        body = user.create(_pods(namespace), cluster.pod("probe"), dry_run=True).body
        annotations: dict[str, str] = body["metadata"].get("annotations", {})
        return annotations.get(PLACEMENT) == "interruptible"

    wait_until(classified, timeout=30, what="the namespace default to reach the webhook")

    # Tolerates the taint, so it belongs on every node, of both classes.
    daemonset = cluster.daemonset(
        "node-agent", {"app": "node-agent"}, tolerations=[TOLERATE_PREEMPTIBLE]
    )
    user.create(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", daemonset)
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=node-agent", len(nodes))
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
    for pod in pods:
        annotations = pod["metadata"].get("annotations", {})
        assert PLACEMENT not in annotations
        assert WORKLOAD not in annotations
        # Only the DaemonSet controller's own affinity: the pod's node, by name.
        own_node = {"key": "metadata.name", "operator": "In", "values": [pod["spec"]["nodeName"]]}
        assert pod["spec"]["affinity"] == {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [own_node]}]
                }
            }
        }
        assert TOLERATE_PREEMPTIBLE in pod["spec"]["tolerations"]
    pod_records = [r for r in webhook.admissions(namespace) if r["kind"] == "Pod"]
    from_controller = [r for r in pod_records if r["user"] == DAEMONSET_CONTROLLER]
    config = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/preemptguard"
    if kube.get(config)["webhooks"][0].get("matchConditions"):
        # 1.37: the shipped matchConditions keep the API server from calling the pod hooks for
        # them at all (tests/e2e/test_match_conditions.py).
        assert not from_controller, from_controller
        return
    # 1.20, registered without matchConditions: seen by the webhook (by name once named, after
    # the mutating hook), created by the DaemonSet controller's own identity, and left alone by
    # both hooks for it.
    for pod in pods:
        records = webhook.admissions(namespace, pod["metadata"]["name"])
        assert records, f"the webhook never saw {pod['metadata']['name']}"
    assert {r["hook"] for r in from_controller} == {"mutate", "validate"}
    assert len([r for r in from_controller if r["hook"] == "mutate"]) >= len(nodes)
    assert {r["outcome"] for r in from_controller} == {"skipped"}


# --- 5: classes given after creation ------------------------------------------------------------


RELABELLINGS: dict[str, dict[str, Any]] = {
    "annotated-serving": {"annotations": {WORKLOAD: "serving"}},
    "labelled-a-ray-head": {"labels": {"ray.io/node-type": "head"}},
}


@pytest.mark.parametrize("change", list(RELABELLINGS))
def test_a_pod_given_a_standard_class_after_creation_is_refused(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
    change: str,
) -> None:
    """An unclassified pod that asks for preemptible nodes is admitted as written; the update
    that would make it serving (or a Ray head, a coordinator) afterwards is refused, with its
    placement unchanged, as the webhook cannot place a pod after it is created."""
    pod = cluster.pod(
        change, nodeSelector={CLASS_LABEL: PREEMPTIBLE}, tolerations=[TOLERATE_PREEMPTIBLE]
    )
    path = f"{_pods(namespace)}/{change}"
    user.call("POST", _pods(namespace), pod)
    try:
        with pytest.raises(KubeError) as refused:
            user.merge_patch(path, {"metadata": RELABELLINGS[change]})
        assert cluster.refused(refused.value), refused.value
        assert "this update makes the pod" in refused.value.message
        assert "a pod's placement cannot change after it is created" in refused.value.message
        stored = kube.get(path)["metadata"]
        assert WORKLOAD not in stored.get("annotations", {})
        assert "ray.io/node-type" not in stored.get("labels", {})
        # An update that changes no class passes.
        user.merge_patch(path, {"metadata": {"labels": {"team": "research"}}})
        records = assert_answered_in_time(webhook, namespace, change)
        assert {r["operation"] for r in records if r["hook"] == "validate"} >= {"UPDATE"}
        # Deleted with years of grace, the pod runs on until then: still no class change.
        wait_until(lambda: kube.get(path)["spec"].get("nodeName"), timeout=60, what="binding")
        user.call("DELETE", path, {"gracePeriodSeconds": 315_360_000})
        assert kube.get(path)["metadata"].get("deletionTimestamp")
        with pytest.raises(KubeError) as terminating:
            user.merge_patch(path, {"metadata": RELABELLINGS[change]})
        assert "this update makes the pod" in terminating.value.message
    finally:
        kube.delete(path, grace_seconds=0)
