"""The Helm chart (charts/preemptguard): linted, schema-valid, and rendering the same objects as
the kustomize manifests, object by object.

What the comparison normalises, and nothing else:

- Labels the chart puts on every object's metadata: Helm's release labels ``helm.sh/chart``,
  ``app.kubernetes.io/managed-by`` and ``app.kubernetes.io/instance`` (kustomize has no release),
  and ``app.kubernetes.io/part-of`` / ``app.kubernetes.io/version`` where kustomize lacks them
  (its ``labels:`` transformer reaches only the base's objects, not those the cert-manager overlay
  or the observer component add). Each of the five is first checked on every chart object, and
  where kustomize has part-of or version the values must be equal.
- The ConfigMap and Secret name suffixes are NOT normalised: the chart computes kustomize's
  configMapGenerator/secretGenerator content hash itself, so names (and the Deployment's
  references to them) are compared exactly. Parsing the YAML drops comments and key order.

The Kubernetes schemas: every rendered object (cert-manager's CRDs excepted, as in
tests/test_manifests.py) is validated against the 1.30 and the newest (1.37) schema that
kubernetes-validate ships, with default and with non-default values. The end-to-end suite
installs the chart on a real 1.37 API server (tests/e2e/test_helm_install.py).
"""

from __future__ import annotations

import base64
import filecmp
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from harness.manifests import CERTIFICATE_KINDS, NAMESPACE, SERVICE, Tree, kustomize, prepare_tree

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "preemptguard"
# The PriorityClasses of fixed name that the default policy names (priorityClass.createPolicyClasses).
POLICY_CLASSES = {"preemptguard-batch", "preemptguard-standard"}
HELM_SCRIPT = REPO / "hack" / "helm.sh"
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
RELEASE = "preemptguard"
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"}
KUSTOMIZE_COMMON_LABELS = {"app.kubernetes.io/part-of", "app.kubernetes.io/version"}
POD_VALIDATION = "pods.validate.preemptguard.together.ai"

# Kustomizations written into the copied tree beside the shipped overlays: the fail-closed and
# observer components added as the README says.
EXTRA_OVERLAYS = {
    "cert-manager+fail-closed": ("cert-manager", "fail-closed"),
    "self-managed+fail-closed": ("self-managed", "fail-closed"),
    "cert-manager+observer": ("cert-manager", "observer"),
}


class HelmError(RuntimeError):
    pass


