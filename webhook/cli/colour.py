"""Colour for the text output of ``check``, ``explain`` and ``test``: on a terminal only.

Colour is off when ``NO_COLOR`` is set to anything but the empty string (no-color.org), when
``--no-color`` is given, and whenever click would strip styles from the stream (a pipe, a
file). Text without colour is exactly the text with it, less the escape codes.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import TextIO

import click


@dataclass(frozen=True)
class Palette:
    """Styles for the words that carry a verdict; each returns its text unchanged when off."""

    enabled: bool = False

    def _style(
        self, text: str, fg: str | None = None, *, bold: bool | None = None, dim: bool | None = None
    ) -> str:
        return click.style(text, fg=fg, bold=bold, dim=dim) if self.enabled else text

    def good(self, text: str) -> str:
        return self._style(text, "green")

    def bad(self, text: str) -> str:
        return self._style(text, "red", bold=True)

    def warn(self, text: str) -> str:
        return self._style(text, "yellow")

    def change(self, text: str) -> str:
        return self._style(text, "cyan")

    def dim(self, text: str) -> str:
        return self._style(text, dim=True)

    def strong(self, text: str) -> str:
        return self._style(text, bold=True)


PLAIN = Palette()


def palette_for(stream: TextIO, *, no_color: bool) -> Palette:
    """The palette for text written to ``stream``."""
    if no_color or os.environ.get("NO_COLOR"):
        return PLAIN
    return Palette(enabled=_echo_keeps_styles(stream))


class _Probe(io.StringIO):
    """A stream that is a terminal exactly when ``stream`` is one."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except ValueError:  # closed
            return False


def _echo_keeps_styles(stream: TextIO) -> bool:
    """Whether ``click.echo`` would keep escape codes on ``stream``.

    Asked of click rather than of ``isatty`` alone, so that click's own overrides hold: a
    context's ``color`` setting, and the test runner's ``color=True``. The reports write their
    text themselves (in large pieces, not through ``echo``), so they must know beforehand.
    """
    probe = _Probe(stream)
    click.echo(click.style("x", bold=True), file=probe, nl=False)
    return probe.getvalue() != "x"
