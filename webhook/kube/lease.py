"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it:
one replica holds the Lease and renews it; the others take it over only after it has gone
unrenewed for its whole duration, as measured by their own clock (no trust in the holder's).
Every write carries the resourceVersion read before it, so two candidates never both win.

A candidate that cannot use the Lease (no permission, no namespace, no API server) keeps trying,
since permissions may be granted later, and says why in a warning at most once a minute
(``WARN_EVERY_SECONDS``) while it lasts: it leads nothing meanwhile, so the log must say so.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

import structlog

from webhook.kube.client import Cluster, ClusterError, path
from webhook.kube.clock import Clock, format_time

GROUP, VERSION = "coordination.k8s.io", "v1"
VERBS = "get, create and update"
# While the Lease cannot be used, a warning at most this often (the first at once).
WARN_EVERY_SECONDS = 60.0

log = structlog.get_logger(component="webhook.kube.lease")


def candidate_identity() -> str:
    """This replica's name in a Lease: the pod's name (``POD_NAME`` from the downward API,
    else the hostname), made unique, as a restarted container is a new candidate."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


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
        self._warned_at: float | None = None  # the last warning of a failure still lasting

    @property
    def _path(self) -> str:
        s = self.settings
        return path("leases", group=GROUP, version=VERSION, namespace=s.namespace, name=s.name)

    def step(self) -> bool:
        """Acquire or renew the Lease if this candidate may; returns whether it leads now."""
        now = self.clock.now()
        try:
            self.leader = self._try(now)
        except ClusterError as exc:
            # Refused or unreachable: keep leading only until the renew deadline, and try again
            # at the next step (a permission granted later, an API server back).
            if self.leader and now - self._renewed_at > self.settings.renew_deadline:
                self.leader = False
            self._warn(exc, now)
            return self.leader
        if self._warned_at is not None:
            self._warned_at = None
            log.info("lease_usable", lease=self.name, leading=self.leader)
        return self.leader

    @property
    def name(self) -> str:
        """The Lease as ``namespace/name``."""
        return f"{self.settings.namespace}/{self.settings.name}"

    def _warn(self, exc: ClusterError, now: float) -> None:
        """Say why the Lease cannot be used: at once, then at most every
        ``WARN_EVERY_SECONDS`` while it lasts (a step runs every few seconds)."""
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_SECONDS:
            return
        self._warned_at = now
        log.warning(
            "lease_unusable",
            lease=self.name,
            status=exc.status or None,
            why=self._why(exc),
            error=str(exc),
            leading=self.leader,
            retry_every_s=self.settings.retry,
        )

    def _why(self, exc: ClusterError) -> str:
        s = self.settings
        needs = (
            f"{VERBS} on leases.{GROUP} in namespace {s.namespace} (the Lease {s.name}); "
            "this replica reports nothing until it holds the Lease"
        )
        if exc.status == 401:
            return f"the API server did not accept this replica's credentials; it needs {needs}"
        if exc.status == 403:
            return f"forbidden: this replica's service account needs {needs}"
        if exc.status == 404:
            return (
                f"not found: namespace {s.namespace} does not exist (or {GROUP}/{VERSION} is "
                f"not served); it needs {needs}"
            )
        return "the API server could not be used; trying again"

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
