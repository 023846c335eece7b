"""What reviews look up in the cluster, kept by watch caches (``webhook.kube.watchcache``).

- Namespaces: their annotations and labels (``together.ai/default-workload``). One the cache
  does not hold is read directly; when that fails too, the default class of its pods cannot be
  known, and the lookup says so (``NamespaceUnknown``) rather than guessing "no default".
  Without a cluster there are no namespace defaults, by configuration.
- PriorityClasses, for classes of the policy that name one. A 404 on a direct read means the
  class does not exist (the engine refuses the pod, saying so); any other failure means it
  cannot be known now (``PriorityClassUnknown``: the review fails and the failurePolicy
  decides). Without a cluster, the classes preemptguard ships and the system ones are assumed
  to exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from webhook.admission import lookups
from webhook.admission.review import ECHO_CHARS
from webhook.engine.decision import NamespaceMeta, Obj
from webhook.engine.findings import shorten
from webhook.engine.scheduling import PriorityClassInfo
from webhook.engine.workloads import mapping_at, string_map
from webhook.errors import NamespaceUnknown, PriorityClassUnknown
from webhook.kube.client import Cluster, path
from webhook.kube.reflector import BACKOFF
from webhook.kube.watchcache import Gauges, Resource, WatchCache
from webhook.server.metrics import Metrics

T = TypeVar("T")


def _namespace_unknown(namespace: str, why: str) -> Exception:
    return NamespaceUnknown(
        f"namespace {shorten(namespace, ECHO_CHARS)} is not in preemptguard's cache and "
        f"reading it from the API server failed ({shorten(why, 200)}), so the default class "
        "of its pods (together.ai/default-workload) cannot be known"
    )


def _namespace_meta(obj: Obj) -> NamespaceMeta:
    meta = mapping_at(obj, "metadata")
    return NamespaceMeta(
        annotations=MappingProxyType(string_map(meta.get("annotations"))),
        labels=MappingProxyType(string_map(meta.get("labels"))),
    )


NAMESPACES: Resource[NamespaceMeta] = Resource(
    kind="namespace",
    plural="namespaces",
    path=path("namespaces"),
    convert=_namespace_meta,
    # Not there: the API server will refuse the object for it anyway.
    missing=NamespaceMeta(),
    unknown=_namespace_unknown,
    disabled_effect="namespace annotations (together.ai/default-workload) are not applied",
)


def _priority_class_unknown(name: str, why: str) -> Exception:
    return PriorityClassUnknown(
        f"priority class {shorten(name)} is not in preemptguard's cache and reading it from "
        f"the API server failed ({shorten(why, 200)}), so the priority of the pod cannot be set"
    )


PRIORITY_CLASSES: Resource[PriorityClassInfo | None] = Resource(
    kind="priorityclass",
    plural="PriorityClasses",
    path=path("priorityclasses", group="scheduling.k8s.io"),
    # The list's items carry no kind: every one is a PriorityClass.
    convert=lambda obj: lookups.info_of({**obj, "kind": "PriorityClass"}),
    missing=None,
    unknown=_priority_class_unknown,
    disabled_effect="the system and shipped priority classes are assumed to exist",
)


class ClusterCache(WatchCache[T]):
    """A watch cache of the server: on the cluster ``Cluster.configured`` finds, counting into
    its own gauges of ``metrics``; without a cluster, lookups answer ``offline``."""

    def __init__(
        self,
        resource: Resource[T],
        metrics: Metrics,
        gauges: Gauges,
        offline: Mapping[str, T] | None = None,
        backoff: tuple[float, float] = BACKOFF,
    ) -> None:
        cluster, source = Cluster.configured()
        super().__init__(resource, cluster, gauges, source=source, backoff=backoff)
        self.metrics = metrics
        self._offline = offline

    def lookup(self, name: str) -> T:
        """The object as the cache holds it, else as read now; ``resource.missing`` when it
        does not exist; raises ``resource.unknown`` when it cannot be known."""
        if not self.enabled:
            return self._without_cluster(name)
        return super().lookup(name)

    def cached_lookup(self, name: str) -> T:
        """``lookup`` without reading the API server: raises ``NotCached`` where it would."""
        if not self.enabled:
            return self._without_cluster(name)
        return super().cached_lookup(name)

    def _without_cluster(self, name: str) -> T:
        if self._offline is None:
            return self.resource.missing
        return self._offline.get(name, self.resource.missing)


def namespace_cache(
    metrics: Metrics, backoff: tuple[float, float] = BACKOFF
) -> ClusterCache[NamespaceMeta]:
    """Annotations and labels of every namespace."""
    return ClusterCache(NAMESPACES, metrics, metrics.namespace_cache, backoff=backoff)


def priority_class_cache(
    metrics: Metrics, backoff: tuple[float, float] = BACKOFF
) -> ClusterCache[PriorityClassInfo | None]:
    """Every PriorityClass: name, value and preemption policy."""
    offline: dict[str, PriorityClassInfo | None] = {i.name: i for i in lookups.known_classes()}
    return ClusterCache(
        PRIORITY_CLASSES, metrics, metrics.priorityclass_cache, offline, backoff=backoff
    )
