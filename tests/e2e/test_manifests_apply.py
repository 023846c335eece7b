"""The install manifests on a real API server: every object passes a server-side dry run,
every install is applied for real, works and applies again unchanged, the shipped Deployment's
pods land where the manifest says, and the shipped RBAC grants what the server needs and
nothing more.

Each test runs on the main release (1.37) and on the oldest supported (1.20), but for the real
applies, which 1.37 alone serves whole. The ``manifests`` fixture renders for the API server
under test: on 1.20 without what it predates (the webhooks' matchConditions, the Deployment's
preStop sleep; see ``harness.manifests.for_server``), and 1.20 serves neither policy/v1
PodDisruptionBudgets nor admission policies. On 1.37 cert-manager's CRDs are installed from
upstream's schemas (hack/cert-manager-crds.sh), so that nothing is left unserved. What 1.20
cannot judge is validated against current Kubernetes schemas in tests/test_manifests.py; each
test below says which objects that applies to.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from harness import cluster
from harness.cluster import CLASS_LABEL, PLACEMENT, PREEMPTIBLE, STANDARD
from harness.kube import Kube, KubeError
from harness.manifests import (
    CERTIFICATE_KINDS,
    NAMESPACE,
    SERVICE,
    VARIANTS,
    Tree,
    cert_manager_crds,
    find,
    server_minor,
)
from harness.processes import wait_until
from harness.webhook import (
    CONFIG_KINDS,
    WebhookServer,
    config_path,
    local_webhook_configurations,
    register,
    unregister,
    wait_until_active,
)

pytestmark = pytest.mark.e2e

# Kinds a 1.20 API server does not serve (1.37 serves them all, cert-manager's once its CRDs are
# installed); tests/test_manifests.py covers them by schema.
UNSERVED_ON_1_20 = {
    ("policy/v1", "PodDisruptionBudget"),
    *CERTIFICATE_KINDS,
}
# What a user applies: each overlay, with the components as the docs add them, and the admission
# policies' components on their own. Not the base, which lacks its certificates.
COMPONENTS = ["admission-policies", "mutating-admission-policy"]
INSTALLS = [variant for variant in VARIANTS if variant != "base"] + COMPONENTS
# Kinds whose objects a controller writes to (status) after an apply: for them "unchanged" is
# judged on what an apply writes, not on the resourceVersion.
STATUS_WRITTEN = {
    "Deployment",
    "PodDisruptionBudget",
    "ValidatingAdmissionPolicy",  # the API server type-checks it and writes the result
    "MutatingAdmissionPolicy",
}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


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


def _key(obj: dict[str, Any]) -> str:
    namespace = obj["metadata"].get("namespace")
    where = f"{namespace}/" if namespace else ""
    return f"{obj['kind']}/{where}{obj['metadata']['name']}"


@pytest.fixture(scope="session")
def cert_manager(kube: Kube) -> list[dict[str, Any]]:
    """cert-manager's CRDs, from upstream's schemas, installed and served (1.37 only: they use
    CRD features 1.20 lacks); no cert-manager runs, so its objects are only stored."""
    crds = cert_manager_crds()
    for crd in crds:
        kube.apply(f"{CRDS}/{crd['metadata']['name']}", crd)

    def established() -> bool:
        for crd in crds:
            conditions = kube.get(f"{CRDS}/{crd['metadata']['name']}").get("status", {})
            if not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in conditions.get("conditions", [])
            ):
                return False
        served = _resources(kube, "cert-manager.io/v1")
        return {"Issuer", "Certificate"} <= set(served)

    wait_until(established, timeout=60, what="cert-manager's CRDs established and served")
    return crds


@pytest.mark.parametrize("variant", [*VARIANTS, *COMPONENTS])
def test_every_manifest_passes_a_server_side_dry_run(
    request: pytest.FixtureRequest, kube: Kube, manifests: Tree, variant: str
) -> None:
    minor = server_minor(kube)
    if minor > 20:
        request.getfixturevalue("cert_manager")
    # The namespace must exist for namespaced dry runs; creating it is what an apply does first.
    kube.apply(
        f"/api/v1/namespaces/{NAMESPACE}",
        find(manifests.render("base"), "Namespace"),
        dry_run=False,
    )
    unserved, refused = set(), []
    objects = manifests.render(variant)
    for obj in objects:
        path = _object_path(kube, obj)
        if path is None:
            unserved.add((obj["apiVersion"], obj["kind"]))
            continue
        try:
            stored = kube.apply(path, obj, dry_run=True)
        except KubeError as exc:
            refused.append(f"{_key(obj)}: {exc.message}")
            continue
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
    assert not refused, "\n".join(refused)
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    if minor == 20:
        # Anything not served there must be one of the kinds the schema tests cover.
        admission_policies = {k for k in kinds if k[1].endswith("AdmissionPolicy")} | {
            k for k in kinds if k[1].endswith("AdmissionPolicyBinding")
        }
        assert unserved == (UNSERVED_ON_1_20 | admission_policies) & kinds
    else:
        assert not unserved


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
    for kind, name in (
        ("Namespace", None),
        ("PriorityClass", "preemptguard"),
        ("Deployment", None),
    ):
        obj = find(objects, kind, name)
        path = _object_path(kube, obj)
        assert path is not None
        kube.apply(path, obj, dry_run=False)
    selector = "app.kubernetes.io/name=preemptguard,app.kubernetes.io/component=webhook"
    pods = cluster.wait_pods_scheduled(kube, NAMESPACE, selector, 2)
    placed = [p["spec"]["nodeName"] for p in pods]
    assert {nodes[n] for n in placed} == {STANDARD}
    assert len(set(placed)) == 2, f"both replicas on {placed[0]}"
    for pod in pods:
        assert pod["spec"]["priority"] == find(objects, "PriorityClass", "preemptguard")["value"]
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


# --- every install applied for real ---------------------------------------------------------


def _projected(stored: Any, applied: Any) -> Any:
    """``stored`` cut down to the fields ``applied`` sets: what an apply of ``applied`` writes
    (lists whole, with what the API server defaulted in their items)."""
    if isinstance(stored, dict) and isinstance(applied, dict):
        return {k: _projected(stored.get(k), v) for k, v in applied.items()}
    return stored


def _ours(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The managedFields entries of server-side applies."""
    return [
        {k: v for k, v in m.items() if k != "time"}
        for m in obj["metadata"].get("managedFields", [])
        if m["operation"] == "Apply"
    ]


