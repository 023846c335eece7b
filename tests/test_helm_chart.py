"""The Helm chart (charts/preemptguard): linted, schema-valid, and rendering the same objects as
the kustomize manifests, object by object, when installed as the release ``preemptguard`` in
``preemptguard-system`` with ``namespace.create=true`` (the overlays ship the Namespace; the
chart leaves it to ``--create-namespace`` by default) and without the ``helm test`` pod.

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
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from harness.manifests import CERTIFICATE_KINDS, NAMESPACE, SERVICE, Tree, kustomize, prepare_tree
from webhook.server import certs as issuing

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "preemptguard"
# The PriorityClasses of fixed name that the default policy names (priorityClass.createPolicyClasses).
POLICY_CLASSES = {"preemptguard-batch", "preemptguard-standard"}
HELM_SCRIPT = REPO / "hack" / "helm.sh"
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
RELEASE = "preemptguard"
CHART_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
# The release and namespace the kustomize manifests amount to, with the Namespace they ship;
# the `helm test` pod is not among their objects.
AS_KUSTOMIZE = ["--namespace", NAMESPACE, "--set", "namespace.create=true", "--skip-tests"]
# Prometheus Operator kinds: no Kubernetes schema; their fields are checked by the tests below.
MONITORING_KINDS = {
    ("monitoring.coreos.com/v1", kind)
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")
}
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


def template(*args: str, chart: Path = CHART, release: str = RELEASE) -> list[dict[str, Any]]:
    proc = run_helm("template", release, str(chart), *args)
    if proc.returncode != 0:
        raise HelmError(f"helm template {' '.join(args)} failed:\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def template_error(*args: str, release: str = RELEASE) -> str:
    proc = run_helm("template", release, str(CHART), *args)
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
        "helm.sh/chart": f"preemptguard-{CHART_VERSION}",
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
CERT_MANAGER = ["--set", "certificates.mode=cert-manager"]
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "self-rotating": ("self-rotating", []),
    "cert-manager": ("cert-manager", CERT_MANAGER),
    "self-managed": ("self-managed", []),
    "cert-manager+fail-closed": (
        "cert-manager+fail-closed",
        [*CERT_MANAGER, "--set", "webhooks.failClosed=true"],
    ),
    "self-managed+fail-closed": ("self-managed+fail-closed", ["--set", "webhooks.failClosed=true"]),
    "cert-manager+observer": (
        "cert-manager+observer",
        [*CERT_MANAGER, "--set", "observer.enabled=true"],
    ),
}


# What a cluster of Kubernetes 1.30 or later tells Helm it serves (`helm template` assumes
# none of it): the overlays install the admission policies there.
SERVES_VALIDATING_POLICIES = [
    "--api-versions",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
]


def values_args(variant: str, certs: Path) -> list[str]:
    _, extra = VARIANTS[variant]
    certificates = self_managed_args(certs) if variant.startswith("self-managed") else []
    return [*certificates, *extra]


def chart_args(variant: str, certs: Path) -> list[str]:
    return [*values_args(variant, certs), *AS_KUSTOMIZE, *SERVES_VALIDATING_POLICIES]


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


# Every value the chart has beyond the overlays', set (tests/values/non-default below).
EVERYTHING = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "observer.enabled=true",
              "--set", "metrics.prometheusRule.enabled=true", "--set", "namespace.create=true",
              "--set", "networkPolicy.enabled=true",
              "--set", "networkPolicy.hookPeers[0].ipBlock.cidr=10.0.0.0/24"]  # fmt: skip


@pytest.mark.parametrize("variant", ["cert-manager", "self-managed+fail-closed", "everything"])
def test_helm_lint_passes_strict(variant: str, certs: Path, non_default_values: Path) -> None:
    if variant == "everything":
        args = ["-f", str(non_default_values), *EVERYTHING]
    else:
        args = values_args(variant, certs)  # what the cluster serves is not lint's to know
    proc = run_helm(
        "lint", "--strict", str(CHART), "--namespace", "gpu-system", *args,
        "--set", "admissionPolicies.enabled=true",
    )  # fmt: skip
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
        kustomized = kustomize_build(tree, "self-rotating")
    finally:
        (tree.root / "base/policies/policy.yaml").write_bytes(
            (REPO / "policies/default/policy.yaml").read_bytes()
        )
    (tmp_path / "policy.yaml").write_text(policy)
    chart = template("--set-file", f"policy.content={tmp_path / 'policy.yaml'}", *AS_KUSTOMIZE)
    # The overlay's admission policies are the default policy's, whatever the base holds (its
    # comments say to export them again); the chart leaves them out with a policy of its own.
    kustomized = [o for o in kustomized if not _admission_kinds([o])]
    assert_same_objects(chart, kustomized)
    default = template(*AS_KUSTOMIZE)
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


# Every value set to something else than its default (the namespace is the release's).
NON_DEFAULT_VALUES: dict[str, Any] = {
    "fullnameOverride": "pg",
    "replicas": 3,
    "image": {"tag": "0.2.0"},
    "imagePullSecrets": [{"name": "registry"}],
    "resources": {"limits": {"memory": "1Gi"}},
    "podDisruptionBudget": {"minAvailable": "50%"},
    "priorityClass": {"value": 5000},
    "nodeSelector": {"pool": "system"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]
                    },
                }
            ],
        },
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "proxy"}},
                    },
                }
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "noisy"}},
                }
            ]
        },
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
        },
        {
            "maxSkew": 2,
            "topologyKey": "rack",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"tier": "control"}},
        },
    ],
    "podLabels": {"team": "platform", "app.kubernetes.io/component": "not-the-selector"},
    "podAnnotations": {"team": "platform"},
    "podSecurityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    },
    "extraEnv": [
        {"name": "NO_PROXY", "value": ".svc"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ],
    "extraVolumes": [{"name": "corporate-ca", "configMap": {"name": "corporate-ca"}}],
    "extraVolumeMounts": [
        {"name": "corporate-ca", "mountPath": "/etc/corporate", "readOnly": True}
    ],
    "server": {"logLevel": "debug", "extraArgs": ["--workers=2"]},
    "webhooks": {
        "timeoutSeconds": 10,
        "failClosed": True,
        "excludedNamespaces": ["kube-system", "kube-node-lease", "monitoring"],
        "namespaceSelector": {
            "matchLabels": {"gpu": "yes"},
            "matchExpressions": [{"key": "tier", "operator": "Exists"}],
        },
    },
    "observer": {"enabled": True},
}


@pytest.fixture(scope="module")
def non_default_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("values") / "non-default.yaml"
    path.write_text(yaml.safe_dump(NON_DEFAULT_VALUES))
    return path


@pytest.fixture(scope="module")
def non_default(non_default_values: Path, certs: Path) -> list[dict[str, Any]]:
    """The chart with every value changed, in the namespace pg-system."""
    return template(
        "-f", str(non_default_values), "--namespace", "pg-system",
        "--set", "namespace.create=true", *self_managed_args(certs),
    )  # fmt: skip


def schema_problems(objects: list[dict[str, Any]], version: str) -> list[str]:
    problems = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CERTIFICATE_KINDS | MONITORING_KINDS:
            continue  # CRDs: cert-manager's are checked in tests/test_manifests.py
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
    non_default: list[dict[str, Any]],
    version: str,
) -> None:
    renders = {variant: chart for variant, (chart, _) in rendered.items()}
    renders["non-default"] = non_default
    renders["existing-secret"] = template(
        "--set",
        "certificates.mode=self-managed",
        "--set",
        "certificates.selfManaged.existingSecret=my-tls",
        "--set-file",
        f"certificates.selfManaged.caCrt={certs / 'ca.crt'}",
    )
    renders["digest"] = template("--set", f"image.digest=sha256:{'a' * 64}")
    problems = [
        f"{variant}: {problem}"
        for variant, objects in renders.items()
        for problem in schema_problems(objects, version)
    ]
    assert sum(len(objects) for objects in renders.values()) >= 100
    assert {o["kind"] for o in renders["non-default"]} >= {"Pod", "Namespace", "Deployment"}
    assert not problems, "\n".join(problems)


# --- values --------------------------------------------------------------------------------


def test_non_default_values_reach_the_objects(
    certs: Path, non_default: list[dict[str, Any]]
) -> None:
    objects = non_default
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
        "pg-capacity",
        "pg-drill",
    }


NOT_PREEMPTIBLE = {
    "key": "together.ai/compute-class",
    "operator": "NotIn",
    "values": ["preemptible"],
}
WEBHOOK_PODS = {"app.kubernetes.io/name": "preemptguard", "app.kubernetes.io/component": "webhook"}


def test_the_pod_values_are_added_to_the_shipped_pod_spec(
    non_default: list[dict[str, Any]],
) -> None:
    """affinity, topologySpreadConstraints and podLabels add to what the webhook's pods always
    have (standard nodes only, spread); the security contexts, env, volumes replace or add."""
    template_ = find(non_default, "Deployment", "pg")["spec"]["template"]
    spec = template_["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [NOT_PREEMPTIBLE, {"key": "pool", "operator": "In", "values": ["a"]}]},
        {
            "matchExpressions": [NOT_PREEMPTIBLE],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
        },
    ]
    user = NON_DEFAULT_VALUES["affinity"]
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    assert spec["affinity"]["nodeAffinity"][preferred] == user["nodeAffinity"][preferred]
    assert spec["affinity"]["podAffinity"] == user["podAffinity"]
    anti = spec["affinity"]["podAntiAffinity"]
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    assert anti[required] == user["podAntiAffinity"][required]
    assert anti[preferred] == [
        {
            "weight": 100,
            "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": WEBHOOK_PODS},
            },
        }
    ]
    zones, hosts, racks = spec["topologySpreadConstraints"]
    assert zones["topologyKey"] == "topology.kubernetes.io/zone"
    assert hosts == {
        **NON_DEFAULT_VALUES["topologySpreadConstraints"][0],
        "labelSelector": {"matchLabels": WEBHOOK_PODS},
    }
    assert racks == NON_DEFAULT_VALUES["topologySpreadConstraints"][1]
    # podLabels cannot take the pods out of their Deployment's and Service's selectors.
    assert template_["metadata"]["labels"] == {**WEBHOOK_PODS, "team": "platform"}
    assert spec["securityContext"] == NON_DEFAULT_VALUES["podSecurityContext"]
    (container,) = spec["containers"]
    assert container["securityContext"] == NON_DEFAULT_VALUES["securityContext"]
    assert container["env"][1:] == NON_DEFAULT_VALUES["extraEnv"]
    assert container["volumeMounts"][-1] == NON_DEFAULT_VALUES["extraVolumeMounts"][0]
    assert spec["volumes"][-1] == NON_DEFAULT_VALUES["extraVolumes"][0]
    assert [v["name"] for v in container["volumeMounts"][:3]] == ["tls", "policies", "tmp"]


def test_an_image_digest_pins_every_pod_of_the_chart() -> None:
    digest = f"sha256:{'0123456789abcdef' * 4}"
    objects = template(
        "--set", f"image.digest={digest}", "--set", "image.tag=0.2.0",
        "--set", "observer.enabled=true",
    )  # fmt: skip
    images = {
        o["metadata"]["name"]: [c["image"] for c in _pod_spec(o)["containers"]]
        for o in objects
        if o["kind"] in {"Deployment", "Pod"}
    }
    pinned = [f"ghcr.io/preemptguard/preemptguard@{digest}"]
    assert images == {
        "preemptguard": pinned,
        "preemptguard-observer": pinned,
        "preemptguard-test": pinned,
    }


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    return spec


def test_a_priority_class_name_replaces_the_charts_own() -> None:
    objects = template("--set", "priorityClassName=system-cluster-critical")
    spec = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    objects = template("--set", "priorityClass.create=false")
    assert "priorityClassName" not in find(objects, "Deployment")["spec"]["template"]["spec"]


# --- names and the namespace ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "args", "fullname"),
    [
        ("preemptguard", [], "preemptguard"),
        ("gpu", [], "gpu-preemptguard"),
        ("preemptguard-prod", [], "preemptguard-prod"),
        ("gpu", ["--set", "fullnameOverride=placement"], "placement"),
        ("gpu", ["--set", "nameOverride=placement"], "gpu-placement"),
        ("gpu", ["--set", f"fullnameOverride={'a' * 62}-b"], "a" * 62),
    ],
)
def test_objects_are_named_after_the_release(release: str, args: list[str], fullname: str) -> None:
    objects = template(*args, *CERT_MANAGER, "--set", "observer.enabled=true", release=release)
    for kind in ("Deployment", "Service", "ServiceAccount", "PodDisruptionBudget",
                 "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                 "ValidatingWebhookConfiguration", "Certificate"):  # fmt: skip
        names = {o["metadata"]["name"] for o in objects if o["kind"] == kind}
        assert fullname in names or f"{fullname}-serving" in names, (kind, names)
    assert find(objects, "ConfigMap")["metadata"]["name"].startswith(f"{fullname}-policies-")
    assert find(objects, "Pod")["metadata"]["name"] == f"{fullname}-test"
    (observer,) = [n for n in _names(objects, "Service") if n != fullname]
    assert len(observer) <= 63
    assert observer.endswith("-observer")
    name = "placement" if "nameOverride=placement" in args else "preemptguard"
    # The Service selects the Deployment's pods, by the chart's name.
    service = find(objects, "Service", fullname)
    pods = find(objects, "Deployment", fullname)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": "webhook",
    }
    assert service["spec"]["selector"].items() <= pods.items()
    for hook in hooks(objects).values():
        assert hook["clientConfig"]["service"]["name"] == fullname


def _names(objects: list[dict[str, Any]], kind: str) -> list[str]:
    return [o["metadata"]["name"] for o in objects if o["kind"] == kind]


def test_everything_names_the_releases_namespace(certs: Path) -> None:
    objects = template(
        "--namespace", "team-gpu", *CERT_MANAGER, "--set", "observer.enabled=true",
        "--set", "networkPolicy.enabled=true",
        "--set", "networkPolicy.hookPeers[0].ipBlock.cidr=10.0.0.0/24",
        *SERVES_VALIDATING_POLICIES,
    )  # fmt: skip
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"team-gpu"}
    assert {o["kind"] for o in namespaced} >= {"Deployment", "NetworkPolicy", "Pod", "Issuer"}
    assert not [o for o in objects if o["kind"] == "Namespace"]
    for hook in hooks(objects).values():
        assert hook["clientConfig"]["service"]["namespace"] == "team-gpu"
        assert "team-gpu" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = find(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "team-gpu/preemptguard-serving"
    serving = find(objects, "Certificate", "preemptguard-serving")["spec"]
    assert serving["dnsNames"] == [
        "preemptguard.team-gpu.svc",
        "preemptguard.team-gpu.svc.cluster.local",
    ]
    subjects = [
        s
        for o in objects
        if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}
        for s in o["subjects"]
    ]
    assert len(subjects) == 5
    assert {s["namespace"] for s in subjects} == {"team-gpu"}
    policy = yaml.safe_load(find(objects, "ConfigMap")["data"]["policy.yaml"])["spec"]
    assert policy["excludedNamespaces"] == ["kube-system", "kube-node-lease", "team-gpu"]
    assert policy["reservedPriorityClasses"] == [
        {"name": "preemptguard", "namespaces": ["team-gpu"]}
    ]
    binding = find(objects, "ValidatingAdmissionPolicyBinding")["spec"]["matchResources"]
    assert binding["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system",
        "kube-node-lease",
        "team-gpu",
    ]
    assert "preemptguard-system" not in yaml.safe_dump_all(objects)
    error = template_error("--namespace", "team-gpu", "--set", "certificates.mode=self-managed")
    assert "preemptguard certs --service preemptguard --namespace team-gpu" in error


@pytest.mark.parametrize("mutating", [False, True])
def test_the_charts_policy_and_its_admission_policies_are_exported_for_the_release(
    tmp_path: Path, mutating: bool
) -> None:
    """The chart's copy of the default policy names the release's namespace and PriorityClass,
    and its admission policies are what `preemptguard export` makes of that policy."""
    args = ["--namespace", "gpu-system", *SERVES_VALIDATING_POLICIES]
    if mutating:
        args += [
            "--set", "admissionPolicies.mutating=true",
            "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
        ]  # fmt: skip
    objects = template(*args, release="gpu")
    text = find(objects, "ConfigMap")["data"]["policy.yaml"]
    policy = yaml.safe_load(text)["spec"]
    assert policy["reservedPriorityClasses"] == [
        {"name": "gpu-preemptguard", "namespaces": ["gpu-system"]}
    ]
    shipped = (CHART / "files/policies/policy.yaml").read_text()
    assert text == shipped.replace("preemptguard-system", "gpu-system").replace(
        "    - name: preemptguard\n", "    - name: gpu-preemptguard\n"
    )
    (tmp_path / "policy.yaml").write_text(text)
    exported: list[dict[str, Any]] = []
    for only in ("validating", "mutating") if mutating else ("validating",):
        out = subprocess.run(
            [sys.executable, "-m", "webhook", "export", "--policies", str(tmp_path),
             "--only", only, "-o", "yaml"],
            capture_output=True, text=True, check=True, cwd=REPO,
        ).stdout  # fmt: skip
        exported += [o for o in yaml.safe_load_all(out) if o]
    ours = [o for o in objects if _admission_kinds([o])]
    assert len(ours) == len(exported) == (4 if mutating else 2)
    for obj in exported:
        (mine,) = [o for o in ours if key(o) == key(obj)]
        labels = {
            k: v for k, v in mine["metadata"]["labels"].items() if k in obj["metadata"]["labels"]
        }
        assert {**mine, "metadata": {**mine["metadata"], "labels": labels}} == obj, key(obj)


def test_the_namespace_is_rendered_only_when_asked() -> None:
    assert not [o for o in template("--namespace", "gpu") if o["kind"] == "Namespace"]
    objects = template("--namespace", "gpu", "--set", "namespace.create=true")
    namespace = find(objects, "Namespace")["metadata"]
    assert namespace["name"] == "gpu"
    assert {
        "kubernetes.io/metadata.name": "gpu",
        "pod-security.kubernetes.io/enforce": "restricted",
    }.items() <= namespace["labels"].items()


def test_without_the_namespace_the_chart_renders_the_other_kustomize_objects(
    tree: Tree,
) -> None:
    """The default: the same objects as the overlay, but the Namespace, which `helm install
    --create-namespace` makes and `helm uninstall` leaves."""
    chart = template("--namespace", NAMESPACE, "--skip-tests", *SERVES_VALIDATING_POLICIES)
    kustomized = [o for o in kustomize_build(tree, "self-rotating") if o["kind"] != "Namespace"]
    assert_same_objects(chart, kustomized)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "name=pg"],
            "name was removed: objects are named after the release (here preemptguard); set fullnameOverride=pg",
        ),
        (
            ["--set", "namespace.name=pg-system"],
            "namespace.name was removed: every object goes into the release's namespace (default); install with `helm install --namespace pg-system --create-namespace`",
        ),
    ],
)
def test_the_removed_values_say_what_to_set_instead(args: list[str], message: str) -> None:
    assert message in template_error(*args)


def test_the_removed_values_are_accepted_where_they_say_what_the_chart_does() -> None:
    """A values file written for chart 0.1, installed as its objects were named."""
    objects = template(
        "--namespace", NAMESPACE, "--set", f"name={SERVICE}", "--set", f"namespace.name={NAMESPACE}",
    )  # fmt: skip
    service = find(objects, "Service")["metadata"]
    assert (service["name"], service["namespace"]) == (SERVICE, NAMESPACE)


# --- monitoring ----------------------------------------------------------------------------


def _metrics_ports(objects: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """The (name, number) of every Service and container port named metrics."""
    ports = {
        (p["name"], p["port"])
        for o in objects
        if o["kind"] == "Service"
        for p in o["spec"]["ports"]
        if p["name"] == "metrics"
    }
    ports |= {
        (p["name"], p["containerPort"])
        for o in objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
        for p in c["ports"]
        if p["name"] == "metrics"
    }
    return ports


def _plain_http_metrics_port(objects: list[dict[str, Any]]) -> int:
    """The port `serve` and `observe` give /metrics (plain HTTP), from their arguments."""
    numbers = set()
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        (arg,) = [a for a in container["args"] if a.startswith("--metrics-port=")]
        numbers.add(int(arg.split("=", 1)[1]))
        # The hooks' port is the TLS one; the metrics port is another.
        assert "--port=9090" not in container["args"]
    (number,) = numbers
    return number


def test_the_service_monitor_scrapes_the_webhook_and_the_observer_over_plain_http() -> None:
    assert not [o for o in template() if o["kind"].endswith("Monitor")]
    objects = template(
        "--namespace", "gpu-system", "--set", "observer.enabled=true",
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
        "--set", "metrics.serviceMonitor.interval=15s",
        "--set", "metrics.serviceMonitor.scrapeTimeout=5s",
        release="gpu",
    )  # fmt: skip
    monitor = find(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == "gpu-preemptguard"
    assert monitor["metadata"]["namespace"] == "gpu-system"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": ["gpu-system"]}
    assert spec["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "15s",
         "scrapeTimeout": "5s"}
    ]  # fmt: skip
    selected = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Service"
        and spec["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()
    ]
    # Its jobs are the Services' names: the alert rules' job="gpu-preemptguard".
    assert sorted(selected) == ["gpu-preemptguard", "gpu-preemptguard-observer"]
    assert _metrics_ports(objects) == {("metrics", _plain_http_metrics_port(objects))}
    other = template("--set", "metrics.serviceMonitor.enabled=true", release="other")
    assert (
        find(other, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
        != (spec["selector"]["matchLabels"])
    )


def test_the_pod_monitor_scrapes_the_pods_as_the_same_jobs() -> None:
    objects = template(
        "--namespace", "gpu-system", "--set", "observer.enabled=true",
        "--set", "metrics.podMonitor.enabled=true",
        "--set", "metrics.podMonitor.labels.release=kube-prometheus-stack",
        "--set", "metrics.podMonitor.interval=",
        release="gpu",
    )  # fmt: skip
    monitor = find(objects, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": ["gpu-system"]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert {k: v for k, v in endpoint.items() if k != "relabelings"} == {
        "port": "metrics", "path": "/metrics", "scheme": "http", "scrapeTimeout": "10s",
    }  # fmt: skip
    jobs = {
        r["regex"]: r["replacement"]
        for r in endpoint["relabelings"]
        if r["targetLabel"] == "job"
        and r["sourceLabels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_component"]
    }
    assert jobs == {"webhook": "gpu-preemptguard", "observer": "gpu-preemptguard-observer"}
    selector = spec["selector"]
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector["matchLabels"].items() <= labels.items()
        (expression,) = selector["matchExpressions"]
        assert labels[expression["key"]] in expression["values"]
        assert jobs[labels["app.kubernetes.io/component"]] in _names(objects, "Service")
    error = template_error(
        "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"
    )  # fmt: skip
    assert "would scrape every target twice" in error


# --- helm test -----------------------------------------------------------------------------


def _test_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    return pod


def _test_env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_the_test_pod_asks_the_service_as_the_api_server_does(certs: Path) -> None:
    objects = template("--namespace", "gpu-system", *CERT_MANAGER, release="gpu")
    pod = _test_pod(objects)
    assert pod["metadata"]["annotations"] == {
        "helm.sh/hook": "test",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
    }
    assert pod["metadata"]["namespace"] == "gpu-system"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    script = (CHART / "files/helm-test/answers.py").read_text()
    assert container["command"] == ["python3", "-c", script]
    deployment = find(objects, "Deployment")["spec"]["template"]["spec"]
    (server,) = deployment["containers"]
    assert container["image"] == server["image"]
    assert container["securityContext"] == server["securityContext"]
    assert spec["securityContext"] == deployment["securityContext"]
    # The hook the API server calls: the Service, its port and path, as the configurations say.
    mutating = find(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    service = mutating["clientConfig"]["service"]
    url = f"https://{service['name']}.{service['namespace']}.svc:{service['port']}{service['path']}"
    env = _test_env(pod)
    assert env["WEBHOOK_URL"] == url
    # cert-manager: the CA its cainjector writes into the caBundles, the serving Secret's ca.crt.
    assert env["CA_FILE"] == "/ca/ca.crt"
    (volume,) = spec["volumes"]
    assert volume["secret"] == {
        "secretName": find(objects, "Certificate", "gpu-preemptguard-serving")["spec"][
            "secretName"
        ],
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert container["volumeMounts"] == [{"name": "ca", "mountPath": "/ca", "readOnly": True}]
    # Self-rotating: the CA bundle the webhook writes into its Secret and its caBundles.
    pod = _test_pod(template("--namespace", "gpu-system", release="gpu"))
    (volume,) = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "gpu-preemptguard-tls"
    # Self-managed: the CA of the caBundles itself.
    pod = _test_pod(template(*self_managed_args(certs)))
    assert _test_env(pod)["CA_PEM"] == (certs / "ca.crt").read_text()
    assert "volumes" not in pod["spec"]


def test_self_rotating_certificates_are_the_default_and_follow_the_release() -> None:
    """The webhook issues into `<fullname>-tls`, holds `<fullname>-certificates`, injects into
    its own configurations (which carry no caBundle to overwrite), and its roles reach those
    objects only; the lifetimes are values."""
    objects = template(
        "--namespace", "gpu-system", "--set", "certificates.selfRotating.duration=720h",
        release="gpu",
    )  # fmt: skip
    assert not [o for o in objects if o["kind"] in {"Issuer", "Certificate"}]
    secret = find(objects, "Secret", "gpu-preemptguard-tls")
    assert secret["type"] == "Opaque"
    assert "data" not in secret
    spec = find(objects, "Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert [a for a in container["args"] if a.startswith(("--cert", "--inject", "--ca-"))] == [
        "--cert-secret=gpu-preemptguard-tls",
        "--cert-service=gpu-preemptguard",
        "--inject-ca-into=mutating/gpu-preemptguard",
        "--inject-ca-into=validating/gpu-preemptguard",
        "--cert-lease=gpu-preemptguard-certificates",
        "--cert-lifetime=720h",
        "--cert-renew-before=720h",
        "--ca-lifetime=43800h",
        "--ca-renew-before=8760h",
    ]
    assert "tls" not in {v["name"] for v in spec["volumes"]}
    for hook in hooks(objects).values():
        assert "caBundle" not in hook["clientConfig"]
    role = find(objects, "Role", "gpu-preemptguard-certificates")
    assert role["metadata"]["namespace"] == "gpu-system"
    assert role["rules"][0]["resourceNames"] == ["gpu-preemptguard-tls"]
    assert role["rules"][2]["resourceNames"] == ["gpu-preemptguard-certificates"]
    (rule,) = find(objects, "ClusterRole", "gpu-preemptguard-certificates")["rules"]
    assert rule["resourceNames"] == ["gpu-preemptguard"]
    binding = find(objects, "ClusterRoleBinding", "gpu-preemptguard-certificates")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-preemptguard", "namespace": "gpu-system"}
    ]
    error = template_error("--set", "certificates.selfRotating.duration=90 days")
    assert "/certificates/selfRotating/duration" in error


def test_the_test_pod_is_placed_as_the_webhooks_pods(non_default: list[dict[str, Any]]) -> None:
    pod = _test_pod(non_default)["spec"]
    deployment = find(non_default, "Deployment", "pg")["spec"]["template"]["spec"]
    assert pod["affinity"] == {"nodeAffinity": deployment["affinity"]["nodeAffinity"]}
    assert pod["nodeSelector"] == deployment["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == deployment["tolerations"]
    assert pod["imagePullSecrets"] == deployment["imagePullSecrets"]
    assert pod["securityContext"] == NON_DEFAULT_VALUES["podSecurityContext"]
    default = _test_pod(template())["spec"]
    assert default["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [NOT_PREEMPTIBLE]}]
            }
        }
    }
    assert "nodeSelector" not in default
    assert "tolerations" not in default


class _StubServer(http.server.ThreadingHTTPServer):
    """An HTTPS server answering each review with what ``answer`` makes of it."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.answer: Any = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/mutate"


