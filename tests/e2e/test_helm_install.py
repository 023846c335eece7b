"""The Helm chart installed for real: ``helm install --namespace <ns> --create-namespace``
(helm v4) into the control plane with self-managed certificates issued by ``preemptguard
certs``, every object accepted and the webhook's own pods placed on standard nodes, under the
``restricted`` Pod Security level; a second ``helm upgrade`` with the same values changes no
object; the installed webhook configurations, pointed at a ``preemptguard serve`` running on the
policy and with the service account the chart installed, place pods; the ``helm test`` pod is
placed as the webhook's pods are, and its check passes against that server; and ``helm
uninstall`` removes everything it installed, leaving the namespace it did not create.

Each install has a release and a namespace of its own, and so objects named after it
(``<release>-preemptguard``): the session's fixtures already hold ``preemptguard`` objects in
``preemptguard-system``, which Helm would refuse to adopt. The release record is kept in the
release's namespace. 1.37 only: the chart targets Kubernetes 1.30 and later (the Deployment's
preStop sleep; tests/test_helm_chart.py validates the objects against the 1.30 schema).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import cluster
from harness.cluster import PLACEMENT, PREEMPTIBLE, STANDARD
from harness.controlplane import ControlPlane
from harness.kube import Kube, KubeError, write_kubeconfig
from harness.processes import wait_until
from harness.webhook import (
    ServerError,
    WebhookServer,
    config_path,
    local_webhook_configurations,
    start_server,
    wait_until_active,
)
from tests.test_helm_chart import CHART, helm

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.releases(
        "1.37", reason="the chart targets Kubernetes 1.30+ (preStop sleep, policy/v1)"
    ),
]

WEBHOOK_PODS = "app.kubernetes.io/name=preemptguard,app.kubernetes.io/component=webhook"
# kind -> (API path prefix, resource, namespaced) for every kind the chart renders.
KINDS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}


def object_path(obj: dict[str, Any]) -> str:
    prefix, resource, namespaced = KINDS[obj["kind"]]
    meta = obj["metadata"]
    if namespaced:
        return f"{prefix}/namespaces/{meta['namespace']}/{resource}/{meta['name']}"
    return f"{prefix}/{resource}/{meta['name']}"


@dataclass
class Helm:
    """helm v4 against the test's control plane, with its own config, cache and data folders."""

    kubeconfig: Path
    home: Path
    binary: str = field(default_factory=helm)

    def __call__(self, *args: str) -> str:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        argv = [self.binary, *args, "--kubeconfig", str(self.kubeconfig)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
            )
        return proc.stdout


@dataclass
class Install:
    helm: Helm
    name: str
    namespace: str
    values: list[str]

    @property
    def fullname(self) -> str:
        """What the chart names its objects: the release's name and the chart's."""
        return f"{self.name}-preemptguard"

    @property
    def release(self) -> list[str]:
        return [self.name, str(CHART), "--namespace", self.namespace, *self.values]

    def manifest(self, revision: int | None = None) -> list[dict[str, Any]]:
        args = ["get", "manifest", self.name, "--namespace", self.namespace]
        if revision is not None:
            args += ["--revision", str(revision)]
        return [doc for doc in yaml.safe_load_all(self.helm(*args)) if doc]

    def hooks(self) -> list[dict[str, Any]]:
        out = self.helm("get", "hooks", self.name, "--namespace", self.namespace)
        return [doc for doc in yaml.safe_load_all(out) if doc]

    def status(self) -> dict[str, Any]:
        out = self.helm("status", self.name, "--namespace", self.namespace, "-o", "json")
        status: dict[str, Any] = yaml.safe_load(out)
        return status


@pytest.fixture
def helm_cli(control_plane: ControlPlane, tmp_path: Path) -> Helm:
    return Helm(control_plane.kubeconfig, tmp_path / "helm")


