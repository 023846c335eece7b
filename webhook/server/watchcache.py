"""Objects of one kind from the cluster, kept by list + watch instead of a request per admission.

Lookups read the cache. An object the cache does not hold (created a moment ago, or not
listed yet) is read from the API server directly, with a short timeout; when that fails too,
the lookup says so (``Resource.unknown``) rather than guessing: a guess could let a pod
through unplaced. ``/readyz`` waits for the first full list. Without a cluster (no
``KUBECONFIG``, not in a pod) the cache is disabled, by configuration, and the log says so.
This module and the ones that describe its resources are the only ones that import
``kubernetes``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from webhook.engine.findings import shorten
from webhook.errors import NotCached
from webhook.server.logs import get_logger
from webhook.server.metrics import CacheMetrics, Metrics

# Servers end a watch after this long; a fresh watch from the last version follows.
WATCH_SECONDS = 300
CONNECT_TIMEOUT = 5.0
# A direct read happens inside a review, which the API server waits for 3 s at most.
LOOKUP_TIMEOUT = (0.5, 1.0)
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0

log = get_logger("webhook.server.watchcache")

T = TypeVar("T")
ApiFactory = Callable[[], Any]


@dataclass(frozen=True, kw_only=True)
class Resource(Generic[T]):
    """How to list, watch and read one kind, and what the cache keeps of each object."""

    kind: str  # in log lines: "namespace", "priorityclass"
    plural: str  # in messages: "namespaces", "PriorityClasses"
    api: str  # the kubernetes client class: CoreV1Api, SchedulingV1Api
    list_method: str
    read_method: str
    convert: Callable[[Any], T]
    # What a lookup returns for an object the API server says does not exist.
    missing: T
    # The exception a lookup raises when the object cannot be known, from the name and why.
    unknown: Callable[[str, str], Exception]
    # What is lost while the cache is disabled, for the log.
    disabled_effect: str


class WatchCache(Generic[T]):
    """Every object of ``resource``, listed then watched in a daemon thread."""

    # The server's metrics, of which ``gauges`` are this cache's (set by ``in_environment``).
    metrics: Metrics

    @classmethod
    def in_environment(
        cls,
        resource: Resource[T],
        metrics: Metrics,
        gauges: CacheMetrics,
        backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX),
    ) -> Self:
        """The cache of ``resource`` on the cluster ``from_environment`` finds (disabled
        without one), counting into ``gauges`` of ``metrics``.

        The one way a server cache is made, whatever it holds, so that every kind is
        connected, logged and measured alike.
        """
        factory, source = from_environment(resource.api)
        cache = cls(resource, factory, gauges, source=source, backoff=backoff)
        cache.metrics = metrics
        return cache

    def __init__(
        self,
        resource: Resource[T],
        api_factory: ApiFactory | None,
        gauges: CacheMetrics,
        *,
        source: str,
        backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX),
    ) -> None:
        self.resource, self._api_factory, self.gauges = resource, api_factory, gauges
        self.source, self.backoff = source, backoff
        self._known: dict[str, T] = {}
        self._direct_api: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self.synced = False
        self._listed_once = False
        gauges.synced.set(0)

    @property
    def enabled(self) -> bool:
        return self._api_factory is not None

    def cached(self, name: str) -> T | None:
        """What the cache last saw of ``name``, without reading the API server."""
        return self._known.get(name)

    def snapshot(self) -> dict[str, T]:
        return dict(self._known)

    def cached_lookup(self, name: str) -> T:
        """What ``lookup`` answers when the cache holds ``name``; raises ``NotCached`` when it
        would have to read the API server."""
        if name in self._known:
            return self._known[name]
        raise NotCached(f"{self.resource.kind} {shorten(name, 100)} is not cached")

    def lookup(self, name: str) -> T:
        """The object's cached view; read directly when the cache does not hold it (while a
        broken watch is re-established the cache may lag, as an informer's does)."""
        found = self._known.get(name)
        return found if found is not None else self._read(name)

    def not_ready(self) -> str | None:
        """Why reviews cannot rely on the cache yet, if they cannot.

        Only until the first full list: a watch that breaks later is covered by direct reads,
        and turning every replica unready at once would leave no webhook to answer.
        """
        if self._api_factory is None or self._listed_once:
            return None
        return f"the {self.resource.kind} cache has not listed the {self.resource.plural} yet"

    def _read(self, name: str) -> T:
        try:
            if self._direct_api is None:
                self._direct_api = self._api_factory()  # type: ignore[misc]
            read = getattr(self._direct_api, self.resource.read_method)
            obj = read(name, _request_timeout=LOOKUP_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - every failure means the same: unknown
            if getattr(exc, "status", None) == 404:
                return self.resource.missing
            self.gauges.lookup_failures.inc()
            raise self.resource.unknown(name, _one_line(exc)) from None
        return self.resource.convert(obj)

    def start(self) -> None:
        if self._api_factory is None:
            log.warning(
                f"{self.resource.kind}_cache_disabled",
                reason="no cluster configured: KUBECONFIG is unset and this is not a pod",
                effect=self.resource.disabled_effect,
            )
            return
        name = f"{self.resource.kind}-watch"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
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
        listing = getattr(api, self.resource.list_method)(_request_timeout=(CONNECT_TIMEOUT, 60))
        self._known = {o.metadata.name: self.resource.convert(o) for o in listing.items}
        self._listed_once = True
        self._set_synced(True)
        return str(listing.metadata.resource_version)

    def _follow(self, api: Any, version: str) -> None:
        while not self._stop.is_set():
            self._watch = kubernetes("watch").Watch()
            stream = self._watch.stream(
                getattr(api, self.resource.list_method),
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                allow_watch_bookmarks=True,
                _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 30),
            )
            for event in stream:
                version = self._apply(event) or version

    def _apply(self, event: Any) -> str | None:
        obj = event["object"]
        meta = obj.metadata
        if event["type"] == "DELETED":
            self._known.pop(meta.name, None)
        elif event["type"] in ("ADDED", "MODIFIED"):
            self._known[meta.name] = self.resource.convert(obj)
        self.gauges.size.set(len(self._known))
        return str(meta.resource_version) if meta.resource_version else None

    def _set_synced(self, synced: bool) -> None:
        if synced and not self.synced:
            log.info(
                f"{self.resource.kind}_cache_synced", objects=len(self._known), source=self.source
            )
        self.synced = synced
        self.gauges.synced.set(1 if synced else 0)
        self.gauges.size.set(len(self._known))

    def _unsynced(self, exc: Exception, delay: float) -> None:
        if self._stop.is_set():
            return
        self._set_synced(False)
        self.gauges.watch_errors.inc()
        log.warning(
            f"{self.resource.kind}_cache_unsynced",
            error=" ".join(str(exc).split())[:300],
            retry_in_s=delay,
            source=self.source,
            effect="each review reads what it needs from the API server until the cache relists",
        )


def from_environment(api: str) -> tuple[ApiFactory | None, str]:
    """An API factory from ``KUBECONFIG``, else the in-cluster service account, else none;
    and where it came from, for the log."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        return (lambda: _kubeconfig_api(kubeconfig, api)), f"KUBECONFIG={kubeconfig}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return (lambda: _in_cluster_api(api)), "in-cluster service account"
    return None, "none"


def _one_line(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return " ".join(str(reason or exc).split())


def kubernetes(module: str) -> Any:
    """A module of the ``kubernetes`` client, imported on first use (it is slow to import)."""
    return importlib.import_module(f"kubernetes.{module}")


def _kubeconfig_api(path: str, api: str) -> Any:
    api_client = kubernetes("config").new_client_from_config(config_file=path)
    return getattr(kubernetes("client"), api)(api_client)


def _in_cluster_api(api: str) -> Any:
    client = kubernetes("client")
    configuration = client.Configuration()
    kubernetes("config").load_incluster_config(client_configuration=configuration)
    return getattr(client, api)(client.ApiClient(configuration))
