"""What a Prometheus scrape of the running server's plain-HTTP port shows."""

from __future__ import annotations

from tests.server.helpers import ServerProcess, fixture
from webhook.server import certs
from webhook.server.metrics import Metrics


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
