"""``preemptguard certs``, ``serve --self-signed`` and what the certificates contain."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import ssl
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from tests.server.helpers import BROKEN_POLICY, REPO, SERVE, ServerProcess, free_port
from webhook.cli.server_commands import certs_command, serve_command
from webhook.server import certs

pytestmark = pytest.mark.slow


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certs_command_writes_a_ca_and_a_serving_certificate(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        certs_command, ["--service", "preemptguard", "--namespace", "pg-system", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    ca, leaf = load(out / "ca.crt"), load(out / "tls.crt")
    assert (out / "tls.key").stat().st_mode & 0o777 == 0o600

    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    leaf.verify_directly_issued_by(ca)

    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "preemptguard",
        "preemptguard.pg-system",
        "preemptguard.pg-system.svc",
        "preemptguard.pg-system.svc.cluster.local",
    ]
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert isinstance(leaf.signature_hash_algorithm, hashes.SHA256)
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)
    now = dt.datetime.now(dt.UTC)
    assert now - dt.timedelta(minutes=2) < leaf.not_valid_before_utc < now
    assert leaf.serial_number > 0


def test_go_style_verification_of_the_service_name(tmp_path: Path) -> None:
    paths = certs.write(certs.issue(certs.service_hosts("svc", "ns")), tmp_path)
    context = ssl.create_default_context(cafile=str(paths.ca))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(paths.cert, paths.key)
    # A verified handshake in memory, as the API server makes it to svc.ns.svc.
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = context.wrap_bio(client_in, client_out, server_hostname="svc.ns.svc")
    serving = server.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(10):
        for side in (client, serving):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    assert client.version() in ("TLSv1.3", "TLSv1.2")


def test_self_signed_certificates_are_reused_while_valid(tmp_path: Path) -> None:
    paths, issued = certs.ensure_self_signed(tmp_path, certs.LOCAL_HOSTS)
    assert issued
    leaf = load(paths.cert)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    first = paths.cert.read_bytes()
    assert certs.ensure_self_signed(tmp_path, certs.LOCAL_HOSTS) == (paths, False)
    assert paths.cert.read_bytes() == first
    # Not covering a host, or a key that does not match: issued afresh.
    _, issued = certs.ensure_self_signed(tmp_path, [*certs.LOCAL_HOSTS, "webhook.test"])
    assert issued
    paths.key.write_bytes(certs.issue(["other"]).key)
    assert certs.ensure_self_signed(tmp_path, certs.LOCAL_HOSTS)[1] is True


def test_expiring_certificates_are_not_reused(tmp_path: Path) -> None:
    long_ago = dt.datetime.now(dt.UTC) - certs.SERVING_LIFETIME + dt.timedelta(days=5)
    certs.write(certs.issue(list(certs.LOCAL_HOSTS), now=long_ago), tmp_path)
    assert not certs.reusable(certs.CertPaths.in_dir(tmp_path), certs.LOCAL_HOSTS)


def test_serve_self_signed_is_verifiable_with_its_ca(tmp_path: Path) -> None:
    port = free_port()
    directory = tmp_path / "local"
    args = ["--self-signed", str(directory), "--host", "127.0.0.1", "--port", str(port),
            "--metrics-port", "0"]  # fmt: skip
    server = ServerProcess(
        args, ca=directory / "ca.crt", log=tmp_path / "log", port=port, metrics_port=0
    )
    client = server.client()
    assert client.get("/readyz").status == 200
    client.close()
    assert server.terminate() == 0
    assert "issued new certificates" in server.logs()


def test_serve_needs_certificates() -> None:
    result = CliRunner().invoke(serve_command, ["--port", "1"])
    assert result.exit_code == 2
    assert "give --cert-file and --key-file, or --self-signed DIR" in result.output


def test_serve_refuses_an_invalid_policy_at_start(tmp_path: Path, tls_dir: Path) -> None:
    (tmp_path / "policy.yaml").write_text(BROKEN_POLICY)
    args = ["--cert-file", str(tls_dir / "tls.crt"), "--key-file", str(tls_dir / "tls.key"),
            "--policies", str(tmp_path), "--port", str(free_port()), "--metrics-port", "0"]  # fmt: skip
    done = subprocess.run([*SERVE, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("preemptguard serve: ")
    assert f"{tmp_path}/policy.yaml:" in done.stderr
    assert "spec.mode" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_unusable_certificates(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    args = ["--cert-file", str(tmp_path / "tls.crt"), "--key-file", str(tmp_path / "tls.key"),
            "--port", str(free_port()), "--metrics-port", "0"]  # fmt: skip
    done = subprocess.run([*SERVE, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    assert "cannot use certificate" in done.stderr
