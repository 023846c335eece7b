"""The serving certificate, issued and rotated by the webhook itself when no cert-manager does it.

The pair lives in one Secret: ``ca.crt`` (the CA bundle: the CA that signs now first, then an
older one still trusted during a rotation), ``ca.key``, ``tls.crt`` and ``tls.key``. One
replica at a time, the holder of a Lease, renews what is due (``renewal``) and keeps the
``caBundle`` of the webhook's own configurations equal to ``ca.crt``. Every replica copies the
Secret's pair into local files, which the server's certificate watch then loads.

No review fails across a rotation: a new CA enters the bundle, and the bundle enters the
webhook configurations, before any replica can serve a certificate it signed; the previous CA
leaves the bundle only ``overlap`` after the new one signed its first pair, when every replica
serves that.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from webhook.errors import CertificateError
from webhook.kube.client import Cluster, ClusterError, path
from webhook.kube.clock import Clock, SystemClock
from webhook.kube.lease import LeaderElector, LeaseSettings
from webhook.server import certs
from webhook.server.logs import get_logger
from webhook.server.metrics import CertificateMetrics
from webhook.server.reload import check_pair, write_private

CA_BUNDLE, CA_KEY, CERT, KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
ADMISSION = "admissionregistration.k8s.io"
CONFIGURATION_KINDS = {
    "mutating": "mutatingwebhookconfigurations",
    "validating": "validatingwebhookconfigurations",
}

log = get_logger("webhook.server.rotation")


@dataclass(frozen=True)
class Lifetimes:
    """How long what is issued stays valid, and how long before its end it is renewed."""

    serving: dt.timedelta = dt.timedelta(days=90)
    serving_renew_before: dt.timedelta = dt.timedelta(days=30)
    ca: dt.timedelta = dt.timedelta(days=5 * 365)
    ca_renew_before: dt.timedelta = dt.timedelta(days=365)
    # How long the previous CA stays trusted after the first certificate of the next one.
    overlap: dt.timedelta = dt.timedelta(minutes=10)

    def problems(self) -> list[str]:
        """What makes these lifetimes unusable, in words."""
        found = []
        if self.serving_renew_before >= self.serving:
            found.append("the serving certificate would be renewed as soon as it is issued")
        if self.ca_renew_before >= self.ca:
            found.append("the CA would be renewed as soon as it is issued")
        if self.ca - self.ca_renew_before < self.serving - self.serving_renew_before:
            found.append("the CA is renewed before the serving certificate it signs")
        return found


@dataclass(frozen=True)
class Renewal:
    """The Secret's data after a renewal, and why it was renewed."""

    data: dict[str, bytes]
    reasons: tuple[str, ...]


def renewal(
    data: Mapping[str, bytes], hosts: Sequence[str], lifetimes: Lifetimes, now: dt.datetime
) -> Renewal | None:
    """What the Secret must hold now, or None when what it holds is good."""
    bundle = _trusted(data.get(CA_BUNDLE, b""), now)
    reasons: list[str] = []
    ca = _signing_ca(bundle, data.get(CA_KEY, b""), lifetimes, now)
    if ca is None:
        ca = certs.issue_ca(now=now, lifetime=lifetimes.ca)
        bundle.insert(0, x509.load_pem_x509_certificate(ca.cert))
        reasons.append("a new CA" if len(bundle) == 1 else "the CA renewed")
    serving = certs.Pair(data.get(CERT, b""), data.get(KEY, b""))
    why = _serving_due(serving, bundle, hosts, lifetimes, now)
    if why:
        serving = certs.issue_serving(ca, hosts, now=now, lifetime=lifetimes.serving)
        reasons.append(why)
    kept = _drop_retired(bundle, serving, lifetimes, now)
    if len(kept) < len(bundle):
        reasons.append("the previous CA retired")
    if not reasons:
        return None
    return Renewal(
        {CA_BUNDLE: _pem(kept), CA_KEY: ca.key, CERT: serving.cert, KEY: serving.key},
        tuple(reasons),
    )


def _trusted(bundle: bytes, now: dt.datetime) -> list[x509.Certificate]:
    try:
        cas = x509.load_pem_x509_certificates(bundle) if bundle.strip() else []
    except ValueError:
        return []
    return [c for c in cas if c.not_valid_before_utc <= now < c.not_valid_after_utc]


