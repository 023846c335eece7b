"""TLS ClientHellos an attacker replays, one key-exchange group each.

A server that accepts a hello does its half of the key exchange and signs the handshake before
the client proves anything: what that costs depends on the group the hello names, and the
attacker picks it. These hellos are built by hand so that any group can be offered, whatever
the attacker's own TLS library allows, and so that one hello can be sent again and again with
no cryptography on the attacker's side.
"""

from __future__ import annotations

import random
import socket
import ssl
import struct

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, x448, x25519

# Every named group of the TLS registry that a TLS 1.3 server may accept a key share for
# (RFC 8446 section 4.2.7, RFC 7919), by the names OpenSSL gives them.
GROUPS: dict[str, int] = {
    "x25519": 0x001D,
    "secp256r1": 0x0017,
    "secp384r1": 0x0018,
    "secp521r1": 0x0019,
    "x448": 0x001E,
    "ffdhe2048": 0x0100,
    "ffdhe3072": 0x0101,
    "ffdhe4096": 0x0102,
    "ffdhe6144": 0x0103,
    "ffdhe8192": 0x0104,
}
# OpenSSL's names for the same groups, for a real client restricted to one of them.
OPENSSL_NAMES = {"x25519": "X25519", "x448": "X448", "secp256r1": "prime256v1"}
_CURVES: dict[str, ec.EllipticCurve] = {
    "secp256r1": ec.SECP256R1(),
    "secp384r1": ec.SECP384R1(),
    "secp521r1": ec.SECP521R1(),
}
_FFDHE_BYTES = {"ffdhe2048": 256, "ffdhe3072": 384, "ffdhe4096": 512, "ffdhe6144": 768}
_FFDHE_BYTES["ffdhe8192"] = 1024

# TLS 1.3's suites, and two of TLS 1.2's for a server that does not speak 1.3.
_SUITES = (0x1301, 0x1302, 0x1303, 0xC02B, 0xC02F)
# ECDSA and RSA-PSS/PKCS#1 with SHA-256/384/512: whatever the server's key, it can sign.
_SIGNATURES = (0x0403, 0x0503, 0x0603, 0x0804, 0x0805, 0x0806, 0x0401, 0x0501)


def key_share(group: str, rng: random.Random) -> bytes:
    """A valid public key of ``group``, derived from ``rng`` (the same seed, the same key)."""
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    if group == "x25519":
        return (
            x25519.X25519PrivateKey.from_private_bytes(rng.randbytes(32))
            .public_key()
            .public_bytes(*raw)
        )
    if group == "x448":
        return (
            x448.X448PrivateKey.from_private_bytes(rng.randbytes(56))
            .public_key()
            .public_bytes(*raw)
        )
    if group in _CURVES:
        curve = _CURVES[group]
        secret = rng.randrange(1, 2 ** (curve.key_size - 1))
        point = ec.derive_private_key(secret, curve).public_key()
        return point.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
    # 2^2 mod p: in the subgroup of prime order that RFC 7919's generator 2 spans, so a server
    # that checks the key (OpenSSL does, with one more exponentiation) still accepts it.
    return (4).to_bytes(_FFDHE_BYTES[group], "big")


def client_hello(group: str, rng: random.Random, server_name: str = "localhost") -> bytes:
    """One TLS record holding a ClientHello for TLS 1.3 (and 1.2) that offers only ``group``,
    with a key share for it."""
    code = GROUPS[group]
    extensions = b"".join(
        [
            _extension(0x0000, _u16(b"\x00" + _u16(server_name.encode()))),  # server_name
            _extension(0x000A, _u16(struct.pack("!H", code))),  # supported_groups
            _extension(0x000B, _u8(b"\x00")),  # ec_point_formats: uncompressed
            _extension(0x000D, _u16(struct.pack(f"!{len(_SIGNATURES)}H", *_SIGNATURES))),
            _extension(0x002B, _u8(struct.pack("!2H", 0x0304, 0x0303))),  # versions 1.3, 1.2
            _extension(0x002D, _u8(b"\x01")),  # psk_key_exchange_modes: psk_dhe_ke
            _extension(0x0033, _u16(struct.pack("!H", code) + _u16(key_share(group, rng)))),
        ]
    )
    suites = struct.pack(f"!{len(_SUITES)}H", *_SUITES)
    body = b"\x03\x03" + rng.randbytes(32) + _u8(rng.randbytes(32)) + _u16(suites)
    body += _u8(b"\x00") + _u16(extensions)
    handshake = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + _u16(handshake)


def send_hello(host: str, port: int, hello: bytes, timeout: float) -> bytes:
    """Send ``hello`` on a new connection and return the first bytes the server answers
    (its ServerHello and the rest of its flight, or an alert), then close."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(hello)
        try:
            return conn.recv(65536)
        except OSError:
            return b""


def accepted(answer: bytes) -> bool:
    """Whether the server's first bytes are a handshake record (it took the hello on)."""
    return answer[:1] == b"\x16"


def restricted_client(group: str) -> ssl.SSLContext:
    """A client context that offers only ``group`` (and checks nothing: an attacker)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # OpenSSL 3 sets the groups offered from this one name (SSL_CTX_set1_groups).
    context.set_ecdh_curve(OPENSSL_NAMES.get(group, group))
    return context


def full_handshake(host: str, port: int, context: ssl.SSLContext, timeout: float) -> bool:
    """Complete a handshake with ``context`` on a new connection, then close; whether the
    server took it."""
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname="localhost"),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def _u8(data: bytes) -> bytes:
    return struct.pack("!B", len(data)) + data


def _u16(data: bytes) -> bytes:
    return struct.pack("!H", len(data)) + data


def _extension(kind: int, body: bytes) -> bytes:
    return struct.pack("!H", kind) + _u16(body)