def issue_certs(service: str, namespace: str, out: Path) -> list[str]:
    """``preemptguard certs`` as the README says, and the chart values that pass its output."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "--service",
            service,
            "--namespace",
            namespace,
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return [
        "--set", "certificates.mode=self-managed",
        "--set-file", f"certificates.selfManaged.tlsCrt={out / 'tls.crt'}",
        "--set-file", f"certificates.selfManaged.tlsKey={out / 'tls.key'}",
        "--set-file", f"certificates.selfManaged.caCrt={out / 'ca.crt'}",
    ]  # fmt: skip


def uninstall(kube: Kube, install: Install, objects: list[dict[str, Any]]) -> None:
    """``helm uninstall``: every object of the release deleted, the namespace left as it was.

    No kubelet confirms pod deletions here, so what it would do next is done by hand: the
    webhook's pods, left by the garbage collector with a deletion timestamp, deleted with
    grace 0.
    """
    install.helm("uninstall", install.name, "--namespace", install.namespace)
    left: list[str] = []

    def deleted() -> bool:
        left[:] = [
            f"{o['kind']}/{o['metadata']['name']}" for o in objects if kube.exists(object_path(o))
        ]
        return not left

    try:
        wait_until(deleted, timeout=30, what=f"the objects of the release {install.name} deleted")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: left {left}") from None
    if any(o["kind"] == "ValidatingAdmissionPolicy" for o in objects):
        probe = cluster.unique("probe")
        cluster.create_namespace(kube, probe)
        cluster.wait_admission_policies_gone(kube, probe)
    ns_path = f"/api/v1/namespaces/{install.namespace}"
    pods = f"{ns_path}/pods"

    def no_pods() -> bool:
        for p in kube.get(pods)["items"]:
            kube.delete(f"{pods}/{p['metadata']['name']}", grace_seconds=0)
        return (
            not kube.get(pods)["items"]
            and not kube.get(f"/apis/apps/v1/namespaces/{install.namespace}/replicasets")["items"]
        )

    wait_until(no_pods, timeout=30, what=f"the pods in {install.namespace} deleted")


def delete_namespace(kube: Kube, name: str) -> None:
    """The test's namespace deleted; no namespace controller runs here, so finalized by hand."""
    path = f"/api/v1/namespaces/{name}"
    if not kube.exists(path):
        return
    kube.delete(path, grace_seconds=None)
    namespace = kube.get(path)
    namespace["spec"]["finalizers"] = []
    kube.call("PUT", f"{path}/finalize", namespace)
    wait_until(lambda: not kube.exists(path), timeout=30, what=f"{name} deleted")


PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def _remove_class(kube: Kube, name: str) -> None:
    path = f"{PRIORITY_CLASSES}/{name}"
    kube.delete(path, grace_seconds=None)
    wait_until(lambda: not kube.exists(path), timeout=30, what=f"PriorityClass {name} deleted")


@pytest.fixture
def installed(
    kube: Kube, nodes: dict[str, str], helm_cli: Helm, tmp_path: Path, base_objects: list[Any]
) -> Iterator[Install]:
    """A fresh install with self-managed certificates; uninstalled afterwards if a test left it.

    The chart creates the PriorityClasses the policy names, whose names are fixed: the
    cluster's (from the kustomize base, for the other tests' webhook) step aside for the
    install and are put back after it."""
    name = cluster.unique("helm")
    namespace = f"{name}-system"
    install = Install(helm_cli, name, namespace, [])
    install.values = issue_certs(install.fullname, namespace, tmp_path / "certs")
    fixed = [
        o
        for o in base_objects
        if o["kind"] == "PriorityClass" and o["metadata"]["name"].startswith("preemptguard-")
    ]
    assert len(fixed) == 2, [o["metadata"]["name"] for o in fixed]
    for obj in fixed:
        _remove_class(kube, obj["metadata"]["name"])
    try:
        helm_cli("install", *install.release, "--create-namespace")
        objects = install.manifest()
        yield install
        if helm_cli("list", "--namespace", namespace, "--short", "--filter", f"^{name}$").strip():
            uninstall(kube, install, objects)
    finally:
        delete_namespace(kube, namespace)
        for obj in fixed:
            class_name = obj["metadata"]["name"]
            if kube.exists(f"{PRIORITY_CLASSES}/{class_name}"):
                _remove_class(kube, class_name)
            kube.apply(f"{PRIORITY_CLASSES}/{class_name}", obj)


def version_of(kube: Kube, obj: dict[str, Any]) -> tuple[str, Any]:
    """What changes when the object is written: its generation where it has one (a status
    update by a controller does not count), else its resourceVersion."""
    live = kube.get(object_path(obj))
    meta = live["metadata"]
    return (
        ("generation", meta["generation"])
        if "generation" in meta
        else ("resourceVersion", meta["resourceVersion"])
    )


