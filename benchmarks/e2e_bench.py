"""Pod-create latency through a real kube-apiserver, without and with the webhook, in one run.

    .venv/bin/python benchmarks/e2e_bench.py [-n 300] [--release 1.37|1.20]

Starts the end-to-end control plane and the real ``preemptguard serve``, then times N sequential
pod creates (one keep-alive client, as a controller would) in five phases: no webhook; the
shipped webhook configurations pointed at a do-nothing endpoint (always allow, on the same
gunicorn + Flask + TLS stack: the yardstick); the configurations pointed at ``preemptguard
serve``, with a pod no rule classifies (both hooks called, nothing to change) and with an
interruptible pod (patched); and no webhook again, to show drift. The pods name a scheduler
that does not exist, so scheduling work does not compete for the CPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import server_bench
from harness import cluster
from harness.binaries import MAIN, RELEASES, release
from harness.controlplane import running_control_plane
from harness.kube import Kube
from harness.manifests import prepare_tree
from harness.processes import wait_until
from harness.webhook import (
    WebhookServer,
    config_path,
    local_webhook_configurations,
    register,
    service_account_kubeconfig,
    start_server,
    unregister,
)
from webhook.server import certs

UNSCHEDULED = "preemptguard-bench-no-scheduler"
DO_NOTHING = "do-nothing webhook (always allow)"


def _pod(name: str, workload: str | None) -> dict[str, Any]:
    return cluster.pod(name, workload=workload, schedulerName=UNSCHEDULED)


def _time_creates(
    kube: Kube, namespace: str, prefix: str, n: int, workload: str | None
) -> list[float]:
    path = f"/api/v1/namespaces/{namespace}/pods"
    samples = []
    for i in range(n):
        body = _pod(f"{prefix}-{i}", workload)
        started = time.perf_counter()
        kube.create(path, body)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _server_seconds(server: WebhookServer) -> dict[str, tuple[float, float]]:
    """hook -> (sum of seconds, count) of the server's own admission-duration histogram."""
    with requests.Session() as s:
        s.trust_env = False
        text = s.get(server.metrics_url, timeout=5).text
    out: dict[str, list[float]] = {}
    for part, hook, value in re.findall(
        r'^preemptguard_admission_duration_seconds_(sum|count)\{hook="(\w+)"\} (\S+)$',
        text,
        re.MULTILINE,
    ):
        out.setdefault(hook, [0.0, 0.0])[0 if part == "sum" else 1] = float(value)
    return {hook: (v[0], v[1]) for hook, v in out.items()}


def _summary(samples: list[float]) -> tuple[float, float, float]:
    return (
        statistics.fmean(samples),
        statistics.median(samples),
        statistics.quantiles(samples, n=100, method="inclusive")[98],
    )


def _wait_inactive(kube: Kube, namespace: str) -> None:
    """Until the API server has dropped the configurations (it learns of deletions by watch)."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    clean = 0

    def settled() -> bool:
        nonlocal clean
        body = kube.create(path, _pod("probe", "interruptible"), dry_run=True).body
        mutated = cluster.PLACEMENT in body["metadata"].get("annotations", {})
        clean = 0 if mutated else clean + 1
        return clean >= 5

    wait_until(settled, timeout=30, what="the webhook configurations to be dropped", interval=0.2)
    time.sleep(1)


def _register_do_nothing(
    kube: Kube, namespace: str, base: list[dict[str, Any]], port: int, tls: Path
) -> list[dict[str, Any]]:
    """Point the shipped configurations at the always-allow endpoint; wait until it is called."""
    url = f"https://{server_bench.HOST}:{port}"
    configs = local_webhook_configurations(base, url, (tls / "ca.crt").read_bytes())
    for config in configs:
        kube.apply(config_path(config, item=True), config)

    def answered() -> int:
        with requests.Session() as s:
            s.trust_env = False
            return int(s.get(f"{url}/answered", verify=tls / "ca.crt", timeout=5).text)

    def both_hooks_called() -> bool:
        before = answered()
        kube.create(f"/api/v1/namespaces/{namespace}/pods", _pod("probe", None), dry_run=True)
        return answered() - before == 2

    wait_until(both_hooks_called, timeout=30, what="the do-nothing webhook to be called")
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=300, help="creates per phase (default 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed creates before each phase")
    parser.add_argument(
        "--release",
        choices=sorted(RELEASES),
        default=MAIN.name,
        help=f"Kubernetes release (default {MAIN.name})",
    )
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="preemptguard-bench-") as tmp,
        running_control_plane(release(args.release)) as cp,
    ):
        work = Path(tmp)
        kube = cp.client()
        cluster.label_system_namespaces(kube)
        namespace = "bench"
        cluster.create_namespace(kube, namespace)
        base = prepare_tree(work).render("base")
        kubeconfig = service_account_kubeconfig(kube, cp, base, work / "kubeconfig")
        server = start_server(work / "server", base, kubeconfig)
        version = kube.get("/version")["gitVersion"]
        results: list[tuple[str, list[float]]] = []
        in_server: dict[str, float] = {}
        try:

            def phase(label: str, prefix: str, workload: str | None) -> None:
                _time_creates(kube, namespace, f"{prefix}-warm", args.warmup, workload)
                before = _server_seconds(server)
                results.append((label, _time_creates(kube, namespace, prefix, args.n, workload)))
                after = _server_seconds(server)
                # Time inside the server's handler, per pod create, both hooks together.
                in_server[label] = (
                    sum(after[h][0] - before.get(h, (0.0, 0.0))[0] for h in after) * 1000 / args.n
                )

            phase("no webhook", "off1", None)
            tls = work / "do-nothing"
            certs.write(certs.issue(list(certs.LOCAL_HOSTS)), tls)
            with server_bench.server("allow", tls, threads=16, stock=False) as port:
                _register_do_nothing(kube, namespace, base, port, tls)
                phase(DO_NOTHING, "allow", None)
            configs = register(kube, server, base)
            phase("webhook, unclassified pod", "on-plain", None)
            phase("webhook, interruptible pod (patched)", "on-int", "interruptible")
            unregister(kube, configs)
            _wait_inactive(kube, namespace)
            phase("no webhook (again)", "off2", None)
        finally:
            server.stop()
            kube.close()

    print(f"pod create through kube-apiserver {version}: {args.n} sequential creates per phase")
    print(f"{'':40s} {'mean':>8s} {'p50':>8s} {'p99':>8s} {'in server':>10s}   (ms)")
    stats = {label: _summary(samples) for label, samples in results}
    for label, (mean, p50, p99) in stats.items():
        inside = "-" if label == DO_NOTHING else f"{in_server[label]:.2f}"
        print(f"{label:40s} {mean:8.2f} {p50:8.2f} {p99:8.2f} {inside:>10s}")
    off = [s for label, s in stats.items() if label.startswith("no webhook")]
    off_mean = statistics.fmean(s[0] for s in off)
    off_p50 = statistics.fmean(s[1] for s in off)
    for label in (DO_NOTHING, "webhook, unclassified pod", "webhook, interruptible pod (patched)"):
        mean, p50, _ = stats[label]
        added_mean, added_p50 = mean - off_mean, p50 - off_p50
        print(f"added by {label}: {added_mean:+.2f} ms mean, {added_p50:+.2f} ms p50")
    return 0


if __name__ == "__main__":
    sys.exit(main())
