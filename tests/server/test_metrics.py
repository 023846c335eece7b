"""What a Prometheus scrape of the running server's plain-HTTP port shows."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from tests.server.helpers import ServerProcess, fixture
from webhook import exposition
from webhook.server import certs
from webhook.server.metrics import Metrics, aggregated

pytestmark = pytest.mark.slow


def test_metrics_after_some_admissions(server: ServerProcess) -> None:
    client = server.client()
    for name, path in [
        ("create-pod-sweep-mutate", "/mutate"),
        ("create-pod-sweep-mutate", "/mutate"),
        ("create-pod-coordinator-0-validate", "/validate"),
        ("delete-pod-coordinator-0-validate", "/validate"),
    ]:
        assert client.post(path, fixture(name)).status == 200
    client.close()
    text = server.metrics()
    samples = {
        'preemptguard_admissions_total{hook="mutate",outcome="patched",'
        'workload_class="interruptible"}': 2,
        'preemptguard_admissions_total{hook="validate",outcome="refused",'
        'workload_class="coordinator"}': 1,
        'preemptguard_admissions_total{hook="validate",outcome="skipped",workload_class="none"}': 1,
        'preemptguard_admission_duration_seconds_count{hook="mutate"}': 2,
        'preemptguard_admission_duration_seconds_count{hook="validate"}': 2,
        'preemptguard_policy_info{mode="enforce",name="default"}': 1,
        "preemptguard_policy_reloads_total": 0,
        "preemptguard_policy_reload_failures_total": 0,
        "preemptguard_certificate_reloads_total": 1,
        "preemptguard_certificate_reload_failures_total": 0,
        "preemptguard_namespace_cache_synced": 0,
    }
    for sample, value in samples.items():
        assert server.metric(sample) == value, sample
    assert 'preemptguard_admission_duration_seconds_bucket{hook="mutate",le="+Inf"} 2.0' in text
    expiry = certs.not_after((server.ca.parent / "tls.crt").read_bytes()).timestamp()
    assert server.metric("preemptguard_certificate_expiry_timestamp_seconds") == expiry
    assert "process_resident_memory_bytes" in text
    assert "# HELP preemptguard_namespace_cache_synced" in text


def test_metrics_are_not_on_the_tls_port(server: ServerProcess) -> None:
    client = server.client()
    assert client.get("/metrics").status == 404
    client.close()


def test_policy_info_has_one_series_for_the_policy_in_use() -> None:
    metrics = Metrics()
    metrics.set_policy("default", "enforce")
    metrics.set_policy("default", "warn")
    metrics.set_policy("default", "warn")
    series = [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("preemptguard_policy_info{")
    ]
    assert series == ['preemptguard_policy_info{mode="warn",name="default"} 1.0']


def test_idle_connections_to_the_metrics_port_hold_no_thread_for_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The endpoint has no authentication: clients that connect and send nothing whole get
    at most ``MAX_CONNECTIONS`` threads, each for ``READ_TIMEOUT_SECONDS``."""
    monkeypatch.setattr(exposition, "READ_TIMEOUT_SECONDS", 0.5)
    registry = CollectorRegistry()
    Counter("scraped_total", "A counter to find in the scrape.", registry=registry).inc()
    endpoint = exposition.serve_registry(registry, "127.0.0.1", 0)
    idle: list[socket.socket] = []
    try:
        before = threading.active_count()
        for _ in range(4 * exposition.MAX_CONNECTIONS):
            conn = socket.create_connection(("127.0.0.1", endpoint.port))
            conn.sendall(b"GET /metrics HTTP/1.1\r\n")
            idle.append(conn)
        time.sleep(0.2)
        assert threading.active_count() - before <= exposition.MAX_CONNECTIONS
        deadline = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= before
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert b"scraped_total 1.0" in reply.read()
    finally:
        for conn in idle:
            conn.close()
        endpoint.close()


def test_a_worker_file_still_being_created_does_not_fail_the_scrape(tmp_path: Path) -> None:
    """prometheus_client creates a worker's file empty and sizes it after: a scrape in that
    moment, or after a worker died in it, still sums every other worker."""
    written = MmapedDict(str(tmp_path / "counter_101.db"))  # type: ignore[no-untyped-call]
    key = mmap_key("preemptguard_x_total", "preemptguard_x_total", ["hook"], ["mutate"], "x")
    written.write_value(key, 3.0, 0.0)  # type: ignore[no-untyped-call]
    written.close()  # type: ignore[no-untyped-call]
    (tmp_path / "counter_102.db").touch()  # a worker between creating and sizing its file
    text = generate_latest(aggregated(tmp_path)).decode()
    assert 'preemptguard_x_total{hook="mutate"} 3.0' in text
