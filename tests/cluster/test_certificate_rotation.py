"""Self-rotating certificates: what is renewed when (``renewal``, pure), and one replica's part
against the in-memory API server (``Rotation``): the Lease holder issues into the Secret and
keeps the caBundles equal to its CA bundle; every replica copies the pair it serves."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from prometheus_client import CollectorRegistry

from tests.cluster.conftest import FakeClock
from tests.cluster.fake_apiserver import FakeApiServer
from webhook.cli.main import main
from webhook.errors import CertificateError
from webhook.kube.client import Cluster
from webhook.server import certs
from webhook.server.metrics import CertificateMetrics
from webhook.server.rotation import (
    CA_BUNDLE,
    CERT,
    KEY,
    Lifetimes,
    Rotation,
    RotationSettings,
    renewal,
)

HOSTS = ("preemptguard.preemptguard-system.svc", "127.0.0.1")
SHORT = Lifetimes(
    serving=dt.timedelta(hours=10),
    serving_renew_before=dt.timedelta(hours=4),
    ca=dt.timedelta(days=10),
    ca_renew_before=dt.timedelta(days=3),
    overlap=dt.timedelta(minutes=10),
)
T0 = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def bundle_of(data: dict[str, bytes]) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data[CA_BUNDLE])


def serving_of(data: dict[str, bytes]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data[CERT])


def test_an_empty_secret_gets_a_ca_and_a_serving_pair_for_every_host() -> None:
    first = renewal({}, HOSTS, SHORT, T0)
    assert first is not None
    (ca,) = bundle_of(first.data)
    cert = serving_of(first.data)
    assert certs.signed_by(cert, ca)
    assert certs.covers(cert, HOSTS)
    assert cert.not_valid_after_utc == T0 + SHORT.serving
    assert "a new CA" in first.reasons
    # What it issued is good: asking again at once changes nothing.
    assert renewal(first.data, HOSTS, SHORT, T0 + dt.timedelta(minutes=1)) is None


def test_the_serving_pair_is_renewed_before_it_expires_under_the_same_ca() -> None:
    first = renewal({}, HOSTS, SHORT, T0)
    assert first is not None
    just_before = T0 + SHORT.serving - SHORT.serving_renew_before - dt.timedelta(minutes=1)
    assert renewal(first.data, HOSTS, SHORT, just_before) is None
    due = T0 + SHORT.serving - SHORT.serving_renew_before + dt.timedelta(minutes=1)
    second = renewal(first.data, HOSTS, SHORT, due)
    assert second is not None
    assert second.data[CA_BUNDLE] == first.data[CA_BUNDLE]
    assert serving_of(second.data).serial_number != serving_of(first.data).serial_number
    assert second.reasons == ("the serving certificate is due for renewal",)


def test_a_new_ca_is_trusted_beside_the_old_one_until_the_overlap_has_passed() -> None:
    first = renewal({}, HOSTS, SHORT, T0)
    assert first is not None
    (old_ca,) = bundle_of(first.data)
    due = T0 + SHORT.ca - SHORT.ca_renew_before + dt.timedelta(minutes=1)
    # Serving pairs renewed on time until then are signed by the old CA.
    held = renewal(first.data, HOSTS, SHORT, due)
    assert held is not None
    new_ca, kept = bundle_of(held.data)
    assert kept == old_ca
    assert certs.signed_by(serving_of(held.data), new_ca)
    assert "the CA renewed" in held.reasons

    # Within the overlap both stay; after it the old one leaves, and nothing else changes.
    assert renewal(held.data, HOSTS, SHORT, due + SHORT.overlap / 2) is None
    retired = renewal(held.data, HOSTS, SHORT, due + SHORT.overlap + dt.timedelta(seconds=1))
    assert retired is not None
    assert retired.reasons == ("the previous CA retired",)
    assert bundle_of(retired.data) == [new_ca]
    assert retired.data[CERT] == held.data[CERT]

    # The overlap counts from the CA's first pair: serving pairs renewed meanwhile, more often
    # than the overlap lasts, do not hold the old CA in the bundle.
    quick = dataclasses.replace(SHORT, overlap=SHORT.serving)
    renewed = renewal(held.data, HOSTS, quick, due + SHORT.serving - SHORT.serving_renew_before)
    assert renewed is not None
    assert len(bundle_of(renewed.data)) == 2
    later = renewal(renewed.data, HOSTS, quick, due + SHORT.serving + dt.timedelta(seconds=1))
    assert later is not None
    assert bundle_of(later.data) == [new_ca]


def test_a_pair_that_does_not_fit_is_issued_again() -> None:
    first = renewal({}, HOSTS, SHORT, T0)
    assert first is not None
    other = renewal({}, HOSTS, SHORT, T0)
    assert other is not None
    mismatched = dict(first.data, **{KEY: other.data[KEY]})
    fixed = renewal(mismatched, HOSTS, SHORT, T0)
    assert fixed is not None
    assert fixed.reasons == ("the serving key does not match its certificate",)
    assert fixed.data[CA_BUNDLE] == first.data[CA_BUNDLE]

    moved = renewal(first.data, (*HOSTS, "webhook.example"), SHORT, T0)
    assert moved is not None
    assert certs.covers(serving_of(moved.data), ("webhook.example",))

    garbage = {CA_BUNDLE: b"not a pem", CERT: b"", KEY: b"x"}
    rebuilt = renewal(garbage, HOSTS, SHORT, T0)
    assert rebuilt is not None
    assert len(bundle_of(rebuilt.data)) == 1


def test_lifetimes_that_would_renew_at_once_are_refused() -> None:
    assert Lifetimes().problems() == []
    assert SHORT.problems() == []
    bad = Lifetimes(serving=dt.timedelta(days=1), serving_renew_before=dt.timedelta(days=2))
    assert bad.problems() == ["the serving certificate would be renewed as soon as it is issued"]


# --- one replica, against the in-memory API server ---------------------------------------------

NAMESPACE = "preemptguard-system"


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


@pytest.fixture
def installed(fake: FakeApiServer) -> FakeApiServer:
    """The objects an install ships: an empty Secret and the webhook configurations."""
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "preemptguard-tls", "namespace": NAMESPACE},
            "type": "Opaque",
        }
    )
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        hooks = [
            {"name": f"{n}.preemptguard.together.ai", "clientConfig": {"url": "https://x/"}}
            for n in ("pods", "workloads")
        ]
        fake.put(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": "preemptguard"},
                "webhooks": hooks,
            }
        )
    return fake


def replica(
    connect: Callable[[], Cluster], tmp_path: Path, clock: FakeClock, identity: str
) -> tuple[Rotation, CollectorRegistry]:
    settings = RotationSettings(
        secret=f"{NAMESPACE}/preemptguard-tls",
        extra_hosts=("127.0.0.1",),
        configurations=("mutating/preemptguard", "validating/preemptguard"),
        lifetimes=SHORT,
        identity=identity,
    )
    registry = CollectorRegistry()
    cluster = connect()
    rotation = Rotation(
        lambda: cluster, settings, tmp_path / identity, CertificateMetrics(registry), clock
    )
    return rotation, registry


def count(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(f"preemptguard_certificate_{name}_total")


def test_the_lease_holder_issues_and_injects_and_every_replica_serves_the_pair(
    installed: FakeApiServer, connect: Callable[[], Cluster], tmp_path: Path, clock: FakeClock
) -> None:
    clock.time = T0.timestamp()
    (first, first_metrics), (second, second_metrics) = (
        replica(connect, tmp_path, clock, n) for n in ("a", "b")
    )
    assert first.step()
    assert first.leading
    assert second.step()
    assert not second.leading

    secret = installed.get("Secret", "preemptguard-tls", NAMESPACE)
    assert secret is not None
    bundle = secret["data"][CA_BUNDLE]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = installed.get(kind, "preemptguard")
        assert config is not None
        assert [h["clientConfig"]["caBundle"] for h in config["webhooks"]] == [bundle, bundle]
    for one in (first, second):
        assert one.cert_file.read_text() == base64.b64decode(secret["data"][CERT]).decode()
        assert one.key_file.stat().st_mode & 0o777 == 0o600
    assert count(first_metrics, "rotations") == 1
    assert count(second_metrics, "rotations") == 0

    # An upgrade that wrote the configurations without the caBundle: put back at the next step.
    installed.modify(
        "MutatingWebhookConfiguration",
        "preemptguard",
        webhooks=[{"name": "pods.preemptguard.together.ai", "clientConfig": {"url": "https://x/"}}],
    )
    clock.sleep(2)
    first.step()
    config = installed.get("MutatingWebhookConfiguration", "preemptguard")
    assert config is not None
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == bundle


def test_without_its_secret_a_replica_says_what_is_missing(
    fake: FakeApiServer, connect: Callable[[], Cluster], tmp_path: Path, clock: FakeClock
) -> None:
    one, metrics = replica(connect, tmp_path, clock, "a")
    with pytest.raises(CertificateError, match=r"no serving certificate in Secret .*404"):
        one.until_served(timeout=5)
    assert (count(metrics, "rotation_errors") or 0) >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cert-secret", "a/b/c"], "is not NAME or NAMESPACE/NAME"),
        (["--cert-secret", "tls", "--inject-ca-into", "webhook/x"], "not mutating/NAME"),
        (["--cert-secret", "tls", "--cert-lifetime", "soon"], "not a duration"),
        (["--cert-secret", "tls", "--cert-lifetime", "0s"], "not longer than zero"),
        (["--cert-secret", "tls", "--cert-lifetime", "10d"], "renewed as soon as it is issued"),
        (["--cert-secret", "tls", "--self-signed", "x"], "give --cert-secret, --cert-file"),
    ],
)
def test_serve_refuses_rotation_options_that_cannot_work(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