@cache
def helm() -> str:
    """A helm v4 binary (see hack/helm.sh); fails loudly when there is none."""
    proc = subprocess.run([str(HELM_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise HelmError(
            f"hack/helm.sh found no helm v4 (exit {proc.returncode}); install one or set HELM:\n"
            f"{proc.stderr.strip()}"
        )
    return proc.stdout.strip().splitlines()[-1]


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, check=False)


def self_managed_args(certs: Path) -> list[str]:
    """What a user passes after ``preemptguard certs ... --out certs``."""
    return [
        "--set",
        "certificates.mode=self-managed",
        "--set-file",
        f"certificates.selfManaged.tlsCrt={certs / 'tls.crt'}",
        "--set-file",
        f"certificates.selfManaged.tlsKey={certs / 'tls.key'}",
        "--set-file",
        f"certificates.selfManaged.caCrt={certs / 'ca.crt'}",
    ]


def template(*args: str, chart: Path = CHART) -> list[dict[str, Any]]:
    proc = run_helm("template", RELEASE, str(chart), *args)
    if proc.returncode != 0:
        raise HelmError(f"helm template {' '.join(args)} failed:\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def template_error(*args: str) -> str:
    proc = run_helm("template", RELEASE, str(CHART), *args)
    assert proc.returncode != 0, f"helm template {' '.join(args)} succeeded"
    return proc.stderr


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    out = {key(o): o for o in objects}
    assert len(out) == len(objects), "two objects with the same kind, namespace and name"
    return out


def normalised(chart_obj: dict[str, Any], kustomize_obj: dict[str, Any]) -> dict[str, Any]:
    """The chart's object less the labels that legitimately differ (see the module)."""
    labels = dict(chart_obj["metadata"]["labels"])
    expected = {
        "helm.sh/chart": "preemptguard-0.1.0",
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/part-of": "preemptguard",
        "app.kubernetes.io/version": "0.1.0",
    }
    assert {k: labels.get(k) for k in expected} == expected, key(chart_obj)
    theirs = kustomize_obj["metadata"].get("labels", {})
    for name in HELM_LABELS | (KUSTOMIZE_COMMON_LABELS - set(theirs)):
        del labels[name]
    out = {**chart_obj, "metadata": {**chart_obj["metadata"], "labels": labels}}
    if not labels and "labels" not in kustomize_obj["metadata"]:
        del out["metadata"]["labels"]
    return out


def assert_same_objects(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> None:
    ours, theirs = by_key(chart), by_key(kustomized)
    assert sorted(ours) == sorted(theirs)
    for k, obj in theirs.items():
        assert normalised(ours[k], obj) == obj, k


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """manifests/ copied with certificates issued for the self-managed overlay, plus overlays
    adding the components."""
    tree = prepare_tree(tmp_path_factory.mktemp("manifests"))
    for variant, (overlay, component) in EXTRA_OVERLAYS.items():
        folder = tree.root / "overlays" / variant
        folder.mkdir(exist_ok=True)
        (folder / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [f"../{overlay}"],
                    "components": [f"../../components/{component}"],
                }
            )
        )
    return tree


@pytest.fixture(scope="module")
def certs(tree: Tree) -> Path:
    return tree.root / "overlays/self-managed/certs"


def kustomize_build(tree: Tree, overlay: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [kustomize(), "build", str(tree.root / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


# (kustomize overlay, chart arguments beyond the certificates)
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "cert-manager": ("cert-manager", []),
    "self-managed": ("self-managed", []),
    "cert-manager+fail-closed": ("cert-manager+fail-closed", ["--set", "webhooks.failClosed=true"]),
    "self-managed+fail-closed": ("self-managed+fail-closed", ["--set", "webhooks.failClosed=true"]),
    "cert-manager+observer": ("cert-manager+observer", ["--set", "observer.enabled=true"]),
}


# What a cluster of Kubernetes 1.30 or later tells Helm it serves (`helm template` assumes
# none of it): the overlays install the admission policies there.
SERVES_VALIDATING_POLICIES = [
    "--api-versions",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
]


def chart_args(variant: str, certs: Path) -> list[str]:
    _, extra = VARIANTS[variant]
    certificates = self_managed_args(certs) if variant.startswith("self-managed") else []
    return [*certificates, *extra, *SERVES_VALIDATING_POLICIES]


@pytest.fixture(scope="module")
def rendered(
    tree: Tree, certs: Path
) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """variant -> (the chart's objects, kustomize's objects)."""
    return {
        variant: (template(*chart_args(variant, certs)), kustomize_build(tree, overlay))
        for variant, (overlay, _) in VARIANTS.items()
    }


# --- lint ----------------------------------------------------------------------------------


def test_helm_is_v4() -> None:
    proc = run_helm("version", "--short")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("v4."), proc.stdout


@pytest.mark.parametrize("variant", ["cert-manager", "self-managed+fail-closed"])
def test_helm_lint_passes_strict(variant: str, certs: Path) -> None:
    args = chart_args(variant, certs)[: -len(SERVES_VALIDATING_POLICIES)]  # not lint's to know
    proc = run_helm(
        "lint", "--strict", str(CHART), *args, "--set", "admissionPolicies.enabled=true"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_the_chart_policy_copy_matches_policies_default() -> None:
    shipped = sorted(
        p.name for p in (REPO / "policies/default").iterdir() if p.suffix in {".yaml", ".yml"}
    )
    copy = CHART / "files" / "policies"
    fix = "cp policies/default/*.yaml charts/preemptguard/files/policies/"
    assert sorted(p.name for p in copy.iterdir()) == shipped, fix
    _, mismatch, errors = filecmp.cmpfiles(REPO / "policies/default", copy, shipped, shallow=False)
    assert not mismatch, fix
    assert not errors, fix


# --- the same objects as kustomize ---------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_chart_renders_the_kustomize_objects(
    rendered: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]], variant: str
) -> None:
    chart, kustomized = rendered[variant]
    assert_same_objects(chart, kustomized)


def test_the_generated_names_are_kustomizes_content_hashes(
    rendered: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]],
) -> None:
    """Compared exactly, not modulo the suffix: the ConfigMap's and Secret's names change with
    their content, so a new policy or certificate is a rolling restart with either tool."""
    chart, kustomized = rendered["self-managed"]
    for kind, prefix in (("ConfigMap", "preemptguard-policies-"), ("Secret", "preemptguard-tls-")):
        ours = [o["metadata"]["name"] for o in chart if o["kind"] == kind]
        theirs = [o["metadata"]["name"] for o in kustomized if o["kind"] == kind]
        assert ours == theirs
        (name,) = ours
        assert name.startswith(prefix)
        assert len(name) == len(prefix) + 10


