"""Objects of one kind by name, kept by list + watch (``Reflector``) instead of a request per
admission.

Lookups read the cache. An object the cache does not hold (created a moment ago, or not
listed yet) is read from the API server directly, with a short timeout; when that fails too,
the lookup says so (``Resource.unknown``) rather than guessing: a guess could let a pod
through unplaced. ``not_ready`` says why reviews cannot rely on the cache until its first
full list. Without a cluster (no ``KUBECONFIG``, not in a pod) the cache is disabled, by
configuration, and the log says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar
from urllib.parse import quote

import structlog

from webhook.errors import NotCached
from webhook.kube.client import Cluster, ClusterError, Obj
from webhook.kube.reflector import BACKOFF, Reflector

# A direct read happens inside a review, which the API server waits for 3 s at most.
LOOKUP_TIMEOUT = (0.5, 1.0)

log = structlog.get_logger(component="webhook.kube.watchcache")

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Resource(Generic[T]):
    """Where one kind is listed, and what the cache keeps of each object."""

    kind: str  # in log lines: "namespace", "priorityclass"
    plural: str  # in messages: "namespaces", "PriorityClasses"
    path: str  # the collection: /api/v1/namespaces
    convert: Callable[[Obj], T]
    # What a lookup returns for an object the API server says does not exist.
    missing: T
    # The exception a lookup raises when the object cannot be known, from the name and why.
    unknown: Callable[[str, str], Exception]
    # What is lost while the cache is disabled, for the log.
    disabled_effect: str


class Settable(Protocol):
    def set(self, value: float) -> None: ...


class Countable(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Gauges(Protocol):
    """Where a cache reports its state (the server's ``CacheMetrics``)."""

    @property
    def synced(self) -> Settable: ...
    @property
    def size(self) -> Settable: ...
    @property
    def lookup_failures(self) -> Countable: ...
    @property
    def watch_errors(self) -> Countable: ...


class WatchCache(Generic[T]):
    """Every object of ``resource``, listed then watched in a daemon thread; disabled when
    ``cluster`` is None."""

    def __init__(
        self,
        resource: Resource[T],
        cluster: Callable[[], Cluster] | None,
        gauges: Gauges,
        *,
        source: str,
        backoff: tuple[float, float] = BACKOFF,
    ) -> None:
        self.resource, self._cluster, self.gauges = resource, cluster, gauges
        self.source, self.backoff = source, backoff
        self._known: dict[str, T] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.synced = False
        self._listed_once = False
        gauges.synced.set(0)

    @property
    def enabled(self) -> bool:
        return self._cluster is not None

    def cached(self, name: str) -> T | None:
        """What the cache last saw of ``name``, without reading the API server."""
        return self._known.get(name)

    def cached_lookup(self, name: str) -> T:
        """What ``lookup`` answers when the cache holds ``name``; raises ``NotCached`` when it
        would have to read the API server."""
        if name in self._known:
            return self._known[name]
        raise NotCached(f"{self.resource.kind} {name[:100]} is not cached")

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
        if self._cluster is None or self._listed_once:
            return None
        return f"the {self.resource.kind} cache has not listed the {self.resource.plural} yet"

    def _read(self, name: str) -> T:
        if self._cluster is None:
            raise self.resource.unknown(name, "no cluster is configured")
        if not name:
            return self.resource.missing
        where = f"{self.resource.path}/{quote(name, safe='')}"
        try:
            obj = self._cluster().get(where, timeout=LOOKUP_TIMEOUT)
        except ClusterError as exc:
            if exc.not_found:
                return self.resource.missing
            self.gauges.lookup_failures.inc()
            raise self.resource.unknown(name, str(exc)) from None
        return self.resource.convert(obj)

    def start(self) -> None:
        if self._cluster is None:
            log.warning(
                f"{self.resource.kind}_cache_disabled",
                reason="no cluster configured: KUBECONFIG is unset and this is not a pod",
                effect=self.resource.disabled_effect,
            )
            return
        reflector = Reflector(
            cluster=self._cluster,
            where=self.resource.path,
            take=_as_listed,
            listed=self._listed,
            changed=self._changed,
            failed=self._failed,
            backoff=self.backoff,
        )
        name = f"{self.resource.kind}-watch"
        self._thread = threading.Thread(
            target=reflector.run, args=(self._stop,), name=name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def _listed(self, items: list[Obj]) -> None:
        self._known = {name: self.resource.convert(o) for o in items if (name := _name(o))}
        self._listed_once = True
        self._set_synced(True)

    def _changed(self, kind: str, obj: Obj) -> None:
        name = _name(obj)
        if not name:
            return
        if kind == "DELETED":
            self._known.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._known[name] = self.resource.convert(obj)
        self.gauges.size.set(len(self._known))

    def _set_synced(self, synced: bool) -> None:
        if synced and not self.synced:
            log.info(
                f"{self.resource.kind}_cache_synced", objects=len(self._known), source=self.source
            )
        self.synced = synced
        self.gauges.synced.set(1 if synced else 0)
        self.gauges.size.set(len(self._known))

    def _failed(self, exc: Exception, delay: float) -> None:
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


def _name(obj: Obj) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _as_listed(obj: Obj) -> Obj:
    return obj
