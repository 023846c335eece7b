"""Options shared by the commands, kept apart from any command so that ``check`` imports none
of the others."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def policies_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--policies``, the same option on every command that judges with a policy."""
    return click.option(
        "--policies",
        type=click.Path(path_type=Path),
        default=None,
        help="Policy folder or file (default: the built-in default policy).",
    )(func)


def metrics_port_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--metrics-port``, where the commands that serve metrics serve them."""
    return click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=9090,
        show_default=True,
        help="Plain-HTTP port of /metrics; 0: off.",
    )(func)


def output_option(*formats: str, help: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``-o``/``--output``, the first of ``formats`` by default."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(formats),
        default=formats[0],
        show_default=True,
        help=help,
    )


def no_color_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--no-color``, on every command whose text output has colour."""
    return click.option(
        "--no-color",
        is_flag=True,
        help="No colour in the text output. Colour is only ever written to a terminal, and "
        "never when the NO_COLOR environment variable is set.",
    )(func)


class FiniteSeconds(click.FloatRange):
    """Seconds from 0 up, finite: ``float()`` reads ``nan`` and ``inf``, and a drill waiting
    for NaN seconds would fail only after its deletes, an audit every inf seconds never
    runs."""

    name = "seconds"

    def __init__(self, *, above_zero: bool = False) -> None:
        super().__init__(min=0, min_open=above_zero)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return super().convert(seconds, param, ctx)
