"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it:
one replica holds the Lease and renews it; the others take it over only after it has gone
unrenewed for its whole duration, as measured by their own clock (no trust in the holder's).
Every write carries the resourceVersion read before it, so two candidates never both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.cluster.client import Cluster, ClusterError, path
from webhook.cluster.clock import Clock
from webhook.cluster.reclaims import format_time

GROUP, VERSION = "coordination.k8s.io", "v1"


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str = "preemptguard-observer"
    duration: float = 15.0  # a holder silent this long loses the Lease
    renew_deadline: float = 10.0  # a holder that cannot renew for this long steps down
    retry: float = 2.0  # how often candidates try and the holder renews


class LeaderElector:
    """One candidate; call ``step`` every ``settings.retry`` seconds."""

    def __init__(
        self, cluster: Cluster, settings: LeaseSettings, identity: str, clock: Clock
    ) -> None:
        self.cluster, self.settings, self.identity, self.clock = cluster, settings, identity, clock
        self.leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0

    @property
    def _path(self) -> str:
        s = self.settings
        return path("leases", group=GROUP, version=VERSION, namespace=s.namespace, name=s.name)

    def step(self) -> bool:
        """Acquire or renew the Lease if this candidate may; returns whether it leads now."""
        now = self.clock.now()
        try:
            self.leader = self._try(now)
        except ClusterError:
            # The API server cannot be reached: keep leading only until the renew deadline.
            if self.leader and now - self._renewed_at > self.settings.renew_deadline:
                self.leader = False
        return self.leader

    def _try(self, now: float) -> bool:
        try:
            lease = self.cluster.get(self._path)
        except ClusterError as exc:
            if not exc.not_found:
                raise
            return self._create(now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or self.settings.duration)
        if holder and holder != self.identity and self._observed_at + duration > now:
            return False
        mine = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.settings.duration),
            "acquireTime": spec.get("acquireTime") if mine else format_time(now, micro=True),
            "renewTime": format_time(now, micro=True),
            "leaseTransitions": transitions,
        }
        try:
            self.cluster.update(self._path, lease)
        except ClusterError as exc:
            if exc.conflict:
                return False  # another candidate wrote first
            raise
        self._renewed_at = now
        return True

    def _create(self, now: float) -> bool:
        stamp = format_time(now, micro=True)
        s = self.settings
        lease = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Lease",
            "metadata": {"name": s.name, "namespace": s.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(s.duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            self.cluster.create(path("leases", group=GROUP, version=VERSION,
                                     namespace=s.namespace), lease)  # fmt: skip
        except ClusterError as exc:
            if exc.conflict:
                return False
            raise
        self._renewed_at = now
        return True

    def release(self) -> None:
        """Give the Lease up at shutdown, so that a standby takes over at once."""
        if not self.leader:
            return
        self.leader = False
        try:
            lease = self.cluster.get(self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1}
            self.cluster.update(self._path, lease)
        except ClusterError:
            return
