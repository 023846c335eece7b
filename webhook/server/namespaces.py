"""Namespace annotations from the cluster, kept by list + watch instead of a request per admission.

Lookups read the cache. A namespace the cache does not hold (created a moment ago, or not
listed yet) is read from the API server directly, with a short timeout; when that fails too,
the default class of its pods cannot be known, and the lookup says so (``NamespaceUnknown``)
rather than guessing "no default": a guess could let a pod through unplaced. ``/readyz``
waits for the first full list. Without a cluster (no ``KUBECONFIG``, not in a pod) there are
no namespace defaults, by configuration, and the log says so.
This is the only module that imports ``kubernetes``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from webhook.admission.namespaces import NamespaceMeta
from webhook.admission.review import ECHO_CHARS
from webhook.engine.findings import shorten
from webhook.errors import NamespaceUnknown
from webhook.server.logs import get_logger
from webhook.server.metrics import Metrics

# Servers end a watch after this long; a fresh watch from the last version follows.
WATCH_SECONDS = 300
CONNECT_TIMEOUT = 5.0
# A direct read happens inside a review, which the API server waits for 3 s at most.
LOOKUP_TIMEOUT = (0.5, 1.0)
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
EMPTY: Mapping[str, str] = MappingProxyType({})

log = get_logger("webhook.server.namespaces")

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
        self._known: dict[str, NamespaceMeta] = {}
        self._direct_api: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self.synced = False
        self._listed_once = False
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
        """The namespace's annotations as the cache last saw them; empty when unknown."""
        meta = self._known.get(namespace) if namespace is not None else None
        return meta.annotations if meta is not None else EMPTY

    def lookup(self, namespace: str) -> NamespaceMeta:
        """The namespace's annotations and labels; raises ``NamespaceUnknown`` when they
        cannot be known (not cached, and the API server cannot be read)."""
        if self._api_factory is None:
            return NamespaceMeta()
        # While a broken watch is being re-established the cache may lag, as an informer's
        # does; a namespace it has never seen is read directly.
        meta = self._known.get(namespace)
        return meta if meta is not None else self._read(namespace)

    def not_ready(self) -> str | None:
        """Why reviews cannot rely on namespace defaults yet, if they cannot.

        Only until the first full list: a watch that breaks later is covered by direct reads,
        and turning every replica unready at once would leave no webhook to answer.
        """
        if self._api_factory is None or self._listed_once:
            return None
        return "the namespace cache has not listed the namespaces yet"

    def _read(self, namespace: str) -> NamespaceMeta:
        try:
            if self._direct_api is None:
                self._direct_api = self._api_factory()  # type: ignore[misc]
            ns = self._direct_api.read_namespace(namespace, _request_timeout=LOOKUP_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - every failure means the same: unknown
            if getattr(exc, "status", None) == 404:
                # Not there: the API server will refuse the object for it anyway.
                return NamespaceMeta()
            self.metrics.namespace_lookup_failures.inc()
            raise NamespaceUnknown(
                f"namespace {shorten(namespace, ECHO_CHARS)} is not in preemptguard's cache and "
                f"reading it from the API server failed ({shorten(_one_line(exc), 200)}), so the "
                "default class of its pods (together.ai/default-workload) cannot be known"
            ) from None
        return _meta(ns.metadata)

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
        self._known = {ns.metadata.name: _meta(ns.metadata) for ns in listing.items}
        self._listed_once = True
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
            self._known.pop(meta.name, None)
        elif event["type"] in ("ADDED", "MODIFIED"):
            self._known[meta.name] = _meta(meta)
        self.metrics.namespace_cache_namespaces.set(len(self._known))
        return str(meta.resource_version) if meta.resource_version else None

    def _set_synced(self, synced: bool) -> None:
        if synced and not self.synced:
            log.info("namespace_cache_synced", namespaces=len(self._known), source=self.source)
        self.synced = synced
        self.metrics.namespace_cache_synced.set(1 if synced else 0)
        self.metrics.namespace_cache_namespaces.set(len(self._known))

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
            effect="each review reads its namespace from the API server until the cache relists",
        )


def _meta(metadata: Any) -> NamespaceMeta:
    return NamespaceMeta(annotations=_frozen(metadata.annotations), labels=_frozen(metadata.labels))


def _frozen(values: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(values or {}))


def _one_line(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return " ".join(str(reason or exc).split())


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