class _StubHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, _StubServer)
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, body = server.answer(review)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[_StubServer, Path]]:
    """A stub hook on 127.0.0.1 and the CA that verifies it."""
    paths = issuing.write(issuing.issue(["127.0.0.1"]), tmp_path_factory.mktemp("stub-certs"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(paths.cert, paths.key)
    server = _StubServer(context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, paths.ca
    finally:
        server.shutdown()
        server.server_close()


def _review_answer(review: dict[str, Any], **response: Any) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], **response},
        }
    ).encode()


PATCH = base64.b64encode(json.dumps([{"op": "add", "path": "/x", "value": 1}]).encode()).decode()
ANSWERS: dict[str, tuple[Any, bool]] = {
    "a patch": (
        lambda r: (200, _review_answer(r, allowed=True, patchType="JSONPatch", patch=PATCH)),
        True,
    ),
    "a refusal": (lambda r: (200, _review_answer(r, allowed=False, status={"code": 403})), True),
    "allowed unchanged": (lambda r: (200, _review_answer(r, allowed=True)), True),
    "another uid": (
        lambda r: (200, _review_answer({"request": {"uid": "x"}}, allowed=True)),
        False,
    ),
    "no allowed": (lambda r: (200, _review_answer(r)), False),
    "a patch not base64": (
        lambda r: (200, _review_answer(r, allowed=True, patchType="JSONPatch", patch="[")),
        False,
    ),
    "not a review": (lambda r: (200, json.dumps({"kind": "Status"}).encode()), False),
    "not JSON": (lambda r: (200, b"<html>"), False),
    "HTTP 500": (lambda r: (500, b"internal error"), False),
}


