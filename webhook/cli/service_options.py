"""Options of the commands that run for good (``serve``, ``observe``): apart from
``options``, which ``check`` imports, so that ``check`` does not import the server's logging."""

from __future__ import annotations

import click

from webhook.server.logs import LEVELS


def log_level_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--log-level``, of the commands that run for good and log as they go."""
    return click.option(
        "--log-level",
        type=click.Choice(LEVELS),
        default="info",
        show_default=True,
        help="The least severe log lines written (JSON lines on stdout).",
    )(func)
