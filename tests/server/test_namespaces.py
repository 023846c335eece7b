"""The namespace-annotation cache: list, watch, relist, and running without a cluster."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.fake_apiserver import STOP, FakeApiServer
from tests.server.helpers import (
    ServerProcess,
    fixture,
    free_port,
    serve_args,
    wait_for,
    with_object,
)
from webhook.engine.decision import NamespaceMeta
from webhook.errors import NamespaceUnknown
from webhook.server.caches import ClusterCache, namespace_cache
from webhook.server.metrics import Metrics

pytestmark = pytest.mark.slow

DEFAULT = "together.ai/default-workload"
FAST = (0.05, 0.2)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    api = FakeApiServer()
    api.namespaces = {"team-a": {DEFAULT: "interruptible"}, "web": {}}
    yield api
    api.close()


@pytest.fixture
def cache(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ClusterCache[NamespaceMeta]]:
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "kubeconfig")))
    cache = namespace_cache(Metrics(), backoff=FAST)
    cache.start()
    yield cache
    cache.stop()


def annotations_of(cache: ClusterCache[NamespaceMeta], namespace: str | None) -> dict[str, str]:
    """The namespace's annotations as the cache last saw them; empty when it holds none."""
    meta = cache.cached(namespace) if namespace is not None else None
    return dict(meta.annotations) if meta is not None else {}


def gauge(cache: ClusterCache[NamespaceMeta], name: str) -> float:
    for line in cache.metrics.render().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(name)


def test_lists_then_follows_the_watch(
    fake: FakeApiServer, cache: ClusterCache[NamespaceMeta]
) -> None:
    events = fake.next_watch()
    assert cache.synced
    assert annotations_of(cache, "team-a") == {DEFAULT: "interruptible"}
    assert annotations_of(cache, "web") == {}
    assert annotations_of(cache, "nowhere") == {}
    assert annotations_of(cache, None) == {}
    assert gauge(cache, "preemptguard_namespace_cache_synced") == 1
    assert gauge(cache, "preemptguard_namespace_cache_namespaces") == 2

    fake.event(events, "MODIFIED", "web", {DEFAULT: "serving"})
    fake.event(events, "ADDED", "batch", {DEFAULT: "flexible"})
    fake.event(events, "DELETED", "team-a", {})
    wait_for(lambda: annotations_of(cache, "web") == {DEFAULT: "serving"})
    wait_for(lambda: annotations_of(cache, "batch") == {DEFAULT: "flexible"})
    wait_for(lambda: annotations_of(cache, "team-a") == {})
    assert fake.lists == 1


def test_relists_after_the_watch_breaks(
    fake: FakeApiServer, cache: ClusterCache[NamespaceMeta]
) -> None:
    events = fake.next_watch()
    fake.namespaces["late"] = {DEFAULT: "login"}
    events.put({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Gone",
                                            "message": "too old resource version"}})  # fmt: skip
    fake.next_watch()
    wait_for(lambda: annotations_of(cache, "late") == {DEFAULT: "login"})
    assert fake.lists == 2
    assert gauge(cache, "preemptguard_namespace_watch_errors_total") == 1
    assert cache.synced


def test_a_watch_that_ends_is_resumed_without_a_relist(
    fake: FakeApiServer, cache: ClusterCache[NamespaceMeta]
) -> None:
    fake.next_watch().put(STOP)
    events = fake.next_watch()
    fake.event(events, "ADDED", "after", {DEFAULT: "flexible"})
    wait_for(lambda: annotations_of(cache, "after") == {DEFAULT: "flexible"})
    assert fake.lists == 1


def test_unreachable_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = FakeApiServer()
    kubeconfig = gone.kubeconfig(tmp_path / "kubeconfig")
    gone.close()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    cache = namespace_cache(Metrics(), backoff=FAST)
    cache.start()
    try:
        wait_for(lambda: gauge(cache, "preemptguard_namespace_watch_errors_total") >= 2)
        assert not cache.synced
        assert gauge(cache, "preemptguard_namespace_cache_synced") == 0
        assert annotations_of(cache, "team-a") == {}
    finally:
        cache.stop()


