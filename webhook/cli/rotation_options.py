"""``serve``'s options for self-rotating certificates, gathered into one ``RotationSettings``."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable
from typing import Any

import click

from webhook.kube.lease import candidate_identity
from webhook.server.rotation import CONFIGURATION_KINDS, Lifetimes, RotationSettings

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class Duration(click.ParamType[dt.timedelta, Any]):
    """A span of time as ``90d``, ``36h``, ``1h30m`` or ``45s``."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dt.timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip())
        if not match or not any(match.groups()):
            self.fail(f"{value!r} is not a duration such as 90d, 36h, 1h30m or 45s", param, ctx)
        seconds = sum(
            int(n) * unit for n, unit in zip(match.groups(), _UNITS.values(), strict=True) if n
        )
        if seconds <= 0:
            self.fail(f"{value!r} is not longer than zero", param, ctx)
        return dt.timedelta(seconds=seconds)


class Configuration(click.ParamType[str, Any]):
    """A webhook configuration as ``mutating/NAME`` or ``validating/NAME``."""

    name = "kind/name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        kind, _, name = str(value).partition("/")
        if kind not in CONFIGURATION_KINDS or not name:
            self.fail(f"{value!r} is not mutating/NAME or validating/NAME", param, ctx)
        return f"{kind}/{name}"


_DEFAULTS = Lifetimes()
_OPTIONS = [
    click.option(
        "--cert-secret",
        metavar="[NAMESPACE/]NAME",
        help="Self-rotating certificates: serve the pair in this Secret, and, on the replica "
        "that holds the Lease, issue and renew it (instead of --cert-file/--key-file).",
    ),
    click.option(
        "--cert-service",
        default="preemptguard",
        show_default=True,
        help="The Service the API server calls, named in the issued certificate.",
    ),
    click.option(
        "--cert-host",
        "cert_hosts",
        multiple=True,
        help="Another DNS name or IP address for the issued certificate. Repeatable.",
    ),
    click.option(
        "--inject-ca-into",
        "configurations",
        type=Configuration(),
        multiple=True,
        help="A webhook configuration whose caBundle follows the Secret's CA, as "
        "mutating/NAME or validating/NAME. Repeatable.",
    ),
    click.option(
        "--cert-lifetime", type=Duration(), default="90d", show_default=True,
        help="How long an issued serving certificate is valid.",
    ),
    click.option(
        "--cert-renew-before", type=Duration(), default="30d", show_default=True,
        help="Renew the serving certificate this long before it expires.",
    ),
    click.option(
        "--ca-lifetime", type=Duration(), default=f"{_DEFAULTS.ca.days}d", show_default=True,
        help="How long an issued CA is valid.",
    ),
    click.option(
        "--ca-renew-before", type=Duration(), default=f"{_DEFAULTS.ca_renew_before.days}d",
        show_default=True, help="Issue the next CA this long before the CA expires.",
    ),
    click.option(
        "--ca-overlap", type=Duration(), default="10m", show_default=True,
        help="How long the previous CA stays trusted after the next one signs.",
    ),
    click.option(
        "--cert-lease", default="preemptguard-certificates", show_default=True,
        help="The Lease whose holder issues certificates (in the Secret's namespace).",
    ),
]  # fmt: skip


def rotation_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options to a command, which receives them as one ``rotation`` argument:
    ``RotationSettings``, or None without ``--cert-secret``."""

    @functools.wraps(func)
    def command(
        *args: Any,
        cert_secret: str | None,
        cert_service: str,
        cert_hosts: tuple[str, ...],
        configurations: tuple[str, ...],
        cert_lifetime: dt.timedelta,
        cert_renew_before: dt.timedelta,
        ca_lifetime: dt.timedelta,
        ca_renew_before: dt.timedelta,
        ca_overlap: dt.timedelta,
        cert_lease: str,
        **kwargs: Any,
    ) -> Any:
        rotation = None
        if cert_secret is not None:
            lifetimes = Lifetimes(
                cert_lifetime, cert_renew_before, ca_lifetime, ca_renew_before, ca_overlap
            )
            if problems := lifetimes.problems():
                raise click.BadParameter("; ".join(problems), param_hint="certificate lifetimes")
            rotation = RotationSettings(
                secret=_secret(cert_secret),
                service=cert_service,
                extra_hosts=cert_hosts,
                configurations=configurations,
                lifetimes=lifetimes,
                lease=cert_lease,
                identity=candidate_identity(),
            )
        return func(*args, rotation=rotation, **kwargs)

    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def _secret(value: str) -> str:
    namespace, slash, name = value.rpartition("/")
    if not name or (slash and not namespace) or "/" in namespace:
        raise click.BadParameter(
            f"{value!r} is not NAME or NAMESPACE/NAME", param_hint="--cert-secret"
        )
    return value
