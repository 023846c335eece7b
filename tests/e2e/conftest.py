"""Session fixtures: one control plane, fake nodes of both classes, the real ``preemptguard serve``
and the shipped webhook configurations pointed at it.

Missing binaries fail the run: an end-to-end suite that skips itself proves nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import cluster
from tests.e2e.cluster import PREEMPTIBLE, STANDARD
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, Kube, binaries_dir
from tests.e2e.render import Tree, prepare_tree
from tests.e2e.webhook_server import (
    ServerError,
    WebhookServer,
    register,
    service_account_kubeconfig,
    start_server,
    unregister,
)

# name -> compute class; None is a standard node without the label, which NotIn must also match.
NODES: dict[str, str | None] = {
    "preemptible-1": PREEMPTIBLE,
    "preemptible-2": PREEMPTIBLE,
    "preemptible-3": PREEMPTIBLE,
    "standard-1": STANDARD,
    "standard-2": STANDARD,
    "standard-unlabelled": None,
}


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


# --- the server, with the shipped RBAC, and the shipped webhook configurations -------------


@pytest.fixture(scope="session")
def webhook_server(
    kube: Kube,
    control_plane: ControlPlane,
    base_objects: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookServer]:
    """The real ``preemptguard serve``, on the policy the base's ConfigMap ships, reading
    namespaces with the shipped ServiceAccount's rights."""
    work = tmp_path_factory.mktemp("webhook")
    kubeconfig = service_account_kubeconfig(kube, control_plane, base_objects, work / "kubeconfig")
    try:
        server = start_server(work, base_objects, kubeconfig)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def webhook(
    kube: Kube,
    nodes: dict[str, str],
    webhook_server: WebhookServer,
    base_objects: list[dict[str, Any]],
) -> Iterator[WebhookServer]:
    """The shipped configurations registered with a URL on 127.0.0.1 and answering."""
    try:
        configs = register(kube, webhook_server, base_objects)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield webhook_server
    finally:
        unregister(kube, configs)


@pytest.fixture(autouse=True)
def _components_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, a dead component is reported with its log rather than as a timeout."""
    yield
    if "control_plane" in request.fixturenames:
        request.getfixturevalue("control_plane").check_alive()
    if "webhook_server" in request.fixturenames or "webhook" in request.fixturenames:
        request.getfixturevalue("webhook_server").check_alive()