def _unchanged(
    applied: dict[str, Any], first: dict[str, Any], second: dict[str, Any]
) -> str | None:
    """Why ``second`` (the answer to an apply of ``applied``) differs from ``first`` (the answer
    to the same apply before it), if it does."""
    if first["kind"] in STATUS_WRITTEN:
        # A controller writes to it in between (its status; a Deployment's revision annotation):
        # the resourceVersion moves. What the apply writes, who owns it and the generation
        # (the spec) must not.
        for what, before, after in (
            (
                "generation",
                first["metadata"].get("generation"),
                second["metadata"].get("generation"),
            ),
            ("applied fields", _projected(first, applied), _projected(second, applied)),
            ("managed fields", _ours(first), _ours(second)),
        ):
            if before != after:
                return f"{what}: {before} -> {after}"
        return None
    before, after = first["metadata"]["resourceVersion"], second["metadata"]["resourceVersion"]
    return None if before == after else f"resourceVersion {before} -> {after}"


def _no_admission_in_force(kube: Kube, namespace: str) -> None:
    """Until neither a webhook nor an admission policy places or refuses pods."""
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def nothing() -> bool:
        placed = kube.create(pods, cluster.pod("probe", workload="interruptible"), dry_run=True)
        if PLACEMENT in placed.body["metadata"].get("annotations", {}):
            return False
        try:
            kube.create(pods, _serving_on_preemptible("probe"), dry_run=True)
        except KubeError:
            return False
        return True

    wait_until(nothing, timeout=30, what="no admission in force", interval=0.2)


def _serving_on_preemptible(name: str) -> dict[str, Any]:
    return cluster.pod(name, workload="serving", nodeSelector={CLASS_LABEL: PREEMPTIBLE})


@pytest.fixture
def bare(kube: Kube, manifests: Tree, webhook: WebhookServer, namespace: str) -> Iterator[None]:
    """The session's webhook registration taken away, as on a cluster that never had
    preemptguard, and put back afterwards."""
    base = manifests.render("base")
    unregister(kube, local_webhook_configurations(base, webhook.url, webhook.ca_file.read_bytes()))
    _no_admission_in_force(kube, namespace)
    try:
        yield
    finally:
        register(kube, webhook, base)


