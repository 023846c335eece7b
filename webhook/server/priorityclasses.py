"""The cluster's PriorityClasses, for classes of the policy that name one, kept by a watch cache
(``webhook.server.watchcache``).

A class the cache does not hold is read directly: a 404 means it does not exist (the engine
refuses the pod, saying so); any other failure means it cannot be known now
(``PriorityClassUnknown``, the review fails and the failurePolicy decides). Without a
cluster, the classes preemptguard ships and the system ones are assumed to exist.
"""

from __future__ import annotations

from typing import Any

from webhook.admission import priorities
from webhook.engine.findings import shorten
from webhook.engine.scheduling import PREEMPT, PriorityClassInfo
from webhook.errors import PriorityClassUnknown
from webhook.server.metrics import Metrics
from webhook.server.watchcache import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    Resource,
    WatchCache,
)


def _unknown(name: str, why: str) -> Exception:
    return PriorityClassUnknown(
        f"priority class {shorten(name)} is not in preemptguard's cache and reading it from "
        f"the API server failed ({shorten(why, 200)}), so the priority of the pod cannot be set"
    )


def _info(obj: Any) -> PriorityClassInfo | None:
    policy = getattr(obj, "preemption_policy", None)
    return PriorityClassInfo(obj.metadata.name, int(obj.value), policy or PREEMPT)


PRIORITY_CLASSES: Resource[PriorityClassInfo | None] = Resource(
    kind="priorityclass",
    plural="PriorityClasses",
    api="SchedulingV1Api",
    list_method="list_priority_class",
    read_method="read_priority_class",
    convert=_info,
    missing=None,
    unknown=_unknown,
    disabled_effect="the system and shipped priority classes are assumed to exist",
)


class PriorityClassCache(WatchCache[PriorityClassInfo | None]):
    """Every PriorityClass: name, value and preemption policy."""

    @classmethod
    def from_environment(
        cls, metrics: Metrics, backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX)
    ) -> PriorityClassCache:
        return cls.in_environment(PRIORITY_CLASSES, metrics, metrics.priorityclass_cache, backoff)

    def lookup(self, name: str) -> PriorityClassInfo | None:
        """The class; None when it does not exist; raises ``PriorityClassUnknown`` when it
        cannot be known."""
        if not self.enabled:
            return priorities.offline()(name)
        return super().lookup(name)

    def cached_lookup(self, name: str) -> PriorityClassInfo | None:
        """``lookup`` without reading the API server: raises ``NotCached`` where it would."""
        if not self.enabled:
            return priorities.offline()(name)
        return super().cached_lookup(name)
