"""Options shared by the commands, kept apart from any command so that ``check`` imports none
of the others."""

from __future__ import annotations

from pathlib import Path

import click


def policies_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--policies``, the same option on every command that judges with a policy."""
    return click.option(
        "--policies",
        type=click.Path(path_type=Path),
        default=None,
        help="Policy folder or file (default: the built-in default policy).",
    )(func)