def test_without_a_cluster_the_cache_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cache = namespace_cache(Metrics())
    cache.start()
    assert cache.source == "none"
    assert not cache.synced
    assert gauge(cache, "preemptguard_namespace_cache_synced") == 0
    assert annotations_of(cache, "team-a") == {}
    cache.stop()


def test_server_classifies_by_namespace_and_keeps_answering_when_the_cluster_goes(
    fake: FakeApiServer, tmp_path: Path, tls_dir: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    args = serve_args(tls_dir, port, metrics_port)
    server = ServerProcess(
        args,
        ca=tls_dir / "ca.crt",
        log=tmp_path / "server.log",
        port=port,
        metrics_port=metrics_port,
        env={"KUBECONFIG": str(kubeconfig)},
    )
    try:
        fake.next_watch()
        wait_for(lambda: server.metric("preemptguard_namespace_cache_synced") == 1)
        review = fixture("create-pod-sweep-mutate")
        pod = copy.deepcopy(review["request"]["object"])
        del pod["metadata"]["annotations"]
        client = server.client()
        response = client.post("/mutate", with_object(review, pod)).response
        assert response["auditAnnotations"]["workload-class"] == "interruptible"
        assert response["auditAnnotations"]["classified-by"] != "annotation"

        fake.close()
        wait_for(lambda: server.metric("preemptguard_namespace_cache_synced") == 0)
        # The last seen annotations still apply while the cluster is away.
        again = client.post("/mutate", with_object(review, pod)).response
        assert again["auditAnnotations"]["workload-class"] == "interruptible"
        client.close()
        assert server.log_events("namespace_cache_unsynced")
    finally:
        assert server.terminate() == 0, server.logs()


def test_a_namespace_not_yet_in_the_cache_is_read_directly(
    fake: FakeApiServer, cache: ClusterCache[NamespaceMeta]
) -> None:
    fake.next_watch()
    fake.namespaces["brand-new"] = {DEFAULT: "serving"}  # created; its watch event not yet seen
    meta = cache.lookup("brand-new")
    assert meta.annotations == {DEFAULT: "serving"}
    assert fake.reads == ["brand-new"]
    assert cache.lookup("team-a").annotations == {DEFAULT: "interruptible"}
    assert fake.reads == ["brand-new"], "a cached namespace is not read again"
    assert cache.lookup("gone").annotations == {}  # 404: no such namespace, no default


def test_a_namespace_that_cannot_be_read_is_unknown_not_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = FakeApiServer()
    monkeypatch.setenv("KUBECONFIG", str(gone.kubeconfig(tmp_path / "kubeconfig")))
    gone.close()
    cache = namespace_cache(Metrics(), backoff=FAST)
    cache.start()
    try:
        assert cache.not_ready() == "the namespace cache has not listed the namespaces yet"
        with pytest.raises(
            NamespaceUnknown, match="namespace team-a is not in preemptguard's cache"
        ):
            cache.lookup("team-a")
        assert gauge(cache, "preemptguard_namespace_lookup_failures_total") == 1
    finally:
        cache.stop()


def test_without_a_cluster_there_is_nothing_to_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cache = namespace_cache(Metrics())
    assert cache.not_ready() is None
    assert cache.lookup("team-a").annotations == {}


def test_the_server_is_not_ready_until_the_namespaces_are_listed(
    tmp_path: Path, tls_dir: Path
) -> None:
    gone = FakeApiServer()
    kubeconfig = gone.kubeconfig(tmp_path / "kubeconfig")
    gone.close()
    port, metrics_port = free_port(), free_port()
    server = ServerProcess(
        serve_args(tls_dir, port, metrics_port),
        ca=tls_dir / "ca.crt",
        log=tmp_path / "server.log",
        port=port,
        metrics_port=metrics_port,
        env={"KUBECONFIG": str(kubeconfig)},
    )
    try:
        client = server.client()
        reply = client.get("/readyz")
        assert reply.status == 503
        assert reply.body == b"not ready: the namespace cache has not listed the namespaces yet\n"
        # Reviews are still answered: a namespace that cannot be read fails the review (500).
        answer = client.post("/mutate", fixture("create-pod-sweep-mutate"))
        assert answer.status == 500
        assert b"cannot be known" in answer.body
        client.close()
    finally:
        assert server.terminate() == 0, server.logs()
