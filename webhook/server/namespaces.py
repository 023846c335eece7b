"""Namespace annotations and labels from the cluster (``together.ai/default-workload``), kept
by a watch cache (``webhook.server.watchcache``).

A namespace the cache does not hold is read directly; when that fails too, the default class
of its pods cannot be known, and the lookup says so (``NamespaceUnknown``) rather than
guessing "no default". Without a cluster there are no namespace defaults, by configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from webhook.admission.namespaces import NamespaceMeta
from webhook.admission.review import ECHO_CHARS
from webhook.engine.findings import shorten
from webhook.errors import NamespaceUnknown
from webhook.server.metrics import Metrics
from webhook.server.watchcache import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    Resource,
    WatchCache,
)

EMPTY: Mapping[str, str] = MappingProxyType({})


def _unknown(namespace: str, why: str) -> Exception:
    return NamespaceUnknown(
        f"namespace {shorten(namespace, ECHO_CHARS)} is not in preemptguard's cache and "
        f"reading it from the API server failed ({shorten(why, 200)}), so the default class "
        "of its pods (together.ai/default-workload) cannot be known"
    )


def _meta(obj: Any) -> NamespaceMeta:
    metadata = obj.metadata
    return NamespaceMeta(annotations=_frozen(metadata.annotations), labels=_frozen(metadata.labels))


def _frozen(values: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(values or {}))


NAMESPACES: Resource[NamespaceMeta] = Resource(
    kind="namespace",
    plural="namespaces",
    api="CoreV1Api",
    list_method="list_namespace",
    read_method="read_namespace",
    convert=_meta,
    # Not there: the API server will refuse the object for it anyway.
    missing=NamespaceMeta(),
    unknown=_unknown,
    disabled_effect="namespace annotations (together.ai/default-workload) are not applied",
)


class NamespaceCache(WatchCache[NamespaceMeta]):
    """Annotations and labels of every namespace."""

    @classmethod
    def from_environment(
        cls, metrics: Metrics, backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX)
    ) -> NamespaceCache:
        """From ``KUBECONFIG``, else the in-cluster service account, else disabled."""
        return cls.in_environment(NAMESPACES, metrics, metrics.namespace_cache, backoff)

    def annotations(self, namespace: str | None) -> Mapping[str, str]:
        """The namespace's annotations as the cache last saw them; empty when unknown."""
        meta = self.cached(namespace) if namespace is not None else None
        return meta.annotations if meta is not None else EMPTY

    def lookup(self, namespace: str) -> NamespaceMeta:
        """The namespace's annotations and labels; raises ``NamespaceUnknown`` when they
        cannot be known (not cached, and the API server cannot be read)."""
        if not self.enabled:
            return NamespaceMeta()
        return super().lookup(namespace)

    def cached_lookup(self, namespace: str) -> NamespaceMeta:
        """``lookup`` without reading the API server: raises ``NotCached`` where it would."""
        if not self.enabled:
            return NamespaceMeta()
        return super().cached_lookup(namespace)
