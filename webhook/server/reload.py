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

from webhook.engine.findings import shorten
from webhook.engine.policy import Policy
from webhook.errors import CertificateError, PolicyError
from webhook.loading.policies import builtin_policy, load_policy, policy_files
from webhook.server.certs import not_after
from webhook.server.logs import get_logger
from webhook.server.metrics import Metrics

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
    """The TLS server context for new connections, rebuilt when the certificate files change.

    Each new connection takes ``context`` when it starts its handshake; a reload swaps in a
    whole new context, so open connections keep theirs and none ever sees half an update.
    """

    def __init__(self, cert_file: Path, key_file: Path, metrics: Metrics) -> None:
        """Load the files now; raises ``CertificateError`` so a bad start fails loudly."""
        self.cert_file, self.key_file, self.metrics = cert_file, key_file, metrics
        self._seen = signature([cert_file, key_file])
        self._context = self._load()
        metrics.certificate_reloads.inc()

    @property
    def context(self) -> ssl.SSLContext:
        return self._context

    def publish(self) -> None:
        """Set the certificate expiry gauge to the certificate in use."""
        self.metrics.certificate_expiry.set(self._expiry)

    def check(self) -> bool:
        seen = signature([self.cert_file, self.key_file])
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            self._context = self._load()
        except CertificateError as exc:
            return self._failed(exc)
        self.metrics.certificate_reloads.inc()
        log.info("certificate_reloaded", cert_file=str(self.cert_file))
        return True

    def _failed(self, exc: CertificateError) -> bool:
        # cert-manager may write the two files one after the other: the next change retries.
        self.metrics.certificate_reload_failures.inc()
        log.error("certificate_reload_failed", error=str(exc), note="the previous one serves")
        return False

    def _load(self) -> ssl.SSLContext:
        context = server_context(self.cert_file, self.key_file)
        self._expiry = not_after(self.cert_file.read_bytes()).timestamp()
        self.publish()
        return context


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A TLS 1.2+ server context for the certificate chain and key in the given files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise CertificateError(
            f"cannot use certificate {cert_file} with key {key_file}: {exc}"
        ) from exc
    return context


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