def test_install_creates_every_object_and_an_upgrade_with_the_same_values_changes_nothing(
    kube: Kube, nodes: dict[str, str], installed: Install
) -> None:
    objects = installed.manifest()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Secret",
         "Service", "PriorityClass", "PriorityClass", "PriorityClass", "Deployment",
         "PodDisruptionBudget",
         "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
         # the cluster serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )  # fmt: skip
    for obj in objects:
        live = kube.get(object_path(obj))
        meta = live["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm", obj["kind"]
        assert meta["annotations"]["meta.helm.sh/release-name"] == installed.name, obj["kind"]
        if obj["kind"] in {"Deployment", "Service", "PodDisruptionBudget"}:
            assert live["spec"]["selector"] == obj["spec"]["selector"], obj["kind"]
        if "namespace" in obj["metadata"]:
            assert meta["namespace"] == installed.namespace, obj["kind"]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"} == {
        installed.fullname
    }

    # The chart's Deployment runs: its pods are scheduled onto standard nodes only (the fake
    # nodes have no kubelet to start them), with the webhook's PriorityClass, which the chart's
    # admission policy reserves to this namespace, and they meet the restricted Pod Security
    # level the README has the namespace labelled with (the API server warns of pods that do
    # not).
    pods = cluster.wait_pods_scheduled(kube, installed.namespace, WEBHOOK_PODS, 2)
    assert {nodes[p["spec"]["nodeName"]] for p in pods} == {STANDARD}
    assert {p["spec"]["priorityClassName"] for p in pods} == {installed.fullname}
    ns_path = f"/api/v1/namespaces/{installed.namespace}"
    labelled = kube.call(
        "PATCH",
        ns_path,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
        content_type="application/merge-patch+json",
    )
    assert labelled.warnings == [], labelled.warnings
    assert_class_reserved_to(kube, installed)

    before = {(o["kind"], o["metadata"]["name"]): version_of(kube, o) for o in objects}
    installed.helm("upgrade", *installed.release)
    assert installed.status()["version"] == 2
    assert installed.manifest(revision=2) == installed.manifest(revision=1)
    after = {(o["kind"], o["metadata"]["name"]): version_of(kube, o) for o in objects}
    assert after == before
    assert len(cluster.pods_with_labels(kube, installed.namespace, WEBHOOK_PODS)) == 2

    # The release's record is kept in its namespace. That namespace was --create-namespace's,
    # not the chart's: it stays, and only the release's objects (its record included) go.
    records = f"{ns_path}/secrets"
    selector = f"owner=helm,name={installed.name}"
    assert len(kube.get(records, labelSelector=selector)["items"]) == 2
    uninstall(kube, installed, objects)
    namespace = kube.get(ns_path)
    assert "deletionTimestamp" not in namespace["metadata"]
    assert namespace["status"]["phase"] == "Active"
    assert kube.get(records, labelSelector=selector)["items"] == []


def assert_class_reserved_to(kube: Kube, installed: Install) -> None:
    """The chart's admission policy refuses the webhook's PriorityClass outside the release's
    namespace: the chart wrote the policy for this release's names."""
    probe = cluster.unique("probe")
    cluster.create_namespace(kube, probe)
    pod = cluster.pod("class-probe", priorityClassName=installed.fullname)
    refusal: list[str] = []

    def refused() -> bool:
        try:
            kube.create(f"/api/v1/namespaces/{probe}/pods", pod, dry_run=True)
        except KubeError as exc:
            refusal[:] = [exc.message]
            return "ValidatingAdmissionPolicy 'preemptguard-default'" in exc.message
        return False

    wait_until(refused, timeout=30, what="the chart's admission policy active")
    assert (
        f"priorityClassName '{installed.fullname}' is reserved for pods in {installed.namespace}"
        in refusal[0]
    ), refusal