def _run_test_pod(pod: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The test pod's command, here, with its environment but for ``env``."""
    (container,) = pod["spec"]["containers"]
    command = [
        sys.executable if container["command"][0] == "python3" else "",
        *container["command"][1:],
    ]
    return subprocess.run(
        command,
        env={"PATH": os.environ.get("PATH", ""), **_test_env(pod), **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_the_test_pod_passes_only_on_a_valid_answer(
    stub: tuple[_StubServer, Path], answer: str
) -> None:
    server, ca = stub
    make, valid = ANSWERS[answer]
    reviews: list[dict[str, Any]] = []

    def record(review: dict[str, Any]) -> tuple[int, bytes]:
        reviews.append(review)
        status, body = make(review)
        return int(status), bytes(body)

    server.answer = record
    proc = _run_test_pod(_test_pod(template()), {"WEBHOOK_URL": server.url, "CA_FILE": str(ca)})
    assert (proc.returncode == 0) == valid, proc.stdout + proc.stderr
    (review,) = reviews
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["request"]["operation"] == "CREATE"
    assert review["request"]["dryRun"] is True
    assert review["request"]["object"]["kind"] == "Pod"
    assert ("ok: " in proc.stdout) == valid
    assert ("FAILED: " in proc.stderr) != valid


def test_the_test_pod_fails_on_a_server_its_ca_does_not_verify(
    stub: tuple[_StubServer, Path], certs: Path
) -> None:
    server, ca = stub
    server.answer = ANSWERS["a patch"][0]
    pod = _test_pod(template(*self_managed_args(certs)))  # the chart's CA, not the stub's
    proc = _run_test_pod(pod, {"WEBHOOK_URL": server.url})
    assert proc.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in proc.stderr
    proc = _run_test_pod(pod, {"WEBHOOK_URL": server.url, "CA_PEM": ca.read_text()})
    assert proc.returncode == 0, proc.stderr


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
    # The test pod trusts the caBundles' CA; it never reads a Secret it does not know.
    assert _test_env(_test_pod(objects))["CA_PEM"] == (certs / "ca.crt").read_text()


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
        "--set", "fullnameOverride=gpu-placement",
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


def test_the_observers_capacity_settings_become_its_options() -> None:
    def args(*values: str) -> list[str]:
        objects = template("--set", "observer.enabled=true", *values)
        observer = next(o for o in objects if o["kind"] == "Deployment" and "observe" in
                        o["spec"]["template"]["spec"]["containers"][0]["args"])  # fmt: skip
        found: list[str] = observer["spec"]["template"]["spec"]["containers"][0]["args"]
        return found

    assert not [a for a in args() if a.startswith(("--window", "--idle-for", "--preemptible"))]
    chosen = args("--set", "observer.capacity.window=7d", "--set",
                  "observer.capacity.idleFor=2h", "--set",
                  "observer.capacity.preemptiblePriceRatio=0.35")  # fmt: skip
    assert chosen[-3:] == ["--window=7d", "--idle-for=2h", "--preemptible-price-ratio=0.35"]


def test_the_webhooks_priority_class_can_be_left_out() -> None:
    objects = template("--set", "priorityClass.create=false")
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
        (["--set", "fullnameOverride=Preempt_Guard"], "/fullnameOverride"),
        (["--set", "nameOverride=pg."], "/nameOverride"),
        (["--set", "namespace.creat=true"], "additional properties 'creat'"),
        (["--set", "image.digest=latest"], "/image/digest"),
        (["--set", "priorityClassName=Critical"], "/priorityClassName"),
        (["--set", "affinity.nodeAfinity.x=y"], "additional properties 'nodeAfinity'"),
        (
            [
                "--set",
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerm[0].x=y",
            ],
            "additional properties 'nodeSelectorTerm'",
        ),
        (["--set", "topologySpreadConstraints[0].maxSkew=0"], "/topologySpreadConstraints/0"),
        (
            ["--set", "topologySpreadConstraints[0].topologykey=zone"],
            "additional properties 'topologykey'",
        ),
        (["--set", "podLabels.team=1"], "/podLabels/team"),
        (["--set", "podSecurityContext.runAsRoot=true"], "additional properties 'runAsRoot'"),
        (["--set", "securityContext.capabilities.remove[0]=ALL"], "additional properties 'remove'"),
        (["--set", "securityContext.privileged=yes"], "/securityContext/privileged"),
        (["--set", "extraEnv[0].value=x"], "/extraEnv/0"),
        (
            ["--set", "extraEnv[0].name=X", "--set", "extraEnv[0].valuefrom.x=y"],
            "additional properties 'valuefrom'",
        ),
        (
            ["--set", "extraVolumes[0].name=x", "--set", "extraVolumes[0].configmap.name=y"],
            "additional properties 'configmap'",
        ),
        (["--set", "extraVolumeMounts[0].name=x"], "/extraVolumeMounts/0"),
        (["--set", "tolerations[0].efect=NoSchedule"], "additional properties 'efect'"),
        (["--set", "metrics.serviceMonitor.intervall=30s"], "additional properties 'intervall'"),
        (["--set", "metrics.podMonitor.scrapeTimeout=ten"], "/metrics/podMonitor/scrapeTimeout"),
        (["--set", "metrics.podMonitor.labels.release=1"], "/metrics/podMonitor/labels/release"),
        (["--set", "observer.capacity.window=soon"], "/observer/capacity/window"),
        (["--set", "observer.capacity.preemptiblePriceRatio=2"], "/observer/capacity/preemptible"),
        (["--set", "observer.capacity.idlefor=1h"], "additional properties 'idlefor'"),
    ],
)
def test_the_values_schema_refuses_bad_values(args: list[str], message: str) -> None:
    error = template_error(*args)
    assert "values don't meet the specifications of the schema" in error, error
    assert message in error, error


def test_self_managed_without_certificates_says_how_to_issue_them(certs: Path) -> None:
    error = template_error("--namespace", NAMESPACE, "--set", "certificates.mode=self-managed")
    assert "certificates.selfManaged.caCrt is required" in error
    assert "preemptguard certs --service preemptguard --namespace preemptguard-system" in error
    error = template_error(
        "--namespace", "gpu", "--set", "certificates.mode=self-managed", release="gpu"
    )  # fmt: skip
    assert "preemptguard certs --service gpu-preemptguard --namespace gpu" in error
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
    """Default values are the cert-manager overlay, failing open; as the release preemptguard in
    preemptguard-system, with its Namespace, they are its objects."""
    chart, _ = rendered["cert-manager"]
    assert find(chart, "Namespace")["metadata"]["name"] == NAMESPACE
    assert find(chart, "Service")["metadata"]["name"] == SERVICE
    assert {h["failurePolicy"] for h in hooks(chart).values()} == {"Ignore"}
    assert {o["kind"] for o in chart} >= {"Issuer", "Certificate"}