def _signing_ca(
    bundle: list[x509.Certificate], key: bytes, lifetimes: Lifetimes, now: dt.datetime
) -> certs.Pair | None:
    """The bundle's first CA with its key, while it is not due for renewal."""
    if not bundle or bundle[0].not_valid_after_utc - now <= lifetimes.ca_renew_before:
        return None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError):
        return None
    if not certs.same_public_key(bundle[0], private):
        return None
    return certs.Pair(bundle[0].public_bytes(serialization.Encoding.PEM), key)


def _serving_due(
    pair: certs.Pair,
    bundle: list[x509.Certificate],
    hosts: Sequence[str],
    lifetimes: Lifetimes,
    now: dt.datetime,
) -> str | None:
    """Why the serving pair must be issued again, or None."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert)
        key = serialization.load_pem_private_key(pair.key, password=None)
    except (ValueError, TypeError):
        return "no usable serving certificate"
    if not certs.same_public_key(cert, key):
        return "the serving key does not match its certificate"
    if not certs.covers(cert, hosts):
        return "the serving certificate does not name every host"
    if cert.not_valid_after_utc - now <= lifetimes.serving_renew_before:
        return "the serving certificate is due for renewal"
    if not certs.signed_by(cert, bundle[0]):
        return "the serving certificate is not signed by the current CA"
    return None


def _drop_retired(
    bundle: list[x509.Certificate], serving: certs.Pair, lifetimes: Lifetimes, now: dt.datetime
) -> list[x509.Certificate]:
    """The bundle without the older CAs once the current one has signed the pair served for
    ``overlap`` (it signs its first pair when it is issued); with them before."""
    current = bundle[0]
    signed = certs.signed_by(x509.load_pem_x509_certificate(serving.cert), current)
    if not signed or now - (current.not_valid_before_utc + certs.BACKDATE) < lifetimes.overlap:
        return bundle
    return bundle[:1]


def _pem(bundle: list[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in bundle)


@dataclass(frozen=True)
class RotationSettings:
    """Where the pair lives and whom it serves."""

    secret: str  # NAME (in the server's own namespace) or NAMESPACE/NAME
    service: str = "preemptguard"  # the Service the API server calls, named in the certificate
    extra_hosts: tuple[str, ...] = ()
    configurations: tuple[str, ...] = ()  # mutating/NAME or validating/NAME
    lifetimes: Lifetimes = field(default_factory=Lifetimes)
    lease: str = "preemptguard-certificates"
    identity: str = "preemptguard"
    retry: float = 2.0

    def in_namespace(self, default: str) -> RotationSettings:
        """These settings with the Secret's namespace spelt out."""
        return self if "/" in self.secret else replace(self, secret=f"{default}/{self.secret}")

    @property
    def namespace(self) -> str:
        return self.secret.partition("/")[0]

    @property
    def name(self) -> str:
        return self.secret.partition("/")[2]

    @property
    def hosts(self) -> tuple[str, ...]:
        return (*certs.service_hosts(self.service, self.namespace), *self.extra_hosts)


