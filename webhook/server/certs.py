"""A CA and a TLS serving certificate for the webhook, as the API server's Go client expects them.

Go refuses certificates that name their host only in the Common Name, SHA-1 signatures and small
RSA keys, and needs an IP SAN to reach ``https://127.0.0.1``: every host goes into the SAN.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
LOCAL_HOSTS = ("localhost", "127.0.0.1")
CA_LIFETIME = dt.timedelta(days=3650)
SERVING_LIFETIME = dt.timedelta(days=365)
# Clocks of the API server and the webhook node can disagree by seconds.
BACKDATE = dt.timedelta(minutes=1)
# A reused certificate must outlive a long local session; below this it is issued afresh.
MIN_REMAINING = dt.timedelta(days=30)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Issued:
    """PEM bytes of a CA certificate, a serving certificate it signed, and the serving key."""

    ca_cert: bytes
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class CertPaths:
    ca: Path
    cert: Path
    key: Path

    @classmethod
    def in_dir(cls, directory: Path) -> CertPaths:
        return cls(directory / CA_FILE, directory / CERT_FILE, directory / KEY_FILE)


def service_hosts(service: str, namespace: str) -> list[str]:
    """The names a Service is reached by inside the cluster; the API server uses ``svc.ns.svc``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def issue(hosts: Sequence[str], *, now: dt.datetime | None = None) -> Issued:
    """A fresh CA and a serving certificate for ``hosts`` (DNS names or IP addresses)."""
    now = now or dt.datetime.now(dt.UTC)
    ca = issue_ca(now=now)
    serving = issue_serving(ca, hosts, now=now)
    return Issued(ca_cert=ca.cert, cert=serving.cert, key=serving.key)


@dataclass(frozen=True)
class Pair:
    """PEM bytes of a certificate and its private key."""

    cert: bytes
    key: bytes


def issue_ca(*, now: dt.datetime | None = None, lifetime: dt.timedelta = CA_LIFETIME) -> Pair:
    """A self-signed CA (ECDSA P-256) that signs serving certificates only."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    # The serial in the name tells two CAs apart in a bundle holding both during a rotation.
    serial = x509.random_serial_number()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "preemptguard webhook CA"),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, f"{serial:x}"[:64]),
        ]
    )
    cert = (
        _builder(name, name, key.public_key(), now, lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def issue_serving(
    ca: Pair,
    hosts: Sequence[str],
    *,
    now: dt.datetime | None = None,
    lifetime: dt.timedelta = SERVING_LIFETIME,
) -> Pair:
    """A serving certificate (ECDSA P-256) for ``hosts``, signed by ``ca``; never valid
    beyond the CA itself."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name")
    now = now or dt.datetime.now(dt.UTC)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key is not an ECDSA key")
    lifetime = min(lifetime, ca_cert.not_valid_after_utc - now)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), now, lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_general_names(hosts)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write(issued: Issued, directory: Path) -> CertPaths:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` (owner-only) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = CertPaths.in_dir(directory)
    _write_atomically(paths.ca, issued.ca_cert, 0o644)
    _write_atomically(paths.cert, issued.cert, 0o644)
    _write_atomically(paths.key, issued.key, 0o600)
    return paths


def ensure_self_signed(directory: Path, hosts: Sequence[str]) -> tuple[CertPaths, bool]:
    """Certificates for ``hosts`` in ``directory``: the ones there if still good, else new ones.

    Returns the paths and whether new files were written (a new CA: clients must trust it anew).
    """
    paths = CertPaths.in_dir(directory)
    if reusable(paths, hosts):
        return paths, False
    return write(issue(hosts), directory), True


def reusable(paths: CertPaths, hosts: Sequence[str], *, now: dt.datetime | None = None) -> bool:
    """Whether the files exist, match, chain to the CA, cover ``hosts`` and stay valid a while."""
    try:
        ca = x509.load_pem_x509_certificate(paths.ca.read_bytes())
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
    except (OSError, ValueError):
        return False
    now = now or dt.datetime.now(dt.UTC)
    return (
        same_public_key(cert, key)
        and signed_by(cert, ca)
        and all(c.not_valid_after_utc - now > MIN_REMAINING for c in (ca, cert))
        and all(c.not_valid_before_utc <= now for c in (ca, cert))
        and covers(cert, hosts)
    )


def covers(cert: x509.Certificate, hosts: Sequence[str]) -> bool:
    """Whether every host is named in the certificate's SAN (exact names; no wildcards issued)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = set(san.get_values_for_type(x509.IPAddress))
    return all((ip in ips) if (ip := _ip(h)) is not None else (h.lower() in dns) for h in hosts)


def not_after(cert_pem: bytes) -> dt.datetime:
    """When the first certificate in ``cert_pem`` expires."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: dt.datetime,
    lifetime: dt.timedelta,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        ip = _ip(host)
        names.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(host.lower()))
    return names


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def same_public_key(cert: x509.Certificate, key: object) -> bool:
    public = getattr(key, "public_key", None)
    if public is None:
        return False
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    return bool(cert.public_key().public_bytes(enc, fmt) == public().public_bytes(enc, fmt))


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` in one rename, so a server reloading it never reads half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(fd, mode)
        out.write(data)
    tmp.replace(path)
