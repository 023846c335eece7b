"""Namespace annotations from the cluster, kept by list + watch instead of a request per admission.

An admission must not wait on the API server that is waiting on it, so lookups only read the
cache. Without a cluster (no ``KUBECONFIG``, not in a pod) or while it is unreachable, lookups
return what the cache last knew (nothing, at first), and the state shows in logs and metrics.
This is the only module that imports ``kubernetes``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from webhook.logs import get_logger
from webhook.metrics import Metrics

# Servers end a watch after this long; a fresh watch from the last version follows.
WATCH_SECONDS = 300
CONNECT_TIMEOUT = 5.0
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
EMPTY: Mapping[str, str] = MappingProxyType({})

log = get_logger("webhook.namespaces")

ApiFactory = Callable[[], Any]


class NamespaceCache:
    """Annotations of every namespace, listed then watched in a daemon thread."""

    def __init__(
        self,
        api_factory: ApiFactory | None,
        metrics: Metrics,
        *,
        source: str,
        backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX),
    ) -> None:
        self._api_factory, self.metrics, self.source = api_factory, metrics, source
        self.backoff = backoff
        self._annotations: dict[str, Mapping[str, str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self.synced = False
        metrics.namespace_cache_synced.set(0)

    @classmethod
    def from_environment(
        cls, metrics: Metrics, backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX)
    ) -> NamespaceCache:
        """From ``KUBECONFIG``, else the in-cluster service account, else disabled."""
        kubeconfig = os.environ.get("KUBECONFIG")
        if kubeconfig:
            source = f"KUBECONFIG={kubeconfig}"
            return cls(lambda: _kubeconfig_api(kubeconfig), metrics, source=source, backoff=backoff)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            source = "in-cluster service account"
            return cls(_in_cluster_api, metrics, source=source, backoff=backoff)
        return cls(None, metrics, source="none")

    def annotations(self, namespace: str | None) -> Mapping[str, str]:
        """The namespace's annotations as last seen; empty when unknown."""
        if namespace is None:
            return EMPTY
        return self._annotations.get(namespace, EMPTY)

    def start(self) -> None:
        if self._api_factory is None:
            log.warning(
                "namespace_cache_disabled",
                reason="no cluster configured: KUBECONFIG is unset and this is not a pod",
                effect="namespace annotations (together.ai/default-workload) are not applied",
            )
            return
        self._thread = threading.Thread(target=self._run, name="namespace-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def _run(self) -> None:
        shortest, longest = self.backoff
        delay = shortest
        api = None
        while not self._stop.is_set():
            try:
                api = api or self._api_factory()  # type: ignore[misc]
                version = self._list(api)
                delay = shortest
                self._follow(api, version)
            except Exception as exc:  # noqa: BLE001
                # Whatever broke (network, auth, 410 Gone), the cure is the same: relist.
                self._unsynced(exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, longest)

    def _list(self, api: Any) -> str:
        listing = api.list_namespace(_request_timeout=(CONNECT_TIMEOUT, 60))
        self._annotations = {
            ns.metadata.name: _frozen(ns.metadata.annotations) for ns in listing.items
        }
        self._set_synced(True)
        return str(listing.metadata.resource_version)

    def _follow(self, api: Any, version: str) -> None:
        while not self._stop.is_set():
            self._watch = _kubernetes("watch").Watch()
            stream = self._watch.stream(
                api.list_namespace,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                allow_watch_bookmarks=True,
                _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 30),
            )
            for event in stream:
                version = self._apply(event) or version

    def _apply(self, event: Mapping[str, Any]) -> str | None:
        meta = event["object"].metadata
        if event["type"] == "DELETED":
            self._annotations.pop(meta.name, None)
        elif event["type"] in ("ADDED", "MODIFIED"):
            self._annotations[meta.name] = _frozen(meta.annotations)
        self.metrics.namespace_cache_namespaces.set(len(self._annotations))
        return str(meta.resource_version) if meta.resource_version else None

    def _set_synced(self, synced: bool) -> None:
        if synced and not self.synced:
            log.info(
                "namespace_cache_synced", namespaces=len(self._annotations), source=self.source
            )
        self.synced = synced
        self.metrics.namespace_cache_synced.set(1 if synced else 0)
        self.metrics.namespace_cache_namespaces.set(len(self._annotations))

    def _unsynced(self, exc: Exception, delay: float) -> None:
        if self._stop.is_set():
            return
        self._set_synced(False)
        self.metrics.namespace_watch_errors.inc()
        log.warning(
            "namespace_cache_unsynced",
            error=" ".join(str(exc).split())[:300],
            retry_in_s=delay,
            source=self.source,
            effect="admissions use the namespace annotations last seen",
        )


def _frozen(annotations: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(annotations or {}))


def _kubernetes(module: str) -> Any:
    """A module of the ``kubernetes`` client, imported on first use (it is slow to import)."""
    return importlib.import_module(f"kubernetes.{module}")


def _kubeconfig_api(path: str) -> Any:
    api_client = _kubernetes("config").new_client_from_config(config_file=path)
    return _kubernetes("client").CoreV1Api(api_client)


def _in_cluster_api() -> Any:
    client = _kubernetes("client")
    configuration = client.Configuration()
    _kubernetes("config").load_incluster_config(client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))
