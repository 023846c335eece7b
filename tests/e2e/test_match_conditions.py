"""The shipped webhooks' matchConditions on a real 1.37 API server: it does not call the pod
hooks for a genuine DaemonSet pod, which the engine would leave alone anyway, and calls them for
every other pod, including any that only claims a DaemonSet owner.

"Called" is read from the server's log: one record per review it answered (the metrics count
the same reviews). Which pods the engine leaves alone as a DaemonSet's is asked of the engine
itself (``webhook.engine.evaluate`` with the request's user), so the condition is held to the
rule of webhook/engine/trust.py, not to a copy of it.

1.20 predates matchConditions: there the harness registers the webhooks without them
(``harness.manifests.for_server``), the API server calls the hooks for DaemonSet pods too, and
the engine leaves them alone (tests/e2e/test_attacks.py shows both).
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from harness import cluster
from harness.cluster import CLASS_LABEL, DEFAULT_WORKLOAD, PLACEMENT, PREEMPTIBLE
from harness.kube import Kube, KubeError
from harness.manifests import find
from harness.processes import wait_until
from harness.webhook import WebhookServer
from tests import adversarial
from webhook.engine import evaluate
from webhook.engine.decision import Context, Requester
from webhook.engine.findings import Code
from webhook.engine.policy import Policy
from webhook.loading.policies import load_policy

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.releases("1.37", reason="matchConditions are served from 1.28 (GA in 1.30)"),
]

DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
CONTROLLER_MANAGER = "system:kube-controller-manager"
TENANT = "tenant"
MADE_UP_UID = "3f1d6a52-7c1e-4b5e-9a57-0d7c2b7e9d11"
TOLERATE_PREEMPTIBLE = {
    "key": CLASS_LABEL,
    "operator": "Equal",
    "value": PREEMPTIBLE,
    "effect": "NoSchedule",
}


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


@pytest.fixture(scope="module")
def policy(base_objects: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Policy:
    """The policy the server under test loads: the base's ConfigMap."""
    folder = tmp_path_factory.mktemp("policy")
    for key, text in find(base_objects, "ConfigMap")["data"].items():
        (folder / key).write_text(text)
    return load_policy(Path(folder))


def _pod_records(webhook: WebhookServer, namespace: str) -> list[dict[str, Any]]:
    return [r for r in webhook.admissions(namespace) if r["kind"] == "Pod"]


def _admissions_total(webhook: WebhookServer) -> float:
    """Every review the server has answered, by its metrics."""
    with requests.Session() as s:
        s.trust_env = False
        text = s.get(webhook.metrics_url, timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("preemptguard_admissions_total{")
    )


# --- a genuine DaemonSet, and a pod that copies its claim -----------------------------------


