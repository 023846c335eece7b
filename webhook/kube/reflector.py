"""One collection listed, then watched from the list's version, for as long as asked.

What client-go's reflector does: a watch the server ends is resumed from the last version seen
(bookmarks included); any failure (network, authentication, a version too old: 410 Gone) is
cured the same way, by listing again, after a backoff that doubles up to ``backoff[1]``
(none after a 410: the version is stale, the server is fine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from webhook.kube.client import WATCH_SECONDS, Cluster, ClusterError, Obj

BACKOFF = (1.0, 30.0)
T = TypeVar("T")


@dataclass(kw_only=True)
class Reflector(Generic[T]):
    """Lists and watches ``where`` on ``cluster`` (from ``cluster()``, connected on first use).

    ``listed`` gets every item of each list; ``changed`` each event after it (``ADDED``,
    ``MODIFIED``, ``DELETED``) with its object; ``failed`` each failure and the seconds until
    the next try. ``version``: a list already made, to watch from (empty: list first).
    ``take`` makes of every object, as it arrives, what is handed on (what nothing reads is
    dropped page by page); an object it makes None of is not handed on.
    """

    cluster: Callable[[], Cluster]
    where: str
    take: Callable[[Obj], T | None]
    listed: Callable[[list[T]], None]
    changed: Callable[[str, T], None]
    failed: Callable[[Exception, float], None]
    params: Mapping[str, str] = field(default_factory=dict)
    version: str = ""
    backoff: tuple[float, float] = BACKOFF
    watch_seconds: int = WATCH_SECONDS

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set; never raises."""
        shortest, longest = self.backoff
        delay = shortest
        while not stop.is_set():
            try:
                self._list_and_watch(stop)
                delay = shortest
            except Exception as exc:  # noqa: BLE001 - whatever broke, the cure is a relist
                if stop.is_set():
                    return
                self.version = ""
                self.failed(exc, delay)
                if not (isinstance(exc, ClusterError) and exc.gone):
                    stop.wait(delay)
                    delay = min(delay * 2, longest)

    def _list_and_watch(self, stop: threading.Event) -> None:
        cluster = self.cluster()
        if not self.version:
            listing = cluster.collect(self.where, self.take, params=self.params)
            self.listed(listing.items)
            self.version = listing.resource_version
        events = cluster.watch(
            self.where,
            resource_version=self.version,
            params=self.params,
            seconds=self.watch_seconds,
        )
        for event in events:
            if stop.is_set():
                return
            obj = event.get("object")
            obj = obj if isinstance(obj, dict) else {}
            meta = obj.get("metadata")
            version = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if isinstance(version, str) and version:
                self.version = version
            kind = event.get("type")
            if kind != "BOOKMARK" and isinstance(kind, str):
                kept = self.take(obj)
                if kept is not None:
                    self.changed(kind, kept)