@pytest.mark.releases(
    "1.37",
    reason="only 1.37 serves every object of every install (policy/v1, admission policies, "
    "cert-manager's CRDs); 1.20 has the dry run of what it serves",
)
@pytest.mark.parametrize("install", INSTALLS)
def test_each_install_applies_for_real_works_and_a_second_apply_changes_nothing(
    kube: Kube,
    nodes: dict[str, str],
    manifests: Tree,
    webhook: WebhookServer,
    cert_manager: list[dict[str, Any]],
    namespace: str,
    bare: None,
    install: str,
) -> None:
    """``kubectl apply --server-side -k`` of each install, for real: every object stored, each
    webhook configuration as shipped and then pointed at the local server (the Service has no
    endpoints: no kubelet runs its pods) placing and refusing pods; the admission policies
    placing and refusing them on their own. Removed afterwards, but for what the session
    already had (its Namespace, ServiceAccount, roles, Deployment)."""
    objects = manifests.render(install)
    # As kubectl orders an apply: namespaces first, webhook configurations last.
    order = {"Namespace": 0, **dict.fromkeys(CONFIG_KINDS, 2)}
    objects.sort(key=lambda o: order.get(o["kind"], 1))
    paths = {_key(o): _object_path(kube, o) for o in objects}
    assert all(paths.values()), [k for k, p in paths.items() if p is None]
    existed = {k for k, p in paths.items() if p is not None and kube.exists(p)}
    try:
        first: dict[str, dict[str, Any]] = {}
        refused = []
        for obj in objects:
            try:
                first[_key(obj)] = kube.apply(str(paths[_key(obj)]), obj)
            except KubeError as exc:
                refused.append(f"{_key(obj)}: {exc.message}")
        assert not refused, "\n".join(refused)
        for obj in objects:
            stored = kube.get(str(paths[_key(obj)]))
            assert (
                stored["metadata"].get("labels", {}).items()
                >= obj["metadata"].get("labels", {}).items()
            ), _key(obj)

        # The same apply again: the API server writes nothing.
        changed = []
        for obj in objects:
            second = kube.apply(str(paths[_key(obj)]), obj)
            why = _unchanged(obj, first[_key(obj)], second)
            if why is not None:
                changed.append(f"{_key(obj)}: {why}")
        assert not changed, "\n".join(changed)

        if install in COMPONENTS:
            _assert_the_policies_place_and_refuse(
                kube, nodes, namespace, placing=install == "mutating-admission-policy"
            )
        else:
            _assert_the_webhooks_place_and_refuse(kube, nodes, objects, webhook, namespace)
    finally:
        for obj in reversed(objects):
            if _key(obj) not in existed:
                kube.delete(str(paths[_key(obj)]), grace_seconds=None)
        _no_admission_in_force(kube, namespace)


def _assert_the_webhooks_place_and_refuse(
    kube: Kube,
    nodes: dict[str, str],
    objects: list[dict[str, Any]],
    webhook: WebhookServer,
    namespace: str,
) -> None:
    shipped = {o["kind"]: o for o in objects if o["kind"] in CONFIG_KINDS}
    assert set(shipped) == set(CONFIG_KINDS)
    for kind, config in shipped.items():
        stored = kube.get(config_path(config, item=True))
        for hook, ours in zip(stored["webhooks"], config["webhooks"], strict=True):
            assert hook["clientConfig"]["service"]["name"] == SERVICE
            if "caBundle" in ours["clientConfig"]:  # self-managed; cert-manager injects it
                assert base64.b64decode(hook["clientConfig"]["caBundle"]) == base64.b64decode(
                    ours["clientConfig"]["caBundle"]
                )
            for field in set(ours) - {"clientConfig"}:
                assert hook[field] == ours[field], f"{kind} {hook['name']}: {field}"

    # Pointed at the server running here (URL and CA instead of the Service), every other
    # field as shipped: pods are placed and refused through them.
    local = local_webhook_configurations(objects, webhook.url, webhook.ca_file.read_bytes())
    for config in local:
        kube.apply(config_path(config, item=True), config)
    wait_until_active(kube, namespace, webhook)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    placed = kube.create(pods, cluster.pod("sweep", workload="interruptible")).body
    assert placed["metadata"]["annotations"][PLACEMENT] == "interruptible"
    assert (
        nodes[cluster.wait_scheduled(kube, namespace, "sweep")["spec"]["nodeName"]] == PREEMPTIBLE
    )
    with pytest.raises(KubeError) as refusal:
        kube.create(pods, _serving_on_preemptible("api"))
    assert cluster.refused(refusal.value), refusal.value
    assert "class serving must run on standard nodes" in refusal.value.message
    cluster.delete_pods(kube, namespace, ["sweep"])


def _assert_the_policies_place_and_refuse(
    kube: Kube, nodes: dict[str, str], namespace: str, *, placing: bool
) -> None:
    """The mutating policy alone places an interruptible pod and refuses nothing; the
    validating one alone refuses a serving pod asking for preemptible nodes and places
    nothing."""
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def placed() -> bool:
        body = kube.create(pods, cluster.pod("probe", workload="interruptible"), dry_run=True).body
        return bool(body["metadata"].get("annotations", {}).get(PLACEMENT) == "interruptible")

    def refuses() -> KubeError | None:
        try:
            kube.create(pods, _serving_on_preemptible("api"), dry_run=True)
        except KubeError as exc:
            return exc
        return None

    if placing:
        # A new policy takes about a second to be enforced.
        wait_until(placed, timeout=30, what="the mutating admission policy in force", interval=0.2)
        sweep = kube.create(pods, cluster.pod("sweep", workload="interruptible")).body
        assert sweep["metadata"]["annotations"][PLACEMENT] == "interruptible"
        node = cluster.wait_scheduled(kube, namespace, "sweep")["spec"]["nodeName"]
        assert nodes[node] == PREEMPTIBLE
        assert refuses() is None
        cluster.delete_pods(kube, namespace, ["sweep"])
        return
    refusal = wait_until(refuses, timeout=30, what="the ValidatingAdmissionPolicy in force")
    assert "ValidatingAdmissionPolicy 'preemptguard-default'" in refusal.message, refusal
    assert "class serving must run on standard nodes" in refusal.message
    assert not placed()