def test_a_genuine_daemonsets_pods_never_reach_the_webhook_and_a_copy_of_their_claim_does(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    # Pods here are interruptible by default: had the webhook judged the DaemonSet's pods, the
    # engine would have said why it left them alone; it is never asked.
    kube.merge_patch(
        f"/api/v1/namespaces/{namespace}",
        {"metadata": {"annotations": {DEFAULT_WORKLOAD: "interruptible"}}},
    )
    token = cluster.namespace_user(
        kube,
        namespace,
        TENANT,
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]}],
    )

    def classified() -> bool:
        body = kube.create(_pods(namespace), cluster.pod("probe"), dry_run=True).body
        annotations: dict[str, str] = body["metadata"].get("annotations", {})
        return annotations.get(PLACEMENT) == "interruptible"

    wait_until(classified, timeout=30, what="the namespace default to reach the webhook")

    before = _admissions_total(webhook)
    assert before > 0
    daemonset = cluster.daemonset(
        "node-agent", {"app": "node-agent"}, tolerations=[TOLERATE_PREEMPTIBLE]
    )
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", daemonset)
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=node-agent", len(nodes))
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
    for pod in pods:
        assert PLACEMENT not in pod["metadata"].get("annotations", {})
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["controller"]) == (
            "apps/v1",
            "DaemonSet",
            True,
        )
    # Its pods, created by the DaemonSet controller's own identity: not one review (the
    # DaemonSet itself is not among the workload hook's kinds). The probes above are all the
    # server saw here, and its metrics count nothing more anywhere.
    assert {r["name"] for r in _pod_records(webhook, namespace)} == {"probe"}
    probes = len(_pod_records(webhook, namespace))
    assert _admissions_total(webhook) == before, "the server answered reviews meanwhile"

    # The same claim, copied whole from a genuine pod (its real uid included), by a user: the
    # API server calls both hooks, and the engine places the pod, saying it does not trust it.
    claim = cluster.pod("copycat", labels={"app": "node-agent"})
    claim["metadata"]["ownerReferences"] = pods[0]["metadata"]["ownerReferences"]
    with kube.with_token(token) as tenant:
        answer = tenant.create(_pods(namespace), claim)
    assert answer.body["metadata"]["annotations"][PLACEMENT] == "interruptible"
    assert any("not trusted" in w for w in answer.warnings), answer.warnings
    records = [r for r in _pod_records(webhook, namespace) if r["name"] == "copycat"]
    assert {r["hook"] for r in records} == {"mutate", "validate"}
    assert {r["user"] for r in records} == {f"system:serviceaccount:{namespace}:{TENANT}"}
    assert len(_pod_records(webhook, namespace)) == probes + len(records)
    assert _admissions_total(webhook) == before + len(records)
    cluster.delete_pods(kube, namespace, ["copycat"])


# --- the condition against the engine, case by case -----------------------------------------


def _ref(api_version: str, kind: str, *, controller: bool | None) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "name": "owner",
        "uid": MADE_UP_UID,
    }
    if controller is not None:
        ref["controller"] = controller
    return ref


DS = ("apps/v1", "DaemonSet")
OWNERS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "apps/v1 DaemonSet controller": [_ref(*DS, controller=True)],
    "apps/v1 DaemonSet, controller unset": [_ref(*DS, controller=None)],
    "apps/v1 DaemonSet, controller false": [_ref(*DS, controller=False)],
    "extensions/v1beta1 DaemonSet controller": [
        _ref("extensions/v1beta1", "DaemonSet", controller=True)
    ],
    "apps/v1beta2 DaemonSet controller": [_ref("apps/v1beta2", "DaemonSet", controller=True)],
    "apps/v1 daemonset (lower case) controller": [_ref("apps/v1", "daemonset", controller=True)],
    "apps/v1 ReplicaSet controller": [_ref("apps/v1", "ReplicaSet", controller=True)],
    "a ReplicaSet, then the DaemonSet controller": [
        _ref("apps/v1", "ReplicaSet", controller=False),
        _ref(*DS, controller=True),
    ],
    # The API server refuses two controllers, but only after the mutating hooks: the mutating
    # hook sees them, and the engine reads the first.
    "two controllers, a ReplicaSet first": [
        _ref("apps/v1", "ReplicaSet", controller=True),
        _ref(*DS, controller=True),
    ],
    "two controllers, the DaemonSet first": [
        _ref(*DS, controller=True),
        _ref("apps/v1", "ReplicaSet", controller=True),
    ],
}
USERS = {
    "the DaemonSet controller": DAEMONSET_CONTROLLER,
    "the controller-manager": CONTROLLER_MANAGER,
    "a user": "alice",
    "a user named like the controller": DAEMONSET_CONTROLLER + "s",
}


def _engine_skips(policy: Policy, pod: dict[str, Any], namespace: str, user: str) -> bool:
    ctx = Context(
        namespace=namespace, requester=Requester(username=user, groups=("system:authenticated",))
    )
    decision = evaluate(pod, policy, ctx)
    return decision.skip is not None and decision.skip.code == Code.DAEMONSET


