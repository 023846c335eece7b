"""The install manifests, rendered by kustomize: schema-valid for current Kubernetes, and the
webhook configuration, Deployment and certificates shaped as the README promises.

The end-to-end suite additionally has a real API server accept them (tests/e2e/test_manifests_apply.py);
this file covers what that 1.20 server cannot judge (policy/v1, batch/v1 CronJob rules, newer
fields) by validating against the published schemas of current releases.
"""

from __future__ import annotations

import base64
import filecmp
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.e2e.render import (
    CERTIFICATE_KINDS,
    MANIFESTS,
    NAMESPACE,
    SERVICE,
    VARIANTS,
    Tree,
    find,
    prepare_tree,
    webhooks,
)
from webhook.loading.policies import load_policy

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[1]
# The oldest release the manifests target (PodLifecycleSleepAction is on by default from 1.30)
# and the newest schema the validator ships.
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
EXCLUDED_NAMESPACES = ["kube-system", "kube-node-lease", "preemptguard-system"]
# Kubernetes' own; the default policy adds the GPU operators' kinds (tests/test_workload_kinds.py).
WORKLOAD_RULES = {
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "replicationcontrollers"),
}
MUTATE, VALIDATE_PODS, VALIDATE_WORKLOADS = (
    "pods.mutate.preemptguard.together.ai",
    "pods.validate.preemptguard.together.ai",
    "workloads.validate.preemptguard.together.ai",
)
MUTATE_WORKLOADS = "workloads.mutate.preemptguard.together.ai"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return prepare_tree(tmp_path_factory.mktemp("manifests"))


@pytest.fixture(scope="module")
def rendered(tree: Tree) -> dict[str, list[dict[str, Any]]]:
    return {variant: tree.render(variant) for variant in VARIANTS}


def _objects(rendered: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(v, o) for v, objs in rendered.items() for o in objs]


def _pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", SERVICE)["spec"]["template"]["spec"]
    return spec


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any]
    (container,) = _pod_spec(objects)["containers"]
    return container


def _args(container: dict[str, Any]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in container["args"] if a.startswith("--"))


# --- schemas -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_matches_the_kubernetes_schema(
    rendered: dict[str, list[dict[str, Any]]], version: str
) -> None:
    problems = []
    checked = 0
    for variant, obj in _objects(rendered):
        if (obj["apiVersion"], obj["kind"]) in CERTIFICATE_KINDS:
            continue  # cert-manager's own CRDs; see test_cert_manager_objects_are_complete
        if obj["kind"].startswith("MutatingAdmissionPolicy") and version == "1.30":
            continue  # served from 1.36 (an opt-in component); tests/test_export.py checks it
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path) or "(root)"
            problems.append(
                f"{variant}: {obj['kind']}/{obj['metadata']['name']}: {where}: {exc.message}"
            )
        checked += 1
    assert checked >= 40
    assert not problems, "\n".join(problems)


