"""Session fixtures, once per Kubernetes release: a control plane, fake nodes of both classes,
the real ``preemptguard serve`` and the shipped webhook configurations pointed at it.

Every test that uses them runs on the main release (1.37) and on the oldest one supported
(1.20), as ``test_x[k8s-1.37]`` and ``test_x[k8s-1.20]``. pytest runs all the tests of one
release before the other's, so one control plane runs at a time: the first is stopped before
the second starts. ``@pytest.mark.releases("1.37", reason=...)`` keeps a test to the releases
named, for an API the others lack.

Missing binaries fail the run: an end-to-end suite that skips itself proves nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness import cluster
from harness.binaries import MAIN, OLDEST, ControlPlaneError, Release, binaries
from harness.cluster import PREEMPTIBLE, STANDARD
from harness.controlplane import ControlPlane
from harness.kube import Kube
from harness.manifests import Tree, prepare_tree, server_minor
from harness.webhook import (
    Replace,
    ServerError,
    WebhookServer,
    config_path,
    local_webhook_configurations,
    register,
    service_account_kubeconfig,
    start_server,
    unregister,
    wait_until_active,
)

# The main release first: a failure there is the one to see first.
RELEASES = (MAIN, OLDEST)

# name -> compute class; None is a standard node without the label, which NotIn must also match.
NODES: dict[str, str | None] = {
    "preemptible-1": PREEMPTIBLE,
    "preemptible-2": PREEMPTIBLE,
    "preemptible-3": PREEMPTIBLE,
    "standard-1": STANDARD,
    "standard-2": STANDARD,
    "standard-unlabelled": None,
}


def _releases_for(metafunc: pytest.Metafunc) -> list[Release]:
    marker = metafunc.definition.get_closest_marker("releases")
    if marker is None:
        return list(RELEASES)
    if not marker.kwargs.get("reason"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: releases(...) needs a reason=")
    names = set(marker.args)
    unknown = names - {r.name for r in RELEASES}
    if unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: unknown releases {unknown}")
    return [r for r in RELEASES if r.name in names]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that reaches the control plane runs once per release (see the module)."""
    if "release" in metafunc.fixturenames:
        releases = _releases_for(metafunc)
        metafunc.parametrize(
            "release", releases, ids=[r.id for r in releases], indirect=True, scope="session"
        )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on a control plane last, in the order pytest grouped them by release: the
    last release's control plane then stops as its last test ends, not at the end of a run
    that goes on with other tests beside it."""
    on_cluster = [item for item in items if "release" in getattr(item, "fixturenames", ())]
    if on_cluster:
        others = [item for item in items if "release" not in getattr(item, "fixturenames", ())]
        items[:] = others + on_cluster


@pytest.fixture(scope="session")
def release(request: pytest.FixtureRequest) -> Release:
    """The Kubernetes release under test (parametrised by ``pytest_generate_tests``)."""
    value: Release = request.param
    return value


@pytest.fixture(scope="session")
def control_plane(
    release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    try:
        found = binaries(release)
    except ControlPlaneError as exc:
        pytest.fail(f"no Kubernetes {release.name} binaries: {exc}", pytrace=False)
    cp = ControlPlane(found, tmp_path_factory.mktemp(f"control-plane-{release.id}"))
    try:
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(
            f"the Kubernetes {release.name} control plane did not start: {exc}", pytrace=False
        )
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
def manifests(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """manifests/ rendered for this API server: as shipped on 1.37, without the fields an older
    one predates on 1.20 (``harness.manifests.for_server``: the webhooks' matchConditions, the
    Deployment's preStop sleep)."""
    return prepare_tree(tmp_path_factory.mktemp("manifests"), server_minor=server_minor(kube))


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
    work = tmp_path_factory.mktemp(f"webhook-{control_plane.release.id}")
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


@pytest.fixture
def replace_configurations(
    kube: Kube, webhook: WebhookServer, base_objects: list[dict[str, Any]]
) -> Iterator[Replace]:
    """Lets a test install other webhook configurations; the session's come back afterwards."""
    originals = local_webhook_configurations(
        base_objects, webhook.url, webhook.ca_file.read_bytes()
    )

    def replace(configs: list[dict[str, Any]]) -> None:
        for config in configs:
            kube.apply(config_path(config, item=True), config)

    try:
        yield replace
    finally:
        replace(originals)
        probe = cluster.unique("probe")
        cluster.create_namespace(kube, probe)
        wait_until_active(kube, probe, webhook)