def test_the_api_server_skips_the_webhook_exactly_when_the_engine_skips_a_daemonset_pod(
    kube: Kube, webhook: WebhookServer, namespace: str, policy: Policy
) -> None:
    """Each owner list above sent by each user (impersonated; dry runs, which the hooks see as
    they see real creates): the hooks are called unless the engine would skip the pod as a
    DaemonSet's, and only then."""
    # Every impersonated user may do anything here (a RoleBinding), and nothing elsewhere.
    cluster.grant_admin(kube, namespace, USERS.values())

    def bound() -> bool:
        for user in USERS.values():
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "resourceAttributes": {
                        "verb": "create",
                        "resource": "pods",
                        "namespace": namespace,
                    },
                },
            }
            answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
            if not answer.body["status"].get("allowed"):
                return False
        return True

    wait_until(bound, timeout=30, what="the RoleBinding in force", interval=0.2)
    wrong = []
    skipped = called = 0
    for n, ((who, user), (owners, refs)) in enumerate(
        itertools.product(USERS.items(), OWNERS.items())
    ):
        name = f"case-{n}"
        pod = cluster.pod(name, workload="serving")
        if refs:
            pod["metadata"]["ownerReferences"] = refs
        expected_skip = _engine_skips(policy, pod, namespace, user)
        client = kube.with_token(kube.token)
        client.session.headers["Impersonate-User"] = user
        try:
            client.create(_pods(namespace), pod, dry_run=True)
        except KubeError as exc:
            # Only the API server's own refusal of two controllers, after the mutating hooks.
            if "Only one reference can have Controller set to true" not in exc.message:
                raise AssertionError(f"{who}, {owners}: {exc}") from exc
        finally:
            client.close()
        hooks = {r["hook"] for r in _pod_records(webhook, namespace) if r["name"] == name}
        if expected_skip:
            skipped += 1
            if hooks:
                wrong.append(f"{who}, {owners}: the engine skips it, yet {hooks} were called")
        else:
            called += 1
            if "mutate" not in hooks:
                wrong.append(f"{who}, {owners}: the engine judges it, but no hook was called")
    assert not wrong, "\n".join(wrong)
    # Both sides of the condition were exercised: the two trusted users with a genuine-looking
    # controller (the first three DaemonSet-first lists), everyone else with anything.
    assert skipped == 2 * 3, skipped
    assert called == len(USERS) * len(OWNERS) - skipped
    print(f"{skipped + called} cases: {skipped} not sent to the webhook, {called} sent")


def test_a_claim_buried_under_many_owner_references_still_reaches_the_webhook(
    kube: Kube, nodes: dict[str, str], webhook: WebhookServer, namespace: str
) -> None:
    """A user cannot make the condition fail or run out of CEL's budget (failurePolicy Ignore
    would then admit the pod unchecked): the requester is tested first, so for anyone but the
    DaemonSet controller the owner references are never read. A serving pod asking for
    preemptible nodes, with 10,000 owner references and the DaemonSet claim last, is refused."""
    token = cluster.namespace_user(
        kube,
        namespace,
        TENANT,
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]}],
    )
    pod = cluster.pod(
        "buried",
        workload="serving",
        nodeSelector={CLASS_LABEL: PREEMPTIBLE},
        tolerations=[TOLERATE_PREEMPTIBLE],
    )
    # Each with a uid of its own: owner references are a list keyed by uid.
    refs = [
        {
            **_ref("apps/v1", "ReplicaSet", controller=False),
            "name": f"rs-{i}",
            "uid": str(uuid.UUID(int=i)),
        }
        for i in range(10_000)
    ]
    pod["metadata"]["ownerReferences"] = [*refs, _ref(*DS, controller=True)]
    body = adversarial.encode(pod)
    with kube.with_token(token) as tenant, pytest.raises(KubeError) as refused:
        tenant.call("POST", _pods(namespace), data=body, timeout=60)
    assert cluster.refused(refused.value), refused.value
    assert "class serving must run on standard nodes" in refused.value.message
    assert {r["hook"] for r in _pod_records(webhook, namespace) if r["name"] == "buried"} == {
        "mutate"
    }
