"""Certificates and policies reloaded under a running server, as Kubernetes mounts change."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import signal
import ssl
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, generate_latest

from tests.server.helpers import (
    BROKEN_POLICY,
    DEFAULT_POLICY,
    WARN_POLICY,
    WORKERS,
    Client,
    Reply,
    ServerProcess,
    fixture,
    free_port,
    serve_args,
    wait_for,
)
from webhook.errors import CertificateError, PolicyError
from webhook.server import certs, logs, reload
from webhook.server.metrics import CertificateMetrics, Metrics
from webhook.server.reload import CertStore, PolicyStore

pytestmark = pytest.mark.slow

COORDINATOR = fixture("create-pod-coordinator-0-mutate")


def mount(directory: Path, files: dict[str, bytes], generation: str) -> None:
    """Update ``directory`` the way the kubelet updates a ConfigMap or Secret volume."""
    directory.mkdir(exist_ok=True)
    data = directory / f"..{generation}"
    data.mkdir()
    for name, content in files.items():
        (data / name).write_bytes(content)
    staged = directory / "..data_tmp"
    staged.symlink_to(data.name)
    os.replace(staged, directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def tls_files(issued: certs.Issued) -> dict[str, bytes]:
    return {"ca.crt": issued.ca_cert, "tls.crt": issued.cert, "tls.key": issued.key}


def metric(metrics: Metrics | CertificateMetrics, name: str) -> float:
    registry = metrics.registry if isinstance(metrics, Metrics) else metrics_registry
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(name)


# --- the stores on their own ---------------------------------------------------------------


def test_policy_store_follows_symlink_swaps_and_keeps_the_last_good(tmp_path: Path) -> None:
    metrics = Metrics()
    mount(tmp_path, {"policy.yaml": DEFAULT_POLICY.encode()}, "1")
    store = PolicyStore(tmp_path, metrics)
    assert store.check() is False
    mount(tmp_path, {"policy.yaml": WARN_POLICY.encode()}, "2")
    assert store.check() is True
    assert (store.policy.name, store.policy.mode.value) == ("relaxed", "warn")
    mount(tmp_path, {"policy.yaml": BROKEN_POLICY.encode()}, "3")
    assert store.check() is False
    assert store.policy.name == "relaxed"
    assert store.check() is False  # a refused version is reported once
    assert metric(metrics, "preemptguard_policy_reloads_total") == 1
    assert metric(metrics, "preemptguard_policy_reload_failures_total") == 1
    assert metric(metrics, 'preemptguard_policy_info{mode="warn",name="relaxed"}') == 1


def test_policy_store_keeps_the_last_good_on_any_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only an invalid policy: whatever loading raises is a refused reload."""
    metrics = Metrics()
    mount(tmp_path, {"policy.yaml": DEFAULT_POLICY.encode()}, "1")
    store = PolicyStore(tmp_path, metrics)

    def explode(directory: Path) -> None:
        raise RecursionError("maximum recursion depth exceeded " + "[" * 100_000)

    monkeypatch.setattr(reload, "load_policy", explode)
    mount(tmp_path, {"policy.yaml": WARN_POLICY.encode()}, "2")
    stream = io.StringIO()
    logs.configure("info", stream=stream)
    try:
        reload.Reloader([store], interval=1).check_all()
    finally:
        logs.configure("info")
    assert store.policy.name == "default"
    assert metric(metrics, "preemptguard_policy_reload_failures_total") == 1
    assert metric(metrics, "preemptguard_policy_reloads_total") == 0
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert len(lines[0]) < 1000
    record = json.loads(lines[0])
    assert record["event"] == "policy_reload_refused"
    assert record["error"].startswith("RecursionError: maximum recursion depth exceeded [[[")
    assert "exception" not in record


