"""Fixtures for the live-cluster code: the fake API server, a client of it, object builders, and
a clock that tests move themselves."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.fake_apiserver import FakeApiServer
from webhook.admission.core import Subject, judge
from webhook.admission.lookups import no_namespaces
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster
from webhook.loading.policies import builtin_policy

CLASS_LABEL = "together.ai/compute-class"
T0 = 1_900_000_000.0  # a fixed start for the fake clock (2030)

Obj = dict[str, Any]


class FakeClock:
    """Time that moves only when slept through; things scheduled for a moment happen then."""

    def __init__(self, start: float = T0) -> None:
        self.time = start
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self.time

    def at(self, offset: float, action: Callable[[], None]) -> None:
        """Run ``action`` when the clock reaches ``T0 + offset``... relative to now."""
        heapq.heappush(self._queue, (self.time + offset, next(self._order), action))

    def sleep(self, seconds: float) -> None:
        end = self.time + max(seconds, 0.0)
        while self._queue and self._queue[0][0] <= end:
            when, _, action = heapq.heappop(self._queue)
            self.time = max(self.time, when)
            action()
        self.time = end


@pytest.fixture
def policy() -> Policy:
    return builtin_policy()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def connect(fake: FakeApiServer, tmp_path: Path) -> Iterator[Callable[[], Cluster]]:
    """Clients of the fake API server (closed at the end)."""
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", namespace="preemptguard-system")
    made: list[Cluster] = []

    def make() -> Cluster:
        cluster = Cluster.connect(str(kubeconfig))
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def node(name: str, compute_class: str | None, **spec: Any) -> Obj:
    labels = {"kubernetes.io/hostname": name}
    if compute_class is not None:
        labels[CLASS_LABEL] = compute_class
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec}


def namespace(name: str, **annotations: str) -> Obj:
    return {"kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


def _controller_ref(owner: tuple[str, str, str]) -> Obj:
    """The controller ownerReference to ``owner`` (apiVersion, kind, name), uid ``uid-NAME`` as
    ``owned`` gives it."""
    api_version, kind, name = owner
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": True,
    }


def pod(
    name: str,
    ns: str = "team",
    *,
    node_name: str | None = None,
    workload: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    grace: int = 30,
    owner: tuple[str, str, str] | None = None,  # (apiVersion, kind, name)
    phase: str = "Running",
    placed: bool = False,
    policy: Policy | None = None,
    **spec: Any,
) -> Obj:
    """A pod as the API server stores it; ``placed``: as the webhook admitted it."""
    meta: Obj = {"name": name, "namespace": ns, "annotations": dict(annotations or {})}
    if workload:
        meta["annotations"]["together.ai/workload"] = workload
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [_controller_ref(owner)]
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "terminationGracePeriodSeconds": grace,
            **spec,
        },
        "status": {"phase": phase},
    }
    if placed:
        judged = judge(Subject(obj=obj, namespace=ns), policy or builtin_policy(), no_namespaces)
        obj = judged.decision.mutated
    if node_name:
        obj["spec"]["nodeName"] = node_name
    return obj


def owned(
    kind: str,
    name: str,
    ns: str = "team",
    *,
    uid: str | None = None,
    api_version: str | None = None,
    controller: tuple[str, str, str] | None = None,  # (apiVersion, kind, name) of its owner
    **extra: Any,
) -> Obj:
    """A workload as the API server stores it (uid ``uid-NAME`` unless given); ``api_version``
    for a kind of a CRD, ``controller`` for one made by another object."""
    api_version = api_version or {"ReplicaSet": "apps/v1", "Deployment": "apps/v1",
                                  "Job": "batch/v1", "StatefulSet": "apps/v1",
                                  "DaemonSet": "apps/v1", "CronJob": "batch/v1"}[kind]  # fmt: skip
    meta: Obj = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}"}
    if controller is not None:
        meta["ownerReferences"] = [_controller_ref(controller)]
    meta.update(extra.pop("metadata", {}))
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


def template(workload: str | None = None, **spec: Any) -> Obj:
    annotations = {"together.ai/workload": workload} if workload else {}
    return {
        "metadata": {"labels": {"app": "x"}, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }
