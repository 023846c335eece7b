"""Session fixtures: one control plane, fake nodes of both classes, the real ``preemptguard serve``
and the shipped webhook configurations pointed at it.

Missing binaries fail the run: an end-to-end suite that skips itself proves nothing.
"""

from __future__ import annotations

import base64
import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.e2e import cluster
from tests.e2e.cluster import PREEMPTIBLE, STANDARD
from tests.e2e.controlplane import (
    ControlPlane,
    ControlPlaneError,
    Kube,
    KubeError,
    binaries_dir,
    free_port,
    wait_until,
)
from tests.e2e.render import NAMESPACE, SERVICE, Tree, find, prepare_tree

# name -> compute class; None is a standard node without the label, which NotIn must also match.
NODES: dict[str, str | None] = {
    "preemptible-1": PREEMPTIBLE,
    "preemptible-2": PREEMPTIBLE,
    "preemptible-3": PREEMPTIBLE,
    "standard-1": STANDARD,
    "standard-2": STANDARD,
    "standard-unlabelled": None,
}
HOOK_PATHS = {"/mutate", "/validate"}


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        bin_dir = binaries_dir()
    except ControlPlaneError as exc:
        pytest.fail(f"no control-plane binaries: {exc}", pytrace=False)
    cp = ControlPlane(bin_dir, tmp_path_factory.mktemp("control-plane"))
    try:
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(f"the control plane did not start: {exc}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    client = control_plane.client()
    cluster.label_system_namespaces(client)
    yield client
    client.close()


@pytest.fixture(scope="session")
def nodes(kube: Kube) -> dict[str, str]:
    """The fake nodes, by name, with their class (unlabelled nodes count as standard)."""
    for name, compute_class in NODES.items():
        cluster.create_node(kube, name, compute_class)
    return {name: compute_class or STANDARD for name, compute_class in NODES.items()}


@pytest.fixture
def namespace(kube: Kube) -> str:
    """A fresh namespace per test, labelled as Kubernetes 1.21+ labels every namespace."""
    name = cluster.unique("e2e")
    cluster.create_namespace(kube, name)
    return name


@pytest.fixture(scope="session")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return prepare_tree(tmp_path_factory.mktemp("manifests"))


@pytest.fixture(scope="session")
def base_objects(manifests: Tree) -> list[dict[str, Any]]:
    return manifests.render("base")


# --- the server, with the shipped RBAC -----------------------------------------------------


def _service_account_kubeconfig(
    kube: Kube, control_plane: ControlPlane, base: list[dict[str, Any]], path: Path
) -> Path:
    """A kubeconfig holding a token of the shipped ServiceAccount, bound by the shipped RBAC.

    The server then reads namespaces with exactly the rights an install grants it.
    """
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        obj = find(base, kind)
        api = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
        plural = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts"}.get(
            kind, kind.lower() + "s"
        )
        ns = obj["metadata"].get("namespace")
        collection = f"{api}/namespaces/{ns}/{plural}" if ns else f"{api}/{plural}"
        try:
            kube.create(collection, obj)
        except KubeError as exc:
            if exc.status != 409:
                raise
    token = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ).body["status"]["token"]
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass
class WebhookServer:
    url: str
    ca_file: Path
    metrics_url: str
    log_path: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"preemptguard serve exited with {self.proc.returncode}:\n{self.log_tail()}"
            )