def test_a_policy_from_values_is_hashed_as_kustomize_hashes_it(tree: Tree, tmp_path: Path) -> None:
    policy = (
        (REPO / "policies/default/policy.yaml").read_text().replace("mode: enforce", "mode: warn")
    )
    assert "mode: warn" in policy
    (tree.root / "base/policies/policy.yaml").write_text(policy)
    try:
        kustomized = kustomize_build(tree, "cert-manager")
    finally:
        (tree.root / "base/policies/policy.yaml").write_bytes(
            (REPO / "policies/default/policy.yaml").read_bytes()
        )
    (tmp_path / "policy.yaml").write_text(policy)
    chart = template("--set-file", f"policy.content={tmp_path / 'policy.yaml'}")
    # The overlay's admission policies are the default policy's, whatever the base holds (its
    # comments say to export them again); the chart leaves them out with a policy of its own.
    kustomized = [o for o in kustomized if not _admission_kinds([o])]
    assert_same_objects(chart, kustomized)
    default = template()
    assert (
        find(chart, "ConfigMap")["metadata"]["name"]
        != find(default, "ConfigMap")["metadata"]["name"]
    )


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"{len(matches)} {kind} {name or ''}"
    return matches[0]


def hooks(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        h["name"]: h
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in find(objects, kind)["webhooks"]
    }


# --- Kubernetes schemas --------------------------------------------------------------------


NON_DEFAULT = [
    "--set",
    "name=pg",
    "--set",
    "namespace.name=pg-system",
    "--set",
    "replicas=3",
    "--set",
    "image.tag=0.2.0",
    "--set",
    "imagePullSecrets[0].name=registry",
    "--set",
    "resources.limits.memory=1Gi",
    "--set",
    "podDisruptionBudget.minAvailable=50%",
    "--set",
    "priorityClass.value=5000",
    "--set",
    "nodeSelector.pool=system",
    "--set",
    "tolerations[0].key=dedicated",
    "--set",
    "tolerations[0].operator=Exists",
    "--set",
    "podAnnotations.team=platform",
    "--set",
    "server.logLevel=debug",
    "--set",
    "server.extraArgs[0]=--workers=2",
    "--set",
    "webhooks.timeoutSeconds=10",
    "--set",
    "webhooks.failClosed=true",
    "--set",
    "webhooks.excludedNamespaces={kube-system,kube-node-lease,monitoring}",
    "--set",
    "webhooks.namespaceSelector.matchLabels.gpu=yes",
    "--set",
    "webhooks.namespaceSelector.matchExpressions[0].key=tier",
    "--set",
    "webhooks.namespaceSelector.matchExpressions[0].operator=Exists",
    "--set",
    "observer.enabled=true",
]


def schema_problems(objects: list[dict[str, Any]], version: str) -> list[str]:
    problems = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CERTIFICATE_KINDS:
            continue  # cert-manager's CRDs: checked in tests/test_manifests.py
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path) or "(root)"
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {where}: {exc.message}")
    return problems


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_rendered_object_matches_the_kubernetes_schema(
    rendered: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]],
    certs: Path,
    version: str,
) -> None:
    renders = {variant: chart for variant, (chart, _) in rendered.items()}
    renders["non-default"] = template(*NON_DEFAULT, *self_managed_args(certs))
    renders["existing-secret"] = template(
        "--set",
        "certificates.mode=self-managed",
        "--set",
        "certificates.selfManaged.existingSecret=my-tls",
        "--set-file",
        f"certificates.selfManaged.caCrt={certs / 'ca.crt'}",
    )
    problems = [
        f"{variant}: {problem}"
        for variant, objects in renders.items()
        for problem in schema_problems(objects, version)
    ]
    assert sum(len(objects) for objects in renders.values()) >= 80
    assert not problems, "\n".join(problems)


# --- values --------------------------------------------------------------------------------


