"""Hot reload of the policy and the serving certificate, without a restart or a dropped request.

Kubernetes updates a mounted ConfigMap or Secret by writing a new timestamped folder and swapping
the ``..data`` symlink to it; the visible files are symlinks through ``..data``. Polling what the
files resolve to (inode, size, mtime) sees such a swap as well as a plain rewrite; inotify on the
visible names would not, as the names themselves never change.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from webhook.engine.findings import shorten
from webhook.engine.policy import Policy
from webhook.errors import CertificateError, PolicyError
from webhook.loading.policies import builtin_policy, load_policy, policy_files
from webhook.server.certs import not_after
from webhook.server.logs import get_logger
from webhook.server.metrics import CertificateMetrics, Metrics

Signature = tuple[tuple[str, int, int, int, int], ...]

# How much of an unexpected error's message a refused reload logs.
ERROR_CHARS = 300

log = get_logger("webhook.server.reload")


class Reloadable(Protocol):
    def check(self) -> bool:
        """Reload if the files changed; whether something new is now in use."""
        ...


def signature(paths: Sequence[Path]) -> Signature:
    """What ``paths`` resolve to now; any change of content or symlink target changes it."""
    entries = []
    for path in paths:
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError:
            entries.append((real, -1, -1, -1, -1))
            continue
        entries.append((real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(entries)


class PolicyStore:
    """The policy in use: the built-in one, or the last good one loaded from ``directory``."""

    def __init__(self, directory: Path | None, metrics: Metrics) -> None:
        """Load the policy now; raises ``PolicyError`` so a bad start fails loudly."""
        self.directory, self.metrics = directory, metrics
        self._seen = self._signature()
        self._policy = builtin_policy() if directory is None else load_policy(directory)
        metrics.set_policy(self._policy.name, self._policy.mode.value)

    @property
    def policy(self) -> Policy:
        return self._policy

    def publish(self) -> None:
        """Set the policy_info gauge to the policy in use."""
        self.metrics.set_policy(self._policy.name, self._policy.mode.value)

    def current(self) -> Policy | None:
        return self._policy

    def check(self) -> bool:
        if self.directory is None:
            return False
        seen = self._signature()
        if seen == self._seen:
            return False
        # Remember a failed version too: it is reported once, then retried only when it changes.
        self._seen = seen
        try:
            policy = load_policy(self.directory)
        except PolicyError as exc:
            return self._refused(str(exc))
        except Exception as exc:  # noqa: BLE001 - logged below; the last good policy serves
            # A bug in loading, or input it did not foresee (RecursionError, MemoryError): the
            # same as an invalid policy, in one bounded line rather than a traceback.
            return self._refused(f"{type(exc).__name__}: {shorten(_one_line(exc), ERROR_CHARS)}")
        self._policy = policy
        self.metrics.policy_reloads.inc()
        self.metrics.set_policy(policy.name, policy.mode.value)
        log.info("policy_reloaded", policy=policy.name, mode=policy.mode.value)
        return True

    def _refused(self, error: str) -> bool:
        self.metrics.policy_reload_failures.inc()
        log.error(
            "policy_reload_refused",
            error=error,
            serving=self._policy.name,
            note="the last good policy keeps serving",
        )
        return False

    def _signature(self) -> Signature:
        if self.directory is None:
            return ()
        if not self.directory.is_dir():
            return signature([self.directory])
        try:
            files = policy_files(self.directory)
        except OSError:
            files = []
        return signature([self.directory, *files])


class CertStore:
    """The serving certificate and key, checked again whenever their files change.

    The server's TLS (rustls, in each worker) reads the pair when a worker starts. A pair that
    loads here is copied, as one, to ``serving_dir``, and the next workers serve that copy
    (see ``webhook.server.runtime``); a pair that does not is refused while the previous one
    keeps serving. The copy, not the mounted files: Kubernetes swaps a mounted Secret by a
    symlink, and the server would read its files through links resolved when it started.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        metrics: CertificateMetrics,
        serving_dir: Path | None = None,
    ) -> None:
        """Check the files now; raises ``CertificateError`` so a bad start fails loudly."""
        self.cert_file, self.key_file, self.metrics = cert_file, key_file, metrics
        self.serving_dir = serving_dir
        self._seen = signature([cert_file, key_file])
        self._load()
        metrics.reloads.inc()

    @property
    def serving(self) -> tuple[Path, Path]:
        """The certificate and key files the server is to read."""
        if self.serving_dir is None:
            return self.cert_file, self.key_file
        return self.serving_dir / "tls.crt", self.serving_dir / "tls.key"

    def publish(self) -> None:
        """Set the certificate expiry gauge to the certificate in use."""
        self.metrics.expiry.set(self._expiry)

    def check(self) -> bool:
        seen = signature([self.cert_file, self.key_file])
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            self._load()
        except CertificateError as exc:
            return self._failed(exc)
        self.metrics.reloads.inc()
        log.info("certificate_reloaded", cert_file=str(self.cert_file))
        return True

    def _failed(self, exc: CertificateError) -> bool:
        # cert-manager may write the two files one after the other: the next change retries.
        self.metrics.reload_failures.inc()
        log.error("certificate_reload_failed", error=str(exc), note="the previous one serves")
        return False

    def _load(self) -> None:
        if self.serving_dir is None:
            check_pair(self.cert_file, self.key_file)
            cert = self.cert_file.read_bytes()
        else:
            cert = self._install(self.serving_dir)
        self._expiry = not_after(cert).timestamp()
        self.publish()

    def _install(self, directory: Path) -> bytes:
        """Copy the pair into ``directory`` once it checks, as read once; the certificate."""
        try:
            cert, key = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as exc:
            raise CertificateError(
                f"cannot use certificate {self.cert_file} with key {self.key_file}: {exc}"
            ) from exc
        staged_cert, staged_key = directory / "tls.crt.new", directory / "tls.key.new"
        write_private(staged_cert, cert)
        write_private(staged_key, key)
        try:
            check_pair(staged_cert, staged_key, named=(self.cert_file, self.key_file))
        except CertificateError:
            staged_cert.unlink()
            staged_key.unlink()
            raise
        serving_cert, serving_key = self.serving
        os.replace(staged_key, serving_key)
        os.replace(staged_cert, serving_cert)
        return cert


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


