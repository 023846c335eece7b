"""Throwaway credentials of the control plane: a CA and a serving certificate, the
service-account signing key, and static bearer tokens.

Kept apart from the product's own certificate code (``webhook.server.certs``) so that the
control plane does not depend on the code under test.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class TLSFiles:
    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class ServiceAccountKeys:
    private: Path
    public: Path


@dataclass(frozen=True)
class Identity:
    """Who a static token authenticates as."""

    user: str
    groups: tuple[str, ...] = ()


# system:masters bypasses RBAC, as the admin of any fresh cluster does. The scheduler and the
# controller-manager get the users that the default RBAC bootstrap binds to their roles.
ADMIN = Identity("admin", ("system:masters",))
SCHEDULER = Identity("system:kube-scheduler")
CONTROLLER_MANAGER = Identity("system:kube-controller-manager")


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _ca(name: x509.Name, key: ec.EllipticCurvePrivateKey, now: dt.datetime) -> x509.Certificate:
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def write_serving_tls(directory: Path, hosts: Sequence[str]) -> TLSFiles:
    """A throwaway CA and a serving certificate for ``hosts``, as ca.crt/tls.crt/tls.key."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "e2e control plane CA")])
    ca = _ca(ca_name, ca_key, now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TLSFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(files.key, _pem_key(key))
    return files


def write_service_account_keys(directory: Path) -> ServiceAccountKeys:
    """The key pair that signs service-account tokens (API server) and verifies them."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys = ServiceAccountKeys(directory / "sa.key", directory / "sa.pub")
    _write_private(keys.private, _pem_key(key))
    keys.public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return keys


def write_token_file(path: Path, identities: Sequence[Identity]) -> dict[str, str]:
    """A kube-apiserver ``--token-auth-file`` with a fresh token per identity; user -> token."""
    tokens = {identity.user: secrets.token_hex(16) for identity in identities}
    lines = []
    for number, identity in enumerate(identities):
        line = f"{tokens[identity.user]},{identity.user},uid-{number}"
        if identity.groups:
            line += f',"{",".join(identity.groups)}"'
        lines.append(line + "\n")
    _write_private(path, "".join(lines).encode())
    return tokens