def test_non_default_values_reach_the_objects(certs: Path) -> None:
    objects = template(*NON_DEFAULT, *self_managed_args(certs))
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"pg-system"}
    assert find(objects, "Namespace")["metadata"]["name"] == "pg-system"
    deployment = find(objects, "Deployment", "pg")
    assert deployment["spec"]["replicas"] == 3
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "ghcr.io/preemptguard/preemptguard:0.2.0"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert container["args"][-2:] == ["--log-level=debug", "--workers=2"]
    assert spec["priorityClassName"] == "pg"
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert deployment["spec"]["template"]["metadata"]["annotations"] == {"team": "platform"}
    assert find(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == "50%"
    (own,) = [
        o
        for o in objects
        if o["kind"] == "PriorityClass" and o["metadata"]["name"] not in POLICY_CLASSES
    ]
    assert own["value"] == 5000
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == find(objects, "Secret")["metadata"]["name"]
    assert (
        volumes["policies"]["configMap"]["name"] == find(objects, "ConfigMap")["metadata"]["name"]
    )
    ca = (certs / "ca.crt").read_bytes()
    for name, hook in hooks(objects).items():
        assert hook["timeoutSeconds"] == 10, name
        assert hook["clientConfig"]["service"]["name"] == "pg"
        assert hook["clientConfig"]["service"]["namespace"] == "pg-system"
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
        assert hook["namespaceSelector"] == {
            "matchLabels": {"gpu": "yes"},
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", "kube-node-lease", "monitoring", "pg-system"],
                },
                {"key": "tier", "operator": "Exists"},
            ],
        }, name
        assert hook["failurePolicy"] == ("Fail" if name == POD_VALIDATION else "Ignore"), name
    observer = find(objects, "Deployment", "pg-observer")
    assert (
        "--lease-name=pg-observer" in observer["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    lease_role = find(objects, "Role", "pg-observer-lease")
    assert lease_role["rules"][0]["resourceNames"] == ["pg-observer"]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole"} == {
        "pg",
        "pg-observer",
        "pg-audit",
        "pg-audit-reports",
        "pg-drill",
    }


def test_an_existing_secret_replaces_the_generated_one(certs: Path) -> None:
    objects = template(
        "--set",
        "certificates.mode=self-managed",
        "--set",
        "certificates.selfManaged.existingSecret=my-tls",
        "--set-file",
        f"certificates.selfManaged.caCrt={certs / 'ca.crt'}",
    )
    assert not [o for o in objects if o["kind"] == "Secret"]
    spec = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert {v["name"]: v for v in spec["volumes"]}["tls"]["secret"]["secretName"] == "my-tls"
    ca = (certs / "ca.crt").read_bytes()
    assert all(
        base64.b64decode(h["clientConfig"]["caBundle"]) == ca for h in hooks(objects).values()
    )


def _admission_kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects if o["kind"].endswith(("Policy", "PolicyBinding")))


VALIDATING = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
MUTATING = ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]


def test_the_admission_policies_follow_what_the_cluster_serves(tmp_path: Path) -> None:
    """Rendered where the cluster serves them ("auto"), or when asked; left out on an older
    cluster, when switched off, and with a policy of your own unless its export is given."""
    assert _admission_kinds(template(*SERVES_VALIDATING_POLICIES)) == VALIDATING
    assert _admission_kinds(template()) == []
    assert _admission_kinds(template("--set", "admissionPolicies.enabled=true")) == VALIDATING
    off = template(*SERVES_VALIDATING_POLICIES, "--set", "admissionPolicies.enabled=false")
    assert _admission_kinds(off) == []
    mutating = template(
        "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
        *SERVES_VALIDATING_POLICIES, "--set", "admissionPolicies.mutating=true",
    )  # fmt: skip
    assert _admission_kinds(mutating) == sorted(VALIDATING + MUTATING)
    mine = tmp_path / "policy.yaml"
    text = (REPO / "policies/default/policy.yaml").read_text()
    mine.write_text(text.replace("  name: default\n", "  name: mine\n"))
    custom = ["--set-file", f"policy.content={mine}", *SERVES_VALIDATING_POLICIES]
    assert _admission_kinds(template(*custom)) == []
    exported = subprocess.run(
        [sys.executable, "-m", "webhook", "export", "--policies", str(mine), "--only", "validating"],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    given = tmp_path / "mine-admission-policies.yaml"
    given.write_text(exported)
    objects = template(*custom, "--set-file", f"admissionPolicies.content={given}")
    assert _admission_kinds(objects) == VALIDATING
    names = {o["metadata"]["name"] for o in objects if o["kind"] in VALIDATING}
    assert names == {"preemptguard-mine"}


def test_the_network_policy_admits_only_the_peers_given() -> None:
    assert not [o for o in template() if o["kind"] == "NetworkPolicy"]
    message = template_error("--set", "networkPolicy.enabled=true")
    assert "networkPolicy.enabled needs networkPolicy.hookPeers" in message
    objects = template(
        "--set", "networkPolicy.enabled=true",
        "--set", "networkPolicy.hookPeers[0].ipBlock.cidr=10.0.0.0/24",
    )  # fmt: skip
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    hooks, metrics = policy["spec"]["ingress"]
    assert hooks == {
        "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        "ports": [{"port": "https", "protocol": "TCP"}],
    }
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    selector = metrics["from"][0]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": "monitoring"}
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "preemptguard",
        "app.kubernetes.io/component": "webhook",
    }