@pytest.fixture
def chart_server(
    kube: Kube, control_plane: ControlPlane, installed: Install, tmp_path: Path
) -> Iterator[WebhookServer]:
    """``preemptguard serve`` on 127.0.0.1 with the policy from the installed ConfigMap, reading
    namespaces with a token of the installed ServiceAccount (so with the chart's RBAC)."""
    objects = installed.manifest()
    (configmap,) = (o for o in objects if o["kind"] == "ConfigMap")
    live_configmap = kube.get(object_path(configmap))
    token = kube.create(
        f"/api/v1/namespaces/{installed.namespace}/serviceaccounts/{installed.fullname}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ).body["status"]["token"]
    work = tmp_path / "server"
    work.mkdir()
    kubeconfig = write_kubeconfig(
        work / "kubeconfig", control_plane.server, control_plane.ca_file, token, installed.fullname
    )
    try:
        server = start_server(work, [live_configmap], kubeconfig)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def test_the_installed_webhook_configurations_place_pods(
    kube: Kube,
    nodes: dict[str, str],
    installed: Install,
    chart_server: WebhookServer,
    namespace: str,
) -> None:
    """The installed configurations, with only clientConfig switched from the Service (no
    kubelet runs its pods here) to the local server, as the other end-to-end tests do with the
    kustomize output. This server's own log proves the calls came through these
    configurations, whether or not the session's configurations are registered too."""
    live = [
        kube.get(object_path(o))
        for o in installed.manifest()
        if o["kind"] in {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    ]
    for config in local_webhook_configurations(
        live, chart_server.url, chart_server.ca_file.read_bytes()
    ):
        config["metadata"].pop("managedFields", None)
        kube.call("PUT", config_path(config, item=True), config)
    wait_until_active(kube, namespace, chart_server)

    created = kube.create(
        f"/api/v1/namespaces/{namespace}/pods",
        cluster.pod("batch", workload="interruptible", gpus=1),
    ).body
    assert created["metadata"]["annotations"][PLACEMENT] == "interruptible"
    bound = cluster.wait_scheduled(kube, namespace, "batch")
    assert nodes[bound["spec"]["nodeName"]] == PREEMPTIBLE
    hooks = {r["hook"] for r in chart_server.admissions(namespace, "batch")}
    assert hooks == {"mutate", "validate"}

    serving = cluster.pod(
        "serving", workload="serving", nodeSelector={cluster.CLASS_LABEL: PREEMPTIBLE}
    )
    with pytest.raises(KubeError) as refused:
        kube.create(f"/api/v1/namespaces/{namespace}/pods", serving)
    assert cluster.refused(refused.value), refused.value.message
    assert chart_server.admissions(namespace, "serving")

    # The chart's own namespace is never selected: its Deployment's pods were not sent here.
    cluster.wait_pods_scheduled(kube, installed.namespace, WEBHOOK_PODS, 2)
    assert not chart_server.admissions(installed.namespace)
    cluster.delete_pods(kube, namespace, ["batch"])


def test_the_helm_test_pod_is_placed_as_the_webhook_and_its_check_passes(
    kube: Kube,
    nodes: dict[str, str],
    installed: Install,
    chart_server: WebhookServer,
) -> None:
    """``helm test``'s pod: not created by the install; scheduled, as the webhook's pods are,
    onto a standard node, under the restricted Pod Security level; asking the Service the hooks
    name. No kubelet runs it here: its command runs on this machine instead, against the
    server running the installed policy, and passes."""
    (pod,) = [o for o in installed.hooks() if o["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    pods = f"/api/v1/namespaces/{installed.namespace}/pods"
    name = pod["metadata"]["name"]
    assert not kube.exists(f"{pods}/{name}")
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    service = kube.get(f"/api/v1/namespaces/{installed.namespace}/services/{installed.fullname}")
    assert {(p["port"], p["targetPort"]) for p in service["spec"]["ports"]} >= {(443, "https")}
    assert env["WEBHOOK_URL"] == (
        f"https://{installed.fullname}.{installed.namespace}.svc:443/mutate"
    )

    kube.merge_patch(
        f"/api/v1/namespaces/{installed.namespace}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    kube.create(pods, pod)
    try:
        bound = cluster.wait_scheduled(kube, installed.namespace, name)
        assert nodes[bound["spec"]["nodeName"]] == STANDARD
    finally:
        cluster.delete_pods(kube, installed.namespace, [name])

    assert container["command"][:2] == ["python3", "-c"]
    proc = subprocess.run(
        [sys.executable, "-c", container["command"][2]],
        env={
            "PATH": os.environ.get("PATH", ""),
            **env,
            "WEBHOOK_URL": f"{chart_server.url}/mutate",
            "CA_PEM": chart_server.ca_file.read_text(),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allowed=True, with a patch" in proc.stdout, proc.stdout
    (review,) = chart_server.admissions("default", "preemptguard-helm-test")
    assert review["hook"] == "mutate"
    assert review["dry_run"] is True