class Rotation:
    """One replica's part: lead the renewal when it holds the Lease, always copy the pair.

    ``step`` runs every ``settings.retry`` seconds, first in ``until_served`` (the server
    cannot listen before it has a pair), then on a thread of its own (``start``)."""

    def __init__(
        self,
        cluster: Callable[[], Cluster],
        settings: RotationSettings,
        directory: Path,
        metrics: CertificateMetrics,
        clock: Clock | None = None,
    ) -> None:
        self.settings, self.directory, self.metrics = settings, directory, metrics
        self._cluster = cluster
        self._stop = threading.Event()
        self.clock = clock or SystemClock(self._stop)
        self._elector: LeaderElector | None = None
        self._thread: threading.Thread | None = None
        self._failing: str | None = None

    @property
    def cert_file(self) -> Path:
        return self.directory / CERT

    @property
    def key_file(self) -> Path:
        return self.directory / KEY

    @property
    def leading(self) -> bool:
        """Whether this replica held the Lease at its last step."""
        return self._elector is not None and self._elector.leader

    def until_served(self, timeout: float) -> None:
        """Step until the Secret holds a pair and it is copied here; raises
        ``CertificateError`` after ``timeout`` seconds without one."""
        deadline = self.clock.now() + timeout
        while not self.step():
            if self.clock.now() >= deadline:
                raise CertificateError(
                    f"no serving certificate in Secret {self.settings.secret} after "
                    f"{timeout:g}s: {self._failing or 'no replica holds the Lease yet'}"
                )
            self.clock.sleep(self.settings.retry)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cert-rotation", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._elector is not None and self.leading:
            self._elector.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.settings.retry)

    def step(self) -> bool:
        """Renew if leading, then copy the pair; whether a pair is in the local files."""
        try:
            cluster = self._cluster()
            secret = cluster.get(self._secret_path)
            if self._elector_for(cluster).step():
                secret = self._lead(cluster, secret)
            self._copy(_decoded(secret))
        except (ClusterError, CertificateError) as exc:
            self._failed(str(exc))
        else:
            self._recovered()
        return self.cert_file.exists() and self.key_file.exists()

    @property
    def _secret_path(self) -> str:
        s = self.settings
        return path("secrets", namespace=s.namespace, name=s.name)

    def _elector_for(self, cluster: Cluster) -> LeaderElector:
        if self._elector is None:
            lease = LeaseSettings(
                namespace=self.settings.namespace, name=self.settings.lease,
                retry=self.settings.retry,
            )  # fmt: skip
            self._elector = LeaderElector(cluster, lease, self.settings.identity, self.clock)
        return self._elector

    def _lead(self, cluster: Cluster, secret: dict[str, Any]) -> dict[str, Any]:
        """Renew what is due and keep the caBundles equal to the Secret's bundle; the Secret
        as stored after it. The caBundles are written first: a replica may serve the new pair
        as soon as the Secret holds it."""
        now = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC)
        s = self.settings
        due = renewal(_decoded(secret), s.hosts, s.lifetimes, now)
        bundle = due.data[CA_BUNDLE] if due else _decoded(secret).get(CA_BUNDLE, b"")
        if bundle:
            for configuration in s.configurations:
                self._inject(cluster, configuration, bundle)
        if due is None:
            return secret
        secret = dict(secret, data={k: _b64(v) for k, v in due.data.items()})
        stored = cluster.update(self._secret_path, secret)
        self.metrics.rotations.inc()
        log.info(
            "certificate_rotated",
            secret=s.secret,
            reasons=list(due.reasons),
            not_after=certs.not_after(due.data[CERT]).isoformat(),
        )
        return stored

    def _inject(self, cluster: Cluster, configuration: str, bundle: bytes) -> None:
        kind, _, name = configuration.partition("/")
        where = path(CONFIGURATION_KINDS[kind], group=ADMISSION, name=name)
        live = cluster.get(where)
        wanted = _b64(bundle)
        hooks = live.get("webhooks") or []
        stale = [h for h in hooks if (h.get("clientConfig") or {}).get("caBundle") != wanted]
        if not stale:
            return
        for hook in stale:
            hook.setdefault("clientConfig", {})["caBundle"] = wanted
        # The resourceVersion read above: a concurrent change (an upgrade) wins, and the next
        # step injects into what it wrote.
        cluster.update(where, live)
        log.info("ca_bundle_injected", configuration=configuration, webhooks=len(stale))

    def _copy(self, data: Mapping[str, bytes]) -> None:
        """Write the Secret's pair here when it differs and checks; the certificate watch
        loads it from there."""
        cert, key = data.get(CERT, b""), data.get(KEY, b"")
        if not cert or not key or self._holds(cert, key):
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        staged_cert, staged_key = self.directory / ".tls.crt.new", self.directory / ".tls.key.new"
        write_private(staged_cert, cert)
        write_private(staged_key, key)
        try:
            check_pair(staged_cert, staged_key)
        except CertificateError as exc:
            raise CertificateError(f"Secret {self.settings.secret}: {exc}") from None
        # The key first: the watch reloads when the certificate changes.
        os.replace(staged_key, self.key_file)
        os.replace(staged_cert, self.cert_file)

    def _holds(self, cert: bytes, key: bytes) -> bool:
        try:
            return self.cert_file.read_bytes() == cert and self.key_file.read_bytes() == key
        except OSError:
            return False

    def _failed(self, error: str) -> None:
        self.metrics.rotation_errors.inc()
        if error != self._failing:
            log.error("certificate_rotation_failed", secret=self.settings.secret, error=error)
        self._failing = error

    def _recovered(self) -> None:
        if self._failing is not None:
            log.info("certificate_rotation_recovered", secret=self.settings.secret)
        self._failing = None


def _decoded(secret: Mapping[str, Any]) -> dict[str, bytes]:
    data = secret.get("data") or {}
    out = {}
    for key in (CA_BUNDLE, CA_KEY, CERT, KEY):
        value = data.get(key)
        if isinstance(value, str):
            try:
                out[key] = base64.b64decode(value, validate=True)
            except ValueError:
                continue
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
