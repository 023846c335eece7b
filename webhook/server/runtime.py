"""``preemptguard serve`` put together: policy, certificates, namespace cache, metrics, server."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from webhook import engine
from webhook.admission.core import Evaluator
from webhook.server import logs
from webhook.server.app import create_app
from webhook.server.gunicorn import Hooks, ServerSettings, run
from webhook.server.metrics import Metrics, MetricsServer
from webhook.server.namespaces import NamespaceCache
from webhook.server.offload import Offload
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
    """Everything one server process holds; built before gunicorn forks its worker."""

    def __init__(self, options: ServeOptions, evaluate: Evaluator = engine.evaluate) -> None:
        """Load the policy and certificates; raises ``PolicyError`` or ``CertificateError``."""
        self.options = options
        self.metrics = Metrics()
        self.policies = PolicyStore(options.policies, self.metrics)
        self.certs = CertStore(options.cert_file, options.key_file, self.metrics)
        self.namespaces = NamespaceCache.from_environment(self.metrics)
        self.reloader = Reloader([self.policies, self.certs], options.reload_interval)
        self.stopping = threading.Event()
        self.metrics_server: MetricsServer | None = None
        self.offload = Offload()
        self.app = create_app(
            self.policies.current,
            self.namespaces.lookup,
            evaluate=evaluate,
            metrics=self.metrics,
            readiness=self.readiness,
            offloaded=self.offload,
        )

    def readiness(self) -> str | None:
        if self.stopping.is_set():
            return "shutting down"
        return self.namespaces.not_ready()

    def hooks(self) -> Hooks:
        return Hooks(started=self.start, stopping=self.stopping.set, exited=self.close)

    def start(self) -> None:
        """Start the background parts (in the worker process: threads do not survive a fork)."""
        port = self.options.metrics_port
        if port:
            host = self.options.metrics_host or self.options.server.host
            self.metrics_server = self.metrics.serve(host, port)
        # The worker is forked from the server process, which holds the policy and certificate
        # loaded at start-up: a worker restarted after a crash would serve those until its
        # first poll, undoing every reload since. Read what is on disk now.
        self.reloader.check_all()
        self.reloader.start()
        self.namespaces.start()
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
        )

    def close(self) -> None:
        self.offload.stop()
        self.reloader.stop()
        self.namespaces.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()


def serve(options: ServeOptions, evaluate: Evaluator = engine.evaluate) -> None:
    """Run the admission server until SIGTERM; raises on a policy or certificate it cannot use."""
    logs.configure(options.server.log_level)
    runtime = Runtime(options, evaluate)
    run(runtime.app, runtime.certs, options.server, runtime.hooks())
