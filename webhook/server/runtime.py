"""``preemptguard serve`` put together.

The main process checks the policy and the certificate before anything starts (a bad one
fails the start), serves the metrics of every worker, and watches the certificate: a new
valid pair respawns the workers, new before old, each new one loading it (rustls reads it
once, at a worker's start). Each worker builds its own runtime (``Worker``): the policy,
reloaded when its files change, the namespace and PriorityClass caches, the offload process,
and the app.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from webhook import engine
from webhook.admission.core import Evaluator
from webhook.errors import CertificateError
from webhook.exposition import MetricsEndpoint, serve_registry
from webhook.kube.client import Cluster, ClusterError
from webhook.loading.policies import builtin_policy, load_policy
from webhook.native import engine_build
from webhook.server import logs
from webhook.server.app import create_app
from webhook.server.caches import namespace_cache, priority_class_cache
from webhook.server.gate import WorkLedger
from webhook.server.metrics import MainMetrics, Metrics
from webhook.server.offload import Offload
from webhook.server.reload import CertStore, PolicyStore, Reloader
from webhook.server.reviewer import Lookups
from webhook.server.rotation import Rotation, RotationSettings
from webhook.server.serving import MainCallbacks, ServerSettings, run
from webhook.server.transport import ASGIApp, Lifespan, LoopLag

log = logs.get_logger("webhook.server.runtime")


@dataclass(frozen=True)
class ServeOptions:
    cert_file: Path | None  # None: from the Secret of ``rotation``
    key_file: Path | None
    policies: Path | None = None
    server: ServerSettings = field(default_factory=ServerSettings)
    metrics_host: str | None = None  # default: the server's host
    metrics_port: int = 9090  # 0: no metrics endpoint
    reload_interval: float = 2.0
    # Self-rotating certificates: the pair comes from this Secret (cert_file and key_file are
    # then where it is copied), issued by the replica that holds the Lease.
    rotation: RotationSettings | None = None
    first_certificate_timeout: float = 120.0


class Worker:
    """What one worker process holds, built in it; its background parts start once it
    serves (``start``) and stop as it stops (``stop``)."""

    def __init__(self, options: ServeOptions, evaluate: Evaluator = engine.evaluate) -> None:
        self.options = options
        self.metrics = Metrics()
        self.policies = PolicyStore(options.policies, self.metrics)
        self.namespaces = namespace_cache(self.metrics)
        self.priority_classes = priority_class_cache(self.metrics)
        self.reloader = Reloader(
            [self.policies, MemorySample(self.metrics)], options.reload_interval
        )
        self.offload = Offload()
        self.threads = ThreadPoolExecutor(options.server.threads, thread_name_prefix="review")
        self.ledger = WorkLedger()
        self.app = create_app(
            self.policies.current,
            self.namespaces.lookup,
            priority_classes=self.priority_classes.lookup,
            evaluate=evaluate,
            metrics=self.metrics,
            readiness=self.readiness,
            offloaded=self.offload,
            threads=self.threads,
            cached=Lookups(self.namespaces.cached_lookup, self.priority_classes.cached_lookup),
            inline_bytes=options.server.inline_review_bytes,
            lifespan=Lifespan(started=self.start, stopping=self.stop),
            ledger=self.ledger,
            lag=LoopLag(self.heartbeat),
        )

    def heartbeat(self, loop_lag: float) -> None:
        """Each beat of the event loop: how late it ran, and the work in the threads' hands."""
        self.metrics.loop_lag.set(loop_lag)
        self.metrics.review_backlog.set(self.ledger.in_hand())

    def readiness(self) -> str | None:
        return self.namespaces.not_ready() or self._priority_classes_not_ready()

    def _priority_classes_not_ready(self) -> str | None:
        # Only a policy that names priority classes needs them: one that names none keeps
        # serving where the classes cannot be listed.
        policy = self.policies.current()
        if policy is None or all(c.priority_class_name is None for c in policy.classes.values()):
            return None
        return self.priority_classes.not_ready()

    def start(self) -> None:
        self.policies.publish()
        self.reloader.start()
        self.namespaces.start()
        self.priority_classes.start()
        self.offload.start()
        policy = self.policies.policy
        log.info(
            "serving",
            port=self.options.server.port,
            metrics_port=self.options.metrics_port or None,
            policy=policy.name,
            mode=policy.mode.value,
            policies=str(self.options.policies) if self.options.policies else "built-in",
            namespace_source=self.namespaces.source,
            engine=engine_build(),
        )

    def stop(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.offload.stop()
        self.reloader.stop()
        self.namespaces.stop()
        self.priority_classes.stop()


def worker_app(options: ServeOptions, evaluate: Evaluator = engine.evaluate) -> ASGIApp:
    """The app of one worker process, its runtime built in it."""
    logs.configure(options.server.log_level)
    return Worker(options, evaluate).app


class Main:
    """What the main process holds: the metrics endpoint and the certificate watch."""

    def __init__(self, options: ServeOptions) -> None:
        """Load the policy and certificate once; raises ``PolicyError`` or
        ``CertificateError``, so that a bad start fails before any worker does."""
        self.options = options
        self.metrics_dir = Path(tempfile.mkdtemp(prefix="preemptguard-metrics-", dir=_SHM))
        self.metrics = MainMetrics(self.metrics_dir)
        # The checked copy of the certificate and key that the workers serve (mode 0700).
        self.tls_dir = Path(tempfile.mkdtemp(prefix="preemptguard-tls-", dir=_SHM))
        # The policy is loaded here only to refuse a bad one before any worker starts; the
        # workers load and publish their own.
        load_policy(options.policies) if options.policies else builtin_policy()
        self.rotation = self._first_certificate(options)
        cert_file, key_file = (
            (options.cert_file, options.key_file)
            if self.rotation is None
            else (self.rotation.cert_file, self.rotation.key_file)
        )
        if cert_file is None or key_file is None:
            raise CertificateError("no serving certificate: give its files or its Secret")
        self.certs = CertStore(cert_file, key_file, self.metrics.certificates, self.tls_dir)
        self.watch = Reloader([_Respawning(self.certs)], options.reload_interval)
        self.metrics_server: MetricsEndpoint | None = None

    def _first_certificate(self, options: ServeOptions) -> Rotation | None:
        """With self-rotating certificates, wait for the Secret's pair and copy it to where
        the certificate watch reads it."""
        if options.rotation is None:
            return None
        cluster, source = Cluster.configured()
        if cluster is None:
            raise CertificateError(
                f"cannot read Secret {options.rotation.secret}: no cluster configured "
                "(run in a pod with a service account, or set KUBECONFIG)"
            )
        try:
            settings = options.rotation.in_namespace(cluster().namespace)
        except ClusterError as exc:
            raise CertificateError(f"cannot read Secret {options.rotation.secret}: {exc}") from None
        rotation = Rotation(cluster, settings, self.tls_dir / "secret", self.metrics.certificates)
        log.info("waiting_for_certificate", secret=settings.secret, cluster=source)
        rotation.until_served(options.first_certificate_timeout)
        return rotation

    def callbacks(self) -> MainCallbacks:
        return MainCallbacks(ready=self.ready, stopped=self.stopped)

    def ready(self) -> None:
        port = self.options.metrics_port
        if port:
            host = self.options.metrics_host or self.options.server.host
            self.metrics_server = serve_registry(self.metrics.registry, host, port)
        self.watch.start()
        if self.rotation is not None:
            self.rotation.start()

    def stopped(self) -> None:
        if self.rotation is not None:
            self.rotation.stop()
        self.watch.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None
        shutil.rmtree(self.metrics_dir, ignore_errors=True)
        shutil.rmtree(self.tls_dir, ignore_errors=True)


class _Respawning:
    """The certificate store, respawning the workers when a new pair is in use."""

    def __init__(self, certs: CertStore) -> None:
        self.certs = certs

    def check(self) -> bool:
        if not self.certs.check():
            return False
        # granian's reload: new workers first, then the old ones stopped gracefully. Sent to
        # the main thread itself: a signal sent to the process may be taken by another thread,
        # and the main thread, asleep on granian's wait, would not run the handler until some
        # other signal woke it.
        main = threading.main_thread().ident
        if main is not None:  # always, once started
            signal.pthread_kill(main, signal.SIGHUP)
        return True


class MemorySample:
    """Records the worker's resident memory each time the reloader polls."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def check(self) -> bool:
        self.metrics.sample_memory()
        return False


# Metric files are written on every review: keep them in memory where the system allows.
_SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def serve(options: ServeOptions, evaluate: Evaluator = engine.evaluate) -> None:
    """Run the admission server until SIGTERM; raises on a policy or certificate it cannot use,
    or a port in use."""
    logs.configure(options.server.log_level)
    main = Main(options)
    try:
        run(
            partial(worker_app, options, evaluate),
            *main.certs.serving,
            options.server,
            main.callbacks(),
        )
    finally:
        main.stopped()
