"""``preemptguard serve`` put together: policy, certificates, namespace cache, metrics, server."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from webhook import engine
from webhook.admission.core import Evaluator
from webhook.exposition import MetricsEndpoint, serve_registry
from webhook.native import engine_build
from webhook.server import logs
from webhook.server.app import create_app
from webhook.server.gunicorn import Hooks, ServerSettings, run
from webhook.server.metrics import Metrics, aggregated, enable_multiprocess, forget_worker
from webhook.server.namespaces import NamespaceCache
from webhook.server.offload import Offload
from webhook.server.priorityclasses import PriorityClassCache
from webhook.server.reload import CertStore, PolicyStore, Reloader

log = logs.get_logger("webhook.server.runtime")


@dataclass(frozen=True)
class ServeOptions:
    cert_file: Path
    key_file: Path
    policies: Path | None = None
    server: ServerSettings = field(default_factory=ServerSettings)
    metrics_host: str | None = None  # default: the server's host
    metrics_port: int = 9090  # 0: no metrics endpoint
    reload_interval: float = 2.0


class Runtime:
    """Everything the server holds: built in the arbiter before gunicorn forks its workers;
    each worker starts its own background parts (``start``), the arbiter serves the metrics of
    all of them (``ready``)."""

    def __init__(self, options: ServeOptions, evaluate: Evaluator = engine.evaluate) -> None:
        """Load the policy and certificates; raises ``PolicyError`` or ``CertificateError``."""
        self.options = options
        # gunicorn's workers are forks of this process, and return through serve() too.
        self.arbiter_pid = os.getpid()
        self.metrics_dir = Path(tempfile.mkdtemp(prefix="preemptguard-metrics-", dir=_SHM))
        enable_multiprocess(self.metrics_dir)
        self.metrics = Metrics()
        self.policies = PolicyStore(options.policies, self.metrics)
        self.certs = CertStore(options.cert_file, options.key_file, self.metrics)
        self.namespaces = NamespaceCache.from_environment(self.metrics)
        self.priority_classes = PriorityClassCache.from_environment(self.metrics)
        self.reloader = Reloader(
            [self.policies, self.certs, MemorySample(self.metrics)], options.reload_interval
        )
        self.stopping = threading.Event()
        self.metrics_server: MetricsEndpoint | None = None
        self.offload = Offload()
        self.app = create_app(
            self.policies.current,
            self.namespaces.lookup,
            priority_classes=self.priority_classes.lookup,
            evaluate=evaluate,
            metrics=self.metrics,
            readiness=self.readiness,
            offloaded=self.offload,
        )

    def readiness(self) -> str | None:
        if self.stopping.is_set():
            return "shutting down"
        return self.namespaces.not_ready() or self._priority_classes_not_ready()

    def _priority_classes_not_ready(self) -> str | None:
        # Only a policy that names priority classes needs them: one that names none keeps
        # serving where the classes cannot be listed.
        policy = self.policies.current()
        if policy is None or all(c.priority_class_name is None for c in policy.classes.values()):
            return None
        return self.priority_classes.not_ready()

    def hooks(self) -> Hooks:
        return Hooks(
            started=self.start,
            stopping=self.stopping.set,
            exited=self.close,
            ready=self.ready,
            worker_gone=lambda pid: forget_worker(pid, self.metrics_dir),
        )

    def ready(self) -> None:
        """In the arbiter, once the workers run: serve the metrics of all of them."""
        # What the arbiter set while loading (gauges of its own) is not a worker's.
        forget_worker(os.getpid(), self.metrics_dir)
        port = self.options.metrics_port
        if port:
            host = self.options.metrics_host or self.options.server.host
            self.metrics_server = serve_registry(aggregated(self.metrics_dir), host, port)

    def start(self) -> None:
        """Start the background parts (in the worker process: threads do not survive a fork)."""
        port = self.options.metrics_port
        # The worker is forked from the server process, which holds the policy and certificate
        # loaded at start-up: a worker restarted after a crash would serve those until its
        # first poll, undoing every reload since. Read what is on disk now.
        self.reloader.check_all()
        # A forked worker's gauges start from zero: say again what is in use.
        self.policies.publish()
        self.certs.publish()
        self.reloader.start()
        self.namespaces.start()
        self.priority_classes.start()
        self.offload.start()
        policy = self.policies.policy
        log.info(
            "serving",
            port=self.options.server.port,
            metrics_port=port or None,
            policy=policy.name,
            mode=policy.mode.value,
            policies=str(self.options.policies) if self.options.policies else "built-in",
            namespace_source=self.namespaces.source,
            engine=engine_build(),
        )

    def close(self) -> None:
        """In a worker, as it exits."""
        self.offload.stop()
        self.reloader.stop()
        self.namespaces.stop()
        self.priority_classes.stop()

    def shut(self) -> None:
        """In the arbiter, once every worker has stopped (a no-op in a worker)."""
        if os.getpid() != self.arbiter_pid:
            return
        if self.metrics_server is not None:
            self.metrics_server.close()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)


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
    """Run the admission server until SIGTERM; raises on a policy or certificate it cannot use."""
    logs.configure(options.server.log_level)
    runtime = Runtime(options, evaluate)
    try:
        run(runtime.app, runtime.certs, options.server, runtime.hooks())
    finally:
        runtime.shut()
