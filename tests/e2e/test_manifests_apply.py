"""The install manifests on a real API server: every object it serves passes a server-side dry
run, the shipped Deployment's pods land where the manifest says, and the shipped RBAC grants
what the server needs and nothing more.

Each test runs on the main release (1.37) and on the oldest supported (1.20). What 1.20 does not
serve (policy/v1 PodDisruptionBudget from 1.21, fields newer than 1.20) and what neither serves
(cert-manager's CRDs) is validated against current Kubernetes schemas in tests/test_manifests.py
instead; each test below says which objects that applies to.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from harness import cluster
from harness.cluster import PLACEMENT, STANDARD
from harness.kube import Kube, KubeError
from harness.manifests import NAMESPACE, SERVICE, VARIANTS, Tree, find
from harness.webhook import WebhookServer

pytestmark = pytest.mark.e2e

# Kinds a 1.20 API server does not serve (1.37 serves all but cert-manager's); tests/
# test_manifests.py covers them by schema.
UNSERVED_ON_1_20 = {
    ("policy/v1", "PodDisruptionBudget"),
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
}


@cache
def _server_minor(kube: Kube) -> int:
    return int(kube.get("/version")["minor"].rstrip("+"))


def _resources(kube: Kube, api_version: str) -> dict[str, dict[str, Any]]:
    """Kind -> discovery entry for one group/version; empty when the API server lacks it."""
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    try:
        found = kube.get(path)["resources"]
    except KubeError as exc:
        if exc.status == 404:
            return {}
        raise
    return {r["kind"]: r for r in found if "/" not in r["name"]}


def _object_path(kube: Kube, obj: dict[str, Any]) -> str | None:
    resource = _resources(kube, obj["apiVersion"]).get(obj["kind"])
    if resource is None:
        return None
    prefix = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    name = obj["metadata"]["name"]
    if resource["namespaced"]:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{resource['name']}/{name}"
    return f"{prefix}/{resource['name']}/{name}"


def _for_this_server(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` minus fields this API server predates (listed here, schema-checked elsewhere)."""
    obj = copy.deepcopy(obj)
    if obj["kind"] == "Deployment" and _server_minor(kube) < 29:
        # lifecycle.preStop.sleep (PodLifecycleSleepAction) arrived in 1.29. Older servers refuse
        # it: server-side apply as a field not in the schema, a plain create as a preStop
        # without a handler once the unknown field is dropped.
        for container in obj["spec"]["template"]["spec"]["containers"]:
            container.pop("lifecycle", None)
    return obj


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_served_manifest_passes_a_server_side_dry_run(
    kube: Kube, manifests: Tree, variant: str
) -> None:
    # The namespace must exist for namespaced dry runs; creating it is what an apply does first.
    kube.apply(
        f"/api/v1/namespaces/{NAMESPACE}",
        find(manifests.render("base"), "Namespace"),
        dry_run=False,
    )
    unserved, refused = set(), []
    for obj in manifests.render(variant):
        path = _object_path(kube, obj)
        if path is None:
            unserved.add((obj["apiVersion"], obj["kind"]))
            continue
        try:
            stored = kube.apply(path, _for_this_server(kube, obj), dry_run=True)
        except KubeError as exc:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
            continue
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
    assert not refused, "\n".join(refused)
    # Anything not served here must be one of the kinds the schema tests cover.
    assert unserved <= UNSERVED_ON_1_20
    if _server_minor(kube) == 20:
        expected = {
            k
            for k in UNSERVED_ON_1_20
            if k in {(o["apiVersion"], o["kind"]) for o in manifests.render(variant)}
        }
        assert unserved == expected


def test_the_shipped_webhook_configurations_are_accepted_with_their_service_reference(
    kube: Kube, manifests: Tree
) -> None:
    # The self-managed variant carries the real caBundle (base64 PEM, wrapped by kustomize).
    objects = manifests.render("self-managed")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = find(objects, kind)
        path = _object_path(kube, config)
        assert path is not None
        stored = kube.apply(path, config, dry_run=True)
        for hook, shipped in zip(stored["webhooks"], config["webhooks"], strict=True):
            assert hook["clientConfig"]["service"] == shipped["clientConfig"]["service"]
            assert hook["failurePolicy"] == shipped["failurePolicy"]
            assert hook["namespaceSelector"] == shipped["namespaceSelector"]


def test_the_shipped_deployment_runs_two_replicas_on_distinct_standard_nodes(
    kube: Kube, nodes: dict[str, str], manifests: Tree, webhook: WebhookServer
) -> None:
    """The PodDisruptionBudget (policy/v1) is left to the schema tests: 1.20 lacks policy/v1."""
    objects = manifests.render("self-managed")
    for kind in ("Namespace", "PriorityClass", "Deployment"):
        obj = _for_this_server(kube, find(objects, kind))
        path = _object_path(kube, obj)
        assert path is not None
        kube.apply(path, obj, dry_run=False)
    selector = "app.kubernetes.io/name=preemptguard,app.kubernetes.io/component=webhook"
    pods = cluster.wait_pods_scheduled(kube, NAMESPACE, selector, 2)
    placed = [p["spec"]["nodeName"] for p in pods]
    assert {nodes[n] for n in placed} == {STANDARD}
    assert len(set(placed)) == 2, f"both replicas on {placed[0]}"
    for pod in pods:
        assert pod["spec"]["priority"] == find(objects, "PriorityClass")["value"]
        # The webhook's own namespace is excluded by the shipped namespaceSelector (it matches
        # the label the Namespace manifest carries), so its pods are never sent to itself.
        assert PLACEMENT not in pod["metadata"].get("annotations", {})
    assert not webhook.admissions(NAMESPACE)


@pytest.mark.releases(
    "1.37",
    reason="the API server labels every namespace kubernetes.io/metadata.name from 1.21 on; "
    "1.20 does not, and the harness labels namespaces itself there",
)
def test_the_api_server_sets_the_namespace_label_the_shipped_selector_excludes_by(
    kube: Kube, webhook: WebhookServer
) -> None:
    name = cluster.unique("unlabelled")
    kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    assert kube.get(f"/api/v1/namespaces/{name}")["metadata"]["labels"][cluster.NAME_LABEL] == name
    # So the shipped exclusions hold as shipped: kube-system's pods never reach the webhook.
    answer = kube.create(
        "/api/v1/namespaces/kube-system/pods",
        cluster.pod("excluded", workload="interruptible"),
        dry_run=True,
    ).body
    assert PLACEMENT not in answer["metadata"]["annotations"]
    assert not webhook.admissions("kube-system")


def _can(kube: Kube, verb: str, resource: str, group: str = "") -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{SERVICE}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            "resourceAttributes": {"verb": verb, "resource": resource, "group": group},
        },
    }
    answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review).body
    return bool(answer["status"].get("allowed"))


def test_the_shipped_rbac_lets_the_server_read_namespaces_and_nothing_more(
    kube: Kube, webhook_server: WebhookServer
) -> None:
    # The server under test authenticates with this service account's token (see conftest), so
    # the namespace-default test also shows these rights are enough.
    for verb in ("get", "list", "watch"):
        assert _can(kube, verb, "namespaces"), verb
    for verb in ("create", "update", "patch", "delete"):
        assert not _can(kube, verb, "namespaces"), verb
    for verb, resource, group in (
        ("list", "pods", ""),
        ("get", "secrets", ""),
        ("get", "configmaps", ""),
        ("list", "deployments", "apps"),
        ("patch", "mutatingwebhookconfigurations", "admissionregistration.k8s.io"),
    ):
        assert not _can(kube, verb, resource, group), f"{verb} {resource}"