def test_policy_store_refuses_a_bad_policy_at_start(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(BROKEN_POLICY)
    with pytest.raises(PolicyError, match=r"policy.yaml:\d+: spec.mode"):
        PolicyStore(tmp_path, Metrics())


def test_builtin_policy_needs_no_files() -> None:
    store = PolicyStore(None, Metrics())
    assert store.policy.name == "default"
    assert store.check() is False


metrics_registry = CollectorRegistry()
CERTIFICATE_METRICS = CertificateMetrics(metrics_registry)


def test_cert_store_checks_each_change_and_survives_a_half_written_pair(tmp_path: Path) -> None:
    metrics = CERTIFICATE_METRICS
    before = metric(metrics, "preemptguard_certificate_reloads_total")
    failures = metric(metrics, "preemptguard_certificate_reload_failures_total")
    first, second = certs.issue(["a.example"]), certs.issue(["b.example"])
    mount(tmp_path, tls_files(first), "1")
    store = CertStore(tmp_path / "tls.crt", tmp_path / "tls.key", metrics)
    # A rewrite in place, the key first: the pair does not match until the certificate follows.
    (tmp_path / "tls.key").unlink()
    (tmp_path / "tls.key").write_bytes(second.key)
    assert store.check() is False
    (tmp_path / "tls.crt").unlink()
    (tmp_path / "tls.crt").write_bytes(second.cert)
    assert store.check() is True
    assert store.check() is False  # nothing new
    assert metric(metrics, "preemptguard_certificate_reloads_total") == before + 2
    assert metric(metrics, "preemptguard_certificate_reload_failures_total") == failures + 1
    expiry = certs.not_after(second.cert).timestamp()
    assert metric(metrics, "preemptguard_certificate_expiry_timestamp_seconds") == expiry


def test_cert_store_refuses_missing_files_at_start(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match="cannot use certificate"):
        CertStore(tmp_path / "tls.crt", tmp_path / "tls.key", CERTIFICATE_METRICS)


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (
            lambda: ec.generate_private_key(ec.SECP521R1()),
            "a ECDSA secp521r1 key; use ECDSA P-256",
        ),
        (lambda: dsa.generate_private_key(2048), "a DSA key; use ECDSA P-256"),
    ],
    ids=["p-521", "dsa"],
)
def test_cert_store_refuses_a_key_the_server_cannot_sign_with(
    tmp_path: Path, key: Any, error: str
) -> None:
    """rustls would fail to start every worker on it: refused at start, and on reload."""
    private = key()
    cert, pem = self_signed(private)
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(pem)
    with pytest.raises(CertificateError, match=error):
        CertStore(tmp_path / "tls.crt", tmp_path / "tls.key", CERTIFICATE_METRICS)


def test_cert_store_refuses_an_encrypted_key(tmp_path: Path) -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    cert, _ = self_signed(private)
    encrypted = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(encrypted)
    with pytest.raises(CertificateError, match="the key must be unencrypted PEM"):
        CertStore(tmp_path / "tls.crt", tmp_path / "tls.key", CERTIFICATE_METRICS)


