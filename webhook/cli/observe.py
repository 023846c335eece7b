"""``preemptguard observe``: the reclaim observer, run as its own Deployment."""

from __future__ import annotations

import errno
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from webhook.cli.audit import ERROR, cluster_options, connect, fail, load
from webhook.cli.capacity import capacity_options, capacity_settings
from webhook.cli.options import FiniteSeconds, metrics_port_option, policies_option
from webhook.cli.service_options import log_level_option
from webhook.kube.lease import candidate_identity

if TYPE_CHECKING:
    from webhook.cluster.metrics import ObserverMetrics
    from webhook.exposition import MetricsEndpoint

OBSERVE_EXAMPLES = """
\b
Examples:
  preemptguard observe --metrics-port 9090
  preemptguard observe --audit-interval 600 --audit-reports
  preemptguard observe --audit-interval 600 --window 7d --preemptible-price-ratio 0.35

The capacity options set the leader's preemptguard_capacity_* gauges, refreshed with each
periodic audit (--audit-interval), as `preemptguard capacity` computes them.
"""


@click.command("observe", epilog=OBSERVE_EXAMPLES)
@policies_option
@click.option(
    "--metrics-host", default="0.0.0.0", show_default=True, help="Where /metrics listens."
)
@metrics_port_option
@click.option(
    "--lease-name", default="preemptguard-observer", show_default=True, help="The Lease to hold."
)
@click.option(
    "--lease-namespace",
    default=None,
    help="Namespace of the Lease (default: the pod's own, or the kubeconfig context's).",
)
@click.option(
    "--identity", default=None, help="This replica's name in the Lease (default: pod name)."
)
@click.option(
    "--no-leader-election",
    is_flag=True,
    help="Act without holding the Lease (one replica only, e.g. on a laptop).",
)
@click.option(
    "--audit-interval",
    type=FiniteSeconds(),
    default=0.0,
    show_default=True,
    help="Seconds between periodic audits by the leader, exported as metrics; 0: none.",
)
@click.option(
    "--audit-reports",
    is_flag=True,
    help="Periodic audits also write policy reports: OpenReports where the cluster serves "
    "them, else wgpolicyk8s PolicyReports.",
)
@click.option(
    "--node-event-namespace",
    default="default",
    show_default=True,
    help="Where events about Nodes are recorded: only TogetherPreempted Events written there "
    "are trusted to start a reclaim.",
)
@capacity_options
@log_level_option
@cluster_options
def observe_command(
    policies: Path | None,
    metrics_host: str,
    metrics_port: int,
    lease_name: str,
    lease_namespace: str | None,
    identity: str | None,
    no_leader_election: bool,
    audit_interval: float,
    audit_reports: bool,
    node_event_namespace: str,
    window: float,
    idle_for: float,
    preemptible_price_ratio: float,
    log_level: str,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Watch every reclaim of a preemptible node and report what happened to its pods.

    Watches Nodes, Pods and TogetherPreempted Events. As soon as it recognises a reclaim it
    gives every unfinished pod of the node the DisruptionTarget condition (reason
    PreemptibleNodeReclaimed), so that a Job's podFailurePolicy can ignore the failure. For
    each pod a reclaim displaces it records the class, grace period, declared checkpoint, the
    time from SIGTERM to its exit and the outcome (exited in time, still running when its
    grace ran out, lost with the node), and whether it completed (exit 0) during the reclaim,
    as Prometheus metrics, a Kubernetes Event on the pod's owner and a JSON log line. Run two
    replicas: one holds a coordination.k8s.io Lease and acts, the other takes over. Runs
    until SIGTERM.
    """
    from webhook.cluster.metrics import ObserverMetrics
    from webhook.cluster.observer import Observer, ObserverSettings
    from webhook.kube.client import ClusterError
    from webhook.kube.clock import SystemClock
    from webhook.kube.lease import LeaseSettings
    from webhook.server import logs

    if audit_reports and not audit_interval:
        raise click.UsageError("--audit-reports needs --audit-interval")
    logs.configure(log_level)
    policy = load(policies)
    metrics = ObserverMetrics()
    # Before connecting: a port taken is this command's own setting to fix, said at once.
    endpoint = _serve_metrics(metrics, metrics_host, metrics_port) if metrics_port else None
    cluster = connect(kubeconfig, context)
    stop = threading.Event()
    settings = ObserverSettings(
        lease=LeaseSettings(namespace=lease_namespace or cluster.namespace, name=lease_name),
        identity=identity or candidate_identity(),
        leader_election=not no_leader_election,
        audit_interval=audit_interval,
        audit_reports=audit_reports,
        node_event_namespace=node_event_namespace,
        capacity=capacity_settings(
            window, idle_for, preemptible_price_ratio, event_namespace=node_event_namespace
        ),
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    observer = Observer(cluster, policy, settings, metrics, SystemClock(stop))
    try:
        observer.run(stop)
    except ClusterError as exc:
        click.echo(f"preemptguard observe: {exc}", err=True)
        sys.exit(ERROR)
    finally:
        if endpoint is not None:
            endpoint.close()
        cluster.close()


def _serve_metrics(metrics: ObserverMetrics, host: str, port: int) -> MetricsEndpoint:
    """Serve ``/metrics``, or exit with a plain message when the address cannot be had."""
    try:
        return metrics.serve(host, port)
    except OSError as exc:
        # A host that is not this machine's is the host's fault; anything else the port's.
        bad_host = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
        fix = "--metrics-host" if bad_host else "--metrics-port"
        fail(f"cannot listen on {host}:{port}: {_why_not(exc)}; pick another {fix}")


def _why_not(exc: OSError) -> str:
    """``address already in use`` rather than ``[Errno 98] Address already in use``."""
    reason = exc.strerror or str(exc)
    return reason[:1].lower() + reason[1:]
