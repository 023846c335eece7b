"""``preemptguard serve`` and ``preemptguard certs`` (registered on the main command group)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from webhook.cli.options import FiniteSeconds, metrics_port_option
from webhook.cli.rotation_options import rotation_options
from webhook.cli.service_options import log_level_option
from webhook.errors import CertificateError, PolicyError
from webhook.server import certs

if TYPE_CHECKING:
    from webhook.server.rotation import RotationSettings

SERVE_EXAMPLES = """
\b
Examples:
  preemptguard serve --self-signed .certs
  preemptguard serve --cert-file /tls/tls.crt --key-file /tls/tls.key --policies /policies
  preemptguard serve --cert-secret preemptguard-tls \\
    --inject-ca-into mutating/preemptguard --inject-ca-into validating/preemptguard
"""

CERTS_EXAMPLES = """
\b
Example:
  preemptguard certs --service preemptguard --namespace preemptguard-system --out .certs
"""

_PATH = click.Path(path_type=Path)


@click.command("serve", epilog=SERVE_EXAMPLES)
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8443,
    show_default=True,
    help="HTTPS port for the hooks.",
)
@metrics_port_option
@click.option("--policies", type=_PATH, help="Policy folder or file (default: built-in policy).")
@click.option("--cert-file", type=_PATH, help="PEM serving certificate (chain).")
@click.option("--key-file", type=_PATH, help="PEM private key of the serving certificate.")
@click.option(
    "--self-signed",
    type=_PATH,
    help="Issue a CA and a certificate for localhost and 127.0.0.1 into this folder "
    "(reused while valid); clients trust DIR/ca.crt.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Worker processes; 0: one per CPU the server may use (its affinity and CPU quota).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Threads per worker for reviews too large to check on its event loop.",
)
@click.option(
    "--graceful-timeout",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="Seconds to finish in-flight reviews after SIGTERM.",
)
@click.option(
    "--reload-interval",
    type=FiniteSeconds(above_zero=True),
    default=2.0,
    show_default=True,
    help="Seconds between checks of the policy and certificate files.",
)
@rotation_options
@log_level_option
def serve_command(
    host: str,
    port: int,
    metrics_port: int,
    policies: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    self_signed: Path | None,
    workers: int,
    threads: int,
    graceful_timeout: int,
    reload_interval: float,
    log_level: str,
    rotation: RotationSettings | None,
) -> None:
    """Serve /mutate and /validate over TLS, with /healthz, /readyz and /metrics.

    Namespace annotations are read from the cluster of KUBECONFIG, or in a pod from its
    service account; without either, the server runs without them.
    """
    # Imported here so that `check`, `explain` and `test` start without Flask, granian and
    # the kubernetes client.
    from webhook.server.runtime import ServeOptions, serve
    from webhook.server.serving import PortInUse, ServerSettings

    if rotation is not None:
        if cert_file or key_file or self_signed:
            raise click.UsageError("give --cert-secret, --cert-file/--key-file or --self-signed")
    else:
        cert_file, key_file = _serving_files(cert_file, key_file, self_signed)
    settings = ServerSettings(
        host=host,
        port=port,
        workers=workers,
        threads=threads,
        graceful_timeout=graceful_timeout,
        log_level=log_level,
    )
    options = ServeOptions(
        cert_file=cert_file,
        key_file=key_file,
        policies=policies,
        server=settings,
        metrics_port=metrics_port,
        reload_interval=reload_interval,
        rotation=rotation,
    )
    try:
        serve(options)
    except (PolicyError, CertificateError, PortInUse) as exc:
        click.echo(f"preemptguard serve: {exc}", err=True)
        sys.exit(2)


@click.command("certs", epilog=CERTS_EXAMPLES)
@click.option("--service", required=True, help="Name of the webhook's Service.")
@click.option("--namespace", required=True, help="Namespace of the Service.")
@click.option("--out", type=_PATH, required=True, help="Folder for ca.crt, tls.crt, tls.key.")
@click.option(
    "--host",
    "extra_hosts",
    multiple=True,
    help="Another DNS name or IP address for the certificate. Repeatable.",
)
def certs_command(service: str, namespace: str, out: Path, extra_hosts: tuple[str, ...]) -> None:
    """Issue a CA and a serving certificate for the webhook Service.

    Put DIR/ca.crt (base64) in the webhook configurations' caBundle, and tls.crt and tls.key
    in the Secret the server mounts.
    """
    hosts = [*certs.service_hosts(service, namespace), *extra_hosts]
    paths = certs.write(certs.issue(hosts), out)
    click.echo(f"wrote {paths.ca}, {paths.cert} and {paths.key} for {', '.join(hosts)}")


def _serving_files(
    cert_file: Path | None, key_file: Path | None, self_signed: Path | None
) -> tuple[Path, Path]:
    if self_signed is not None:
        if cert_file or key_file:
            raise click.UsageError("give --self-signed DIR or --cert-file/--key-file, not both")
        paths, issued = certs.ensure_self_signed(self_signed, certs.LOCAL_HOSTS)
        what = "issued new" if issued else "reusing"
        click.echo(f"{what} certificates in {self_signed}; clients trust {paths.ca}", err=True)
        return paths.cert, paths.key
    if cert_file is None or key_file is None:
        raise click.UsageError("give --cert-file and --key-file, or --self-signed DIR")
    return cert_file, key_file