def self_signed(private: Any) -> tuple[bytes, bytes]:
    """A certificate for ``private``'s public key, signed by itself, and the key, in PEM."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "odd-key")])
    now = dt.datetime.now(dt.UTC)
    hashing = None if isinstance(private, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(private, hashing)
    )
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem


# --- under the running server --------------------------------------------------------------


@pytest.fixture
def mounted_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    proc, tls, policies = start_mounted(tmp_path, reload_interval=0.1)
    yield proc, tls, policies
    assert proc.terminate() == 0, proc.logs()


def start_mounted(
    tmp_path: Path, reload_interval: float, workers: int = WORKERS
) -> tuple[ServerProcess, Path, Path]:
    """The server on a policy and certificate mounted as Kubernetes mounts them."""
    tls, policies = tmp_path / "tls", tmp_path / "policies"
    first = certs.issue(list(certs.LOCAL_HOSTS))
    mount(tls, tls_files(first), "1")
    mount(policies, {"policy.yaml": DEFAULT_POLICY.encode()}, "1")
    port, metrics_port = free_port(), free_port()
    args = [
        *serve_args(tls, port, metrics_port),
        "--policies",
        str(policies),
        "--reload-interval",
        str(reload_interval),
        "--workers",
        str(workers),
    ]
    ca_copy = tmp_path / "first-ca.crt"
    ca_copy.write_bytes(first.ca_cert)
    proc = ServerProcess(
        args, ca=ca_copy, log=tmp_path / "server.log", port=port, metrics_port=metrics_port
    )
    return proc, tls, policies


def test_new_connections_get_the_new_certificate(
    mounted_server: tuple[ServerProcess, Path, Path], tmp_path: Path
) -> None:
    server, tls, _ = mounted_server
    old_ca = server.ca
    with closing(Client(server.port, old_ca)) as kept:
        assert kept.get("/healthz").status == 200
        second = certs.issue(list(certs.LOCAL_HOSTS))
        new_ca = tmp_path / "second-ca.crt"
        new_ca.write_bytes(second.ca_cert)
        mount(tls, tls_files(second), "2")

        def new_certificate_served() -> bool:
            client = Client(server.port, new_ca, timeout=2)
            try:
                return client.get("/healthz").status == 200
            except ssl.SSLCertVerificationError:
                return False
            finally:
                client.close()

        # Checked once at start and once after the change; the workers are then replaced, new
        # ones first: until the old ones have stopped, a new connection may still reach one.
        wait_for(lambda: server.metric("preemptguard_certificate_reloads_total") == 2)
        wait_for(new_certificate_served, timeout=30)
        for n in range(1, WORKERS + 1):
            wait_for(lambda n=n: server.log_events(f"Stopped old worker-{n}"), timeout=30)
        for _ in range(2 * WORKERS):  # whichever worker takes it
            stale = Client(server.port, old_ca, timeout=2)
            try:
                with pytest.raises(ssl.SSLCertVerificationError):
                    stale.get("/healthz")
            finally:
                stale.close()
        # A connection opened before the swap was closed with its worker: the API server's pool
        # dials a new one, which gets the new certificate.
        with pytest.raises((ConnectionError, ssl.SSLError)):
            kept.get("/healthz")
    expiry = certs.not_after(second.cert).timestamp()
    assert server.metric("preemptguard_certificate_expiry_timestamp_seconds") == expiry
    assert server.log_events("certificate_reloaded")


def test_policy_change_takes_effect_and_an_invalid_one_is_refused(
    mounted_server: tuple[ServerProcess, Path, Path],
) -> None:
    server, _, policies = mounted_server
    client = server.client()
    assert client.post("/mutate", COORDINATOR).response["allowed"] is False

    mount(policies, {"policy.yaml": WARN_POLICY.encode()}, "2")
    wait_for(lambda: client.post("/mutate", COORDINATOR).response["allowed"])
    # Counted in each worker process that loads it.
    wait_for(lambda: server.metric("preemptguard_policy_reloads_total") == WORKERS)
    assert server.metric('preemptguard_policy_info{mode="warn",name="relaxed"}') == 1

    mount(policies, {"policy.yaml": BROKEN_POLICY.encode()}, "3")
    wait_for(lambda: server.metric("preemptguard_policy_reload_failures_total") == WORKERS)
    response = client.post("/mutate", COORDINATOR).response
    assert response["allowed"] is True  # still the last good policy, in warn mode
    assert any(w.startswith("would be refused in enforce mode") for w in response["warnings"])
    assert client.get("/readyz").status == 200
    client.close()
    refused = server.log_events("policy_reload_refused")
    assert len(refused) == WORKERS  # one line from each worker process
    assert "spec.mode" in refused[0]["error"]
    assert refused[0]["serving"] == "relaxed"


def worker_pids(server: ServerProcess) -> list[int]:
    """The workers: the children of the server process (none for a moment between a worker's
    death and its replacement)."""
    pid = server.proc.pid
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_restarted_worker_serves_the_current_policy_and_the_last_checked_certificate(
    tmp_path: Path,
) -> None:
    """A worker that crashes comes back with the policy on disk, not the one the server
    started with, and with the certificate the main process last checked: a pair on disk is
    served once it has been checked (here, not yet: the files are polled every 120 s)."""
    # One worker, so that every request reaches the restarted one.
    server, tls, policies = start_mounted(tmp_path, reload_interval=120, workers=1)
    mount(policies, {"policy.yaml": WARN_POLICY.encode()}, "2")
    mount(tls, tls_files(certs.issue(list(certs.LOCAL_HOSTS))), "2")

    def served() -> Reply | None:
        client = Client(server.port, server.ca, timeout=5)
        try:
            return client.post("/mutate", COORDINATOR)
        except OSError:  # the new worker is still starting
            return None
        finally:
            client.close()

    try:
        (crashed,) = worker_pids(server)
        os.kill(crashed, signal.SIGKILL)
        wait_for(lambda: worker_pids(server) not in ([], [crashed]), timeout=30)
        reply = wait_for(served, timeout=30)
        assert reply.status == 200
        # The start-up policy (enforce) refuses the coordinator; the current one (warn) admits it.
        assert reply.response["allowed"] is True
        assert server.metric('preemptguard_policy_info{mode="warn",name="relaxed"}') == 1
    finally:
        assert server.terminate() == 0, server.logs()