def test_the_alert_rules_are_the_components_under_the_releases_name() -> None:
    assert not [o for o in template() if o["kind"] == "PrometheusRule"]
    objects = template(
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.prometheusRule.labels.release=monitoring",
        "--set", "name=gpu-placement",
    )  # fmt: skip
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "monitoring"
    assert rule["metadata"]["name"] == "gpu-placement"
    component = REPO / "manifests" / "components" / "prometheus-rules" / "prometheus-rules.yaml"
    shipped = yaml.safe_load(component.read_text())["spec"]
    # The job a ServiceMonitor gives the webhook is its Service's name.
    service = find(objects, "Service")["metadata"]["name"]
    assert service == "gpu-placement"
    expected = yaml.safe_load(
        yaml.safe_dump(shipped).replace('job="preemptguard"', f'job="{service}"')
    )
    assert rule["spec"] == expected
    assert 'job="gpu-placement"' in yaml.safe_dump(rule["spec"])


def test_the_namespace_can_be_left_to_exist_already() -> None:
    objects = template("--set", "namespace.create=false", "--set", "priorityClass.create=false")
    assert not [o for o in objects if o["kind"] == "Namespace"]
    assert "priorityClassName" not in find(objects, "Deployment")["spec"]["template"]["spec"]
    # The policy's classes stay: the default policy's pods are refused without them.
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "PriorityClass"}
    assert names == POLICY_CLASSES


def test_the_policys_priority_classes_can_be_left_to_exist_already() -> None:
    """Their names are fixed (the policy names them): a second release, or a cluster with the
    kustomize manifests, has them already."""
    objects = template("--set", "priorityClass.createPolicyClasses=false")
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "PriorityClass"]
    assert names == [find(objects, "Deployment")["spec"]["template"]["spec"]["priorityClassName"]]
    assert not POLICY_CLASSES & set(names)


def test_the_policys_priority_classes_are_those_the_default_policy_names() -> None:
    policy = yaml.safe_load((REPO / "policies/default/policy.yaml").read_text())
    named = {c["priorityClassName"] for c in policy["spec"]["classes"] if "priorityClassName" in c}
    assert named == POLICY_CLASSES


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "replicas=0"], "/replicas"),
        (["--set", "replicas=two"], "/replicas"),
        (["--set", "certificates.mode=vault"], "/certificates/mode"),
        (["--set", "webhooks.timeoutSeconds=31"], "/webhooks/timeoutSeconds"),
        (["--set", "webhooks.failClosed=yes"], "/webhooks/failClosed"),
        (["--set", "webhooks.excludedNamespaces={Kube_System}"], "/webhooks/excludedNamespaces"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "replica=3"], "additional properties 'replica'"),
        (["--set", "webhooks.failurePolicy=Fail"], "additional properties 'failurePolicy'"),
        (
            ["--set", "certificates.selfManaged.tlsCrt=not-a-pem"],
            "/certificates/selfManaged/tlsCrt",
        ),
        (["--set", "server.extraArgs[0]=workers"], "/server/extraArgs"),
        (["--set", "name=Preempt_Guard"], "/name"),
    ],
)
def test_the_values_schema_refuses_bad_values(args: list[str], message: str) -> None:
    error = template_error(*args)
    assert "values don't meet the specifications of the schema" in error, error
    assert message in error, error


def test_self_managed_without_certificates_says_how_to_issue_them(certs: Path) -> None:
    error = template_error("--set", "certificates.mode=self-managed")
    assert "certificates.selfManaged.caCrt is required" in error
    assert "preemptguard certs --service preemptguard --namespace preemptguard-system" in error
    error = template_error(
        "--set",
        "certificates.mode=self-managed",
        "--set-file",
        f"certificates.selfManaged.caCrt={certs / 'ca.crt'}",
    )
    assert "tlsCrt and tlsKey are required" in error


def test_a_policy_that_is_not_a_placement_policy_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    error = template_error("--set-file", f"policy.content={tmp_path / 'bad.yaml'}")
    assert "policy: policy.yaml is not a PlacementPolicy" in error
    error = template_error("--set", "policy.path=files/nothing/*.yaml")
    assert "matches none" in error


def test_the_default_install_matches_the_readme(
    rendered: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]],
) -> None:
    """Default values are the cert-manager overlay, in preemptguard-system, failing open."""
    chart, _ = rendered["cert-manager"]
    assert find(chart, "Namespace")["metadata"]["name"] == NAMESPACE
    assert find(chart, "Service")["metadata"]["name"] == SERVICE
    assert {h["failurePolicy"] for h in hooks(chart).values()} == {"Ignore"}
    assert {o["kind"] for o in chart} >= {"Issuer", "Certificate"}