@pytest.fixture(scope="session")
def webhook_server(
    kube: Kube,
    control_plane: ControlPlane,
    base_objects: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookServer]:
    """The real ``preemptguard serve``, on the policy the base's ConfigMap ships."""
    work = tmp_path_factory.mktemp("webhook")
    policies = work / "policies"
    policies.mkdir()
    for key, text in find(base_objects, "ConfigMap")["data"].items():
        (policies / key).write_text(text)
    kubeconfig = _service_account_kubeconfig(kube, control_plane, base_objects, work / "kubeconfig")
    port, metrics_port = free_port(), free_port()
    certs = work / "certs"
    log_path = work / "server.log"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    argv = [
        sys.executable,
        "-m",
        "webhook",
        "serve",
        "--self-signed",
        str(certs),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--policies",
        str(policies),
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = WebhookServer(
        url=f"https://127.0.0.1:{port}",
        ca_file=certs / "ca.crt",
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
        log_path=log_path,
        proc=proc,
    )

    def ready() -> bool:
        server.check_alive()
        if not server.ca_file.exists():
            return False
        with requests.Session() as s:
            s.trust_env = False
            return s.get(f"{server.url}/readyz", verify=str(server.ca_file), timeout=2).ok

    try:
        try:
            wait_until(ready, timeout=60, what="preemptguard serve /readyz", interval=0.2)
        except (TimeoutError, AssertionError) as exc:
            pytest.fail(f"{exc}\n{server.log_tail()}", pytrace=False)
        yield server
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- the shipped webhook configurations, pointed at the local server ------------------------


def local_webhook_configurations(
    base: list[dict[str, Any]], server_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """The base's webhook configurations with each Service reference replaced by a URL on
    127.0.0.1 (same path) and the local CA: every other field is the shipped one."""
    configs = []
    ca_bundle = base64.b64encode(ca_pem).decode()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = copy.deepcopy(find(base, kind))
        for hook in config["webhooks"]:
            service = hook["clientConfig"].pop("service")
            assert service["path"] in HOOK_PATHS
            hook["clientConfig"] = {"url": server_url + service["path"], "caBundle": ca_bundle}
        configs.append(config)
    return configs


def _config_path(config: dict[str, Any]) -> str:
    plural = {
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    }[config["kind"]]
    return f"/apis/admissionregistration.k8s.io/v1/{plural}"


@pytest.fixture(scope="session")
def webhook(
    kube: Kube,
    nodes: dict[str, str],
    webhook_server: WebhookServer,
    base_objects: list[dict[str, Any]],
) -> Iterator[WebhookServer]:
    """The shipped configurations registered and answering; yields the server."""
    configs = local_webhook_configurations(
        base_objects, webhook_server.url, webhook_server.ca_file.read_bytes()
    )
    for config in configs:
        kube.create(_config_path(config), config)
    probe_ns = cluster.unique("probe")
    cluster.create_namespace(kube, probe_ns)
    _wait_until_active(kube, probe_ns, webhook_server)
    try:
        yield webhook_server
    finally:
        for config in configs:
            kube.delete(f"{_config_path(config)}/{config['metadata']['name']}", grace_seconds=None)


def _wait_until_active(kube: Kube, namespace: str, server: WebhookServer) -> None:
    """The API server loads new configurations asynchronously: probe each hook with dry runs."""
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def mutating() -> bool:
        server.check_alive()
        body = kube.create(pods, cluster.pod("probe", workload="interruptible"), dry_run=True).body
        return cluster.PLACEMENT in body["metadata"].get("annotations", {})

    def refuses(path: str, obj: dict[str, Any]) -> bool:
        server.check_alive()
        try:
            kube.create(path, obj, dry_run=True)
        except KubeError as exc:
            return cluster.refused(exc)
        return False

    bad_pod = cluster.pod(
        "probe",
        workload="serving",
        nodeSelector={cluster.CLASS_LABEL: PREEMPTIBLE},
    )
    bad_deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "probe"},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": cluster.pod_template(
                {"app": "probe"},
                workload="serving",
                nodeSelector={cluster.CLASS_LABEL: PREEMPTIBLE},
            ),
        },
    }
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    try:
        wait_until(mutating, timeout=30, what="the mutating webhook", interval=0.2)
        wait_until(lambda: refuses(pods, bad_pod), timeout=30, what="the pod validating webhook")
        wait_until(
            lambda: refuses(deployments, bad_deployment),
            timeout=30,
            what="the workload validating webhook",
        )
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{server.log_tail()}", pytrace=False)


@pytest.fixture(autouse=True)
def _components_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, a dead component is reported with its log rather than as a timeout."""
    yield
    if "control_plane" in request.fixturenames:
        request.getfixturevalue("control_plane").check_alive()
    if "webhook_server" in request.fixturenames or "webhook" in request.fixturenames:
        request.getfixturevalue("webhook_server").check_alive()
