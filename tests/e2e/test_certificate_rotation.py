"""Self-rotating certificates on a real API server: ``preemptguard serve --cert-secret``
issues its pair into an empty Secret, injects its CA into the webhook configurations, and
renews the serving certificate and the CA while pods are created without pause; the API
server, which trusts only the configurations' caBundle, never fails a call to it.

Lifetimes are seconds here, so that within two minutes the serving certificate is renewed
several times and the CA once, with its overlap and retirement.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from harness import cluster
from harness.cluster import PLACEMENT
from harness.controlplane import ControlPlane
from harness.kube import Kube, KubeError, write_kubeconfig
from harness.manifests import SERVICE, Tree, find
from harness.processes import wait_until
from harness.webhook import Replace, WebhookServer, local_webhook_configurations, start_server

pytestmark = pytest.mark.e2e

SECRET = "preemptguard-tls"
# The serving pair renewed every 20 s, the CA 60 s after the first; the old CA leaves 25 s after
# the new one signed the pair, time for every worker of the server to serve it (a reload
# replaces them one after the other).
LIFETIMES = [
    "--cert-lifetime", "60s", "--cert-renew-before", "40s",
    "--ca-lifetime", "150s", "--ca-renew-before", "90s", "--ca-overlap", "25s",
]  # fmt: skip
CREATES_FOR = 100.0


CERTIFICATE_ROLES = ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _shipped(manifests: Tree, home: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The self-rotating overlay's certificate arguments of the server, and its Secret and
    roles, moved into ``home`` (cluster-scoped ones renamed for it)."""
    objects = manifests.render("self-rotating")
    (container,) = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = [
        f"--cert-secret={home}/{a.split('=', 1)[1]}" if a.startswith("--cert-secret=") else a
        for a in container["args"]
        if a.startswith(("--cert-", "--inject-ca-into"))
    ]
    moved = []
    for obj in [find(objects, "Secret")] + [
        find(objects, kind, "preemptguard-certificates") for kind in CERTIFICATE_ROLES
    ]:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        if "namespace" in meta:
            meta["namespace"] = home
        else:
            meta["name"] = f"{meta['name']}-{home}"
        for subject in obj.get("subjects", []):
            subject["namespace"] = home
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{home}"
        moved.append(obj)
    return args, moved


def _collection(obj: dict[str, Any]) -> str:
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if kind == "Secret":
        return f"/api/v1/namespaces/{namespace}/secrets"
    plural = f"{kind.lower()}s"
    return f"{RBAC}/namespaces/{namespace}/{plural}" if namespace else f"{RBAC}/{plural}"


def _service_account(kube: Kube, control_plane: ControlPlane, home: str, path: Path) -> Path:
    """A ServiceAccount in ``home`` with the base's server role beside the certificate roles;
    a kubeconfig with its token."""
    kube.create(
        f"/api/v1/namespaces/{home}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE}},
    )
    kube.create(
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"preemptguard-{home}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "preemptguard",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE, "namespace": home}],
        },
    )
    token = kube.create(
        f"/api/v1/namespaces/{home}/serviceaccounts/{SERVICE}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ).body["status"]["token"]
    return write_kubeconfig(path, control_plane.server, control_plane.ca_file, token, SERVICE)


@pytest.fixture
def rotating(
    kube: Kube,
    webhook: WebhookServer,
    manifests: Tree,
    base_objects: list[dict[str, Any]],
    tmp_path: Path,
    control_plane: ControlPlane,
    replace_configurations: Replace,
) -> Iterator[tuple[WebhookServer, str]]:
    """A server on self-rotating certificates with the shipped arguments and roles (moved to
    a namespace of its own), the session's configurations pointed at it with no caBundle at
    all: only what the server injects lets the API server call it."""
    home = cluster.unique("rotation")
    cluster.create_namespace(kube, home)
    args, objects = _shipped(manifests, home)
    for obj in objects:
        kube.create(_collection(obj), obj)
    kubeconfig = _service_account(kube, control_plane, home, tmp_path / "kubeconfig")
    server = start_server(
        tmp_path,
        base_objects,
        kubeconfig,
        certificates=[*args, "--cert-host", "127.0.0.1", *LIFETIMES],
    )
    try:
        configs = local_webhook_configurations(base_objects, server.url, b"")
        for config in configs:
            for hook in config["webhooks"]:
                del hook["clientConfig"]["caBundle"]
        replace_configurations(configs)
        yield server, home
    finally:
        server.stop()
        for obj in objects:
            if "namespace" not in obj["metadata"]:
                kube.delete(f"{_collection(obj)}/{obj['metadata']['name']}")
        kube.delete(f"{RBAC}/clusterrolebindings/preemptguard-{home}")


def _missed(kube: Kube, namespace: str) -> str | None:
    """Why an interruptible pod's create was not placed by the webhook, or None if it was."""
    try:
        response = kube.create(
            f"/api/v1/namespaces/{namespace}/pods",
            cluster.pod("probe", workload="interruptible"),
            dry_run=True,
        )
    except KubeError as exc:
        return f"refused: {exc.message}"
    if PLACEMENT in response.body["metadata"].get("annotations", {}):
        return None
    return f"admitted unplaced (warnings: {response.warnings})"


def _placed(kube: Kube, namespace: str) -> bool:
    return _missed(kube, namespace) is None


def _rotations(server: WebhookServer) -> list[list[str]]:
    reasons = []
    for line in server.log_path.read_text().splitlines():
        if '"certificate_rotated"' in line:
            reasons.append(json.loads(line)["reasons"])
    return reasons


def _bundle(kube: Kube, home: str) -> list[x509.Certificate]:
    secret = kube.get(f"/api/v1/namespaces/{home}/secrets/{SECRET}")
    return x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["ca.crt"]))


def test_certificates_rotate_themselves_and_no_review_fails(
    kube: Kube, nodes: dict[str, str], namespace: str, rotating: tuple[WebhookServer, str]
) -> None:
    server, home = rotating
    wait_until(lambda: _placed(kube, namespace), timeout=30, what="the injected CA in use")

    answered = 0
    missed: list[str] = []
    bundles: set[int] = set()
    end = time.monotonic() + CREATES_FOR
    while time.monotonic() < end:
        why = _missed(kube, namespace)
        if why is None:
            answered += 1
        else:
            missed.append(f"{dt.datetime.now(dt.UTC).time()} {why}")
        bundles.add(len(_bundle(kube, home)))
        time.sleep(0.1)

    rotations = _rotations(server)
    reasons = [r for rotation in rotations for r in rotation]
    assert not missed, f"{len(missed)} of {answered + len(missed)} not placed: {missed}"
    assert answered > 100
    assert reasons.count("the serving certificate is due for renewal") >= 2, rotations
    assert "the CA renewed" in reasons, rotations
    assert "the previous CA retired" in reasons, rotations
    assert bundles == {1, 2}, "the bundle held the next CA beside the current one"
    log = server.log_path.read_text()
    assert "certificate_rotation_failed" not in log

    # Every configuration holds the Secret's bundle, and the pair served chains to it.
    secret_bundle = base64.b64encode(
        b"".join(c.public_bytes(Encoding.PEM) for c in _bundle(kube, home))
    ).decode()
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for config in kube.get(f"/apis/admissionregistration.k8s.io/v1/{kind}")["items"]:
            for hook in config["webhooks"]:
                if hook["clientConfig"].get("url", "").startswith(server.url):
                    assert hook["clientConfig"]["caBundle"] == secret_bundle