def test_the_base_holds_every_kind_an_install_needs(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    kinds = sorted((o["apiVersion"], o["kind"]) for o in rendered["base"])
    assert kinds == sorted(
        [
            ("v1", "Namespace"),
            ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("v1", "ConfigMap"),
            ("v1", "Service"),
            ("scheduling.k8s.io/v1", "PriorityClass"),  # the webhook's own
            ("scheduling.k8s.io/v1", "PriorityClass"),  # preemptguard-batch, for the policy
            ("scheduling.k8s.io/v1", "PriorityClass"),  # preemptguard-standard, for the policy
            ("apps/v1", "Deployment"),
            ("policy/v1", "PodDisruptionBudget"),
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
        ]
    )
    namespaced = [
        o
        for o in rendered["base"]
        if o["kind"]
        not in {
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "PriorityClass",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        }
    ]
    assert {o["metadata"].get("namespace") for o in namespaced} == {NAMESPACE}


# --- webhook configurations ----------------------------------------------------------------


def test_mutation_is_of_pods_and_job_kinds_at_create_only(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    hooks = webhooks(rendered["base"])
    assert set(hooks) == {MUTATE, MUTATE_WORKLOADS, VALIDATE_PODS, VALIDATE_WORKLOADS}
    (rule,) = hooks[MUTATE]["rules"]
    assert rule == {
        "operations": ["CREATE"],
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": ["pods"],
        "scope": "Namespaced",
    }
    assert hooks[MUTATE]["reinvocationPolicy"] == "IfNeeded"
    assert hooks[MUTATE]["clientConfig"]["service"]["path"] == "/mutate"
    # Jobs, CronJobs and JobSets get their podFailurePolicy (docs/placement.md).
    jobs = hooks[MUTATE_WORKLOADS]
    assert {op for r in jobs["rules"] for op in r["operations"]} == {"CREATE"}
    assert {(g, res) for r in jobs["rules"] for g in r["apiGroups"] for res in r["resources"]} == {
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("jobset.x-k8s.io", "jobsets"),
    }
    assert jobs["reinvocationPolicy"] == "Never"
    assert jobs["clientConfig"]["service"]["path"] == "/mutate"
    assert jobs["namespaceSelector"] == hooks[MUTATE]["namespaceSelector"]


def test_validation_covers_pod_creates_and_workload_templates(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    hooks = webhooks(rendered["base"])
    (pods,) = hooks[VALIDATE_PODS]["rules"]
    assert (pods["operations"], pods["apiGroups"], pods["resources"]) == (
        ["CREATE", "UPDATE"],
        [""],
        ["pods"],
    )
    covered = set()
    for rule in hooks[VALIDATE_WORKLOADS]["rules"]:
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
        assert rule["apiVersions"] == ["*"]
        # Subresources (status, scale) are not templates and must not wait on the webhook.
        assert all("/" not in r for r in rule["resources"])
        covered |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    assert covered >= WORKLOAD_RULES
    assert ("apps", "daemonsets") not in covered
    for name in (VALIDATE_PODS, VALIDATE_WORKLOADS):
        assert hooks[name]["clientConfig"]["service"]["path"] == "/validate"
        assert "reinvocationPolicy" not in hooks[name]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_hook_is_side_effect_free_short_and_skips_system_namespaces(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    for name, hook in webhooks(rendered[variant]).items():
        assert hook["sideEffects"] == "None", name
        assert hook["admissionReviewVersions"] == ["v1"], name
        assert hook["matchPolicy"] == "Equivalent", name
        assert 1 <= hook["timeoutSeconds"] <= 5, name
        assert "objectSelector" not in hook, f"{name}: users could label pods out of the policy"
        assert hook["namespaceSelector"] == {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": EXCLUDED_NAMESPACES,
                }
            ]
        }, name
        service = hook["clientConfig"]["service"]
        assert (service["name"], service["namespace"], service["port"]) == (SERVICE, NAMESPACE, 443)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_pod_hooks_skip_genuine_daemonset_pods_by_the_policys_controllers(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path, variant: str
) -> None:
    """The matchCondition that keeps the API server from calling the pod hooks for a pod the
    engine leaves alone anyway (webhook/engine/trust.py): it names exactly the DaemonSet
    controllers the shipped policy trusts, on both pod hooks, and on nothing else. The end-to-end
    suite shows on 1.37 that it skips exactly the pods the engine skips as DaemonSet pods
    (tests/e2e/test_match_conditions.py)."""
    hooks = webhooks(rendered[variant])
    assert "matchConditions" not in hooks[VALIDATE_WORKLOADS]
    (condition,) = hooks[MUTATE]["matchConditions"]
    assert hooks[VALIDATE_PODS]["matchConditions"] == [condition]
    assert condition["name"] == "not-a-daemonset-pod-from-its-controller"
    expression = condition["expression"]
    listed = re.search(r"request\.userInfo\.username in (\[[^\]]*\])", expression)
    assert listed is not None, expression
    (policies,) = [
        o
        for o in rendered[variant]
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("preemptguard-policies-")
    ]
    for key, text in policies["data"].items():
        (tmp_path / key).write_text(text)
    trusted = load_policy(tmp_path).trusted.daemonset_controllers
    assert json.loads(listed.group(1)) == list(trusted), (
        "manifests/base/webhooks.yaml names other DaemonSet controllers than the policy's "
        "spec.trustedRequesters.daemonSetControllers: keep them in step"
    )
    # The requester is tested before anything the pod says of itself, and the controlling
    # owner is the first ownerReference with controller: true, as the engine reads it.
    assert expression.startswith(
        "!(has(request.userInfo.username) && request.userInfo.username in ["
    ), expression
    assert '[0].apiVersion == "apps/v1"' in expression
    assert '[0].kind == "DaemonSet"' in expression


def test_hooks_fail_open_unless_the_fail_closed_component_is_added(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    policies = {
        name: hook["failurePolicy"] for name, hook in webhooks(rendered["self-managed"]).items()
    }
    assert policies == dict.fromkeys(policies, "Ignore")
    strict = {
        name: hook["failurePolicy"]
        for name, hook in webhooks(rendered["self-managed+fail-closed"]).items()
    }
    assert strict == {
        MUTATE: "Ignore",
        MUTATE_WORKLOADS: "Ignore",
        VALIDATE_PODS: "Fail",
        VALIDATE_WORKLOADS: "Ignore",
    }


def test_before_1_30_pauses_with_the_images_sleep_and_ships_no_admission_policy(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """lifecycle.preStop.sleep and ValidatingAdmissionPolicy need 1.30: the component for older
    clusters keeps the pause with a command the image has, and fails pod validation closed."""
    objects = rendered["self-managed+before-1.30"]
    (container,) = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "5"]}}
    default = find(rendered["self-managed"], "Deployment")["spec"]["template"]["spec"]
    assert default["containers"][0]["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert not [o for o in objects if "AdmissionPolicy" in o["kind"]]
    assert webhooks(objects)[VALIDATE_PODS]["failurePolicy"] == "Fail"


def test_the_excluded_namespaces_agree_with_the_shipped_policy(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    cm = find(rendered["base"], "ConfigMap")
    for key, text in cm["data"].items():
        (tmp_path / key).write_text(text)
    policy = yaml.safe_load(cm["data"]["policy.yaml"])
    assert policy["spec"]["excludedNamespaces"] == EXCLUDED_NAMESPACES
    # The ConfigMap must be a policy the server loads.
    load_policy(tmp_path)
    namespace = find(rendered["base"], "Namespace")
    assert namespace["metadata"]["labels"]["kubernetes.io/metadata.name"] == NAMESPACE


def test_the_policy_copy_matches_policies_default() -> None:
    shipped = sorted(
        p.name for p in (REPO / "policies/default").iterdir() if p.suffix in {".yaml", ".yml"}
    )
    copied = sorted(p.name for p in (MANIFESTS / "base/policies").iterdir())
    assert copied == shipped, "run hack/sync-manifest-policies.sh"
    _, mismatch, errors = filecmp.cmpfiles(
        REPO / "policies/default", MANIFESTS / "base/policies", shipped, shallow=False
    )
    assert not mismatch, "run hack/sync-manifest-policies.sh"
    assert not errors
    kustomization = yaml.safe_load((MANIFESTS / "base/kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert sorted(generator["files"]) == [f"policies/{name}" for name in shipped]


# --- the server's Deployment ---------------------------------------------------------------


def test_the_deployment_runs_two_replicas_on_standard_nodes_spread_out(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    deployment = find(objects, "Deployment", SERVICE)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spec = _pod_spec(objects)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms
    assert all(
        {"key": "together.ai/compute-class", "operator": "NotIn", "values": ["preemptible"]}
        in t["matchExpressions"]
        for t in terms
    )
    assert not any(t.get("key") == "together.ai/compute-class" for t in spec.get("tolerations", []))
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (apart,) = spec["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert apart["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert apart["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    # A hostname spread constraint next to the zone one would be ignored on nodes without zones.
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["priorityClassName"] == "preemptguard"
    assert find(objects, "PriorityClass", "preemptguard")["globalDefault"] is False


def test_the_deployment_is_locked_down(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["base"]
    spec = _pod_spec(objects)
    container = _container(objects)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"cpu", "memory"}
    assert spec["serviceAccountName"] == find(objects, "ServiceAccount")["metadata"]["name"]


def test_probes_hit_healthz_and_readyz_over_https_on_the_webhook_port(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    container = _container(rendered["base"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(_args(container)["--port"]) == ports["https"]
    assert int(_args(container)["--metrics-port"]) == ports["metrics"]
    for probe, path in (
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS"), probe
    service = find(rendered["base"], "Service", SERVICE)
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert (by_name["https"]["port"], by_name["https"]["targetPort"]) == (443, "https")
    pod_labels = find(rendered["base"], "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_the_server_reads_the_mounted_policy_and_certificate(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["self-managed"]
    spec = _pod_spec(objects)
    container = _container(objects)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    args = _args(container)
    policies = volumes[mounts[args["--policies"]]]
    assert policies["configMap"]["name"] == find(objects, "ConfigMap")["metadata"]["name"]
    for flag, key in (("--cert-file", "tls.crt"), ("--key-file", "tls.key")):
        directory, filename = args[flag].rsplit("/", 1)
        assert filename == key
        secret = volumes[mounts[directory]]["secret"]["secretName"]
        assert key in find(objects, "Secret", secret)["data"]


def test_rbac_grants_reading_namespaces_and_priority_classes_and_nothing_else(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    role = find(objects, "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["scheduling.k8s.io"],
            "resources": ["priorityclasses"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    binding = find(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE, "namespace": NAMESPACE}
    ]
    assert not [o for o in objects if o["kind"] in {"Role", "RoleBinding"}]


# --- certificates --------------------------------------------------------------------------


def test_self_managed_overlay_puts_the_issued_ca_in_every_hook(
    rendered: dict[str, list[dict[str, Any]]], tree: Tree
) -> None:
    objects = rendered["self-managed"]
    for name, hook in webhooks(objects).items():
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == tree.ca_cert, name
    secret = find(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert _pod_spec(objects)["volumes"][0]["secret"]["secretName"] == secret["metadata"]["name"]


def test_self_rotating_overlay_serves_the_secret_the_webhook_fills_and_grants_only_that(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """No certificate in the manifests: an empty Secret, the server told to fill it and inject
    its CA, no volume for it, and roles limited to the one Secret, Lease and configurations."""
    objects = rendered["self-rotating"]
    for name, hook in webhooks(objects).items():
        assert "caBundle" not in hook["clientConfig"], name
    secret = find(objects, "Secret")
    assert secret["metadata"]["name"] == "preemptguard-tls"
    assert "data" not in secret
    assert "stringData" not in secret
    spec = _pod_spec(objects)
    (container,) = spec["containers"]
    args = container["args"]
    assert "--cert-secret=preemptguard-tls" in args
    assert not [a for a in args if a.startswith(("--cert-file", "--key-file"))]
    configurations = sorted(a.split("=", 1)[1] for a in args if a.startswith("--inject-ca-into"))
    names = {o["metadata"]["name"] for o in objects if o["kind"].endswith("WebhookConfiguration")}
    assert configurations == [
        f"{kind}/{name}" for kind in ("mutating", "validating") for name in names
    ]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in (
        container["env"]
    )
    assert "tls" not in {v["name"] for v in spec["volumes"]}
    assert "/tls" not in {m["mountPath"] for m in container["volumeMounts"]}

    role = find(objects, "Role", "preemptguard-certificates")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["preemptguard-tls"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["preemptguard-certificates"], "verbs": ["get", "update"]},
    ]  # fmt: skip
    cluster_role = find(objects, "ClusterRole", "preemptguard-certificates")
    (rule,) = cluster_role["rules"]
    assert rule["resourceNames"] == sorted(names)
    assert rule["verbs"] == ["get", "update"]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = find(objects, kind, "preemptguard-certificates")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE, "namespace": NAMESPACE}
        ]


def test_cert_manager_objects_are_complete(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """cert-manager's CRDs are not in the Kubernetes schemas: the fields cert-manager v1 requires,
    and the references between the objects, are checked here instead."""
    objects = rendered["cert-manager"]
    issuers = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Issuer"}
    certificates = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Certificate"}
    for obj in [*issuers.values(), *certificates.values()]:
        assert obj["apiVersion"] == "cert-manager.io/v1"
        assert obj["metadata"]["namespace"] == NAMESPACE
    for issuer in issuers.values():
        assert len(set(issuer["spec"]) & {"selfSigned", "ca", "acme", "vault", "venafi"}) == 1
    for cert in certificates.values():
        assert cert["spec"]["secretName"]
        assert cert["spec"]["issuerRef"]["kind"] == "Issuer"
        assert cert["spec"]["issuerRef"]["name"] in issuers
    ca_issuer = issuers[certificates["preemptguard-serving"]["spec"]["issuerRef"]["name"]]
    ca_cert = certificates["preemptguard-ca"]
    assert ca_cert["spec"]["isCA"] is True
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    serving = certificates["preemptguard-serving"]["spec"]
    assert f"{SERVICE}.{NAMESPACE}.svc" in serving["dnsNames"]
    volumes = {v["name"]: v for v in _pod_spec(objects)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == serving["secretName"]
    assert not [o for o in objects if o["kind"] == "Secret"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = find(objects, kind)
        assert (
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == f"{NAMESPACE}/preemptguard-serving"
        )
        assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])