# What rustls signs with: ECDSA on P-256 and P-384, RSA, Ed25519.
_SIGNING_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey)
_CURVES = ("secp256r1", "secp384r1")


def check_pair(cert_file: Path, key_file: Path, *, named: tuple[Path, Path] | None = None) -> None:
    """Raise ``CertificateError`` unless the files hold a certificate chain and its
    unencrypted private key, of a kind the server's TLS signs with (``named``: the files to
    name in messages, when these are copies of them). An RSA key serves, but costs each
    handshake about ten times an ECDSA one (P-256, as ``preemptguard certs`` issues): a
    warning says so."""
    shown_cert, shown_key = named or (cert_file, key_file)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file)
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (OSError, ssl.SSLError, ValueError, TypeError) as exc:
        raise CertificateError(
            f"cannot use certificate {shown_cert} with key {shown_key}: {_one_line(exc)} "
            "(the key must be unencrypted PEM)"
        ) from exc
    supported = isinstance(key, _SIGNING_KEYS) and (
        not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name in _CURVES
    )
    if not supported:
        raise CertificateError(
            f"cannot serve with key {shown_key}: a {describe_key(key)} key; use ECDSA P-256 "
            "(preemptguard certs issues one), P-384, RSA or Ed25519"
        )
    if isinstance(key, rsa.RSAPrivateKey):
        log.warning(
            "rsa_serving_key",
            key_file=str(shown_key),
            note="each TLS handshake costs about ten times what it does with ECDSA P-256: "
            "issue an ECDSA key (preemptguard certs, or cert-manager privateKey.algorithm ECDSA)",
        )


def describe_key(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return f"ECDSA {key.curve.name}"
    return type(key).__name__.removeprefix("_").replace("PrivateKey", "")


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


class Reloader:
    """Polls its stores every ``interval`` seconds in a daemon thread."""

    def __init__(self, stores: Sequence[Reloadable], interval: float) -> None:
        self.stores, self.interval = list(stores), interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reloader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)

    def check_all(self) -> None:
        for store in self.stores:
            try:
                store.check()
            except Exception:
                # A reload must never stop the reloader; the store keeps what it had.
                log.exception("reload_check_failed", store=type(store).__name__)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.check_all()
