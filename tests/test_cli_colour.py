"""Colour in the text of check, explain and test: on a terminal only, never with NO_COLOR or
--no-color, never in a pipe or a file, and never in JSON."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess

import click
import pytest
from click.testing import CliRunner

from tests.conftest import REPO
from tests.test_cli import EXE, run
from webhook.cli.main import main

ESCAPE = "\x1b["
COMMANDS = [
    pytest.param(["check", "-f", "examples/coordinator.yaml"], id="check"),
    pytest.param(["explain", "-f", "examples/coordinator.yaml"], id="explain"),
    pytest.param(["test", "policies/packing"], id="test"),
]


def invoke(args: list[str], *, color: bool, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, args, color=color, env=env)
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.fixture(autouse=True)
def no_inherited_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.chdir(REPO)


@pytest.mark.parametrize("args", COMMANDS)
def test_a_terminal_gets_colour_and_the_same_text(args: list[str]) -> None:
    coloured = invoke(args, color=True)
    plain = invoke(args, color=False)
    assert ESCAPE in coloured
    assert ESCAPE not in plain
    assert click.unstyle(coloured) == plain


def test_the_verdicts_carry_the_colours() -> None:
    check = invoke(["check", "-f", "examples/coordinator.yaml"], color=True)
    assert click.style("REFUSED", fg="red", bold=True) in check
    assert click.style("ALLOWED", fg="green") in check
    tested = invoke(["test", "policies/packing"], color=True)
    assert click.style("PASS", fg="green") + "  " in tested


@pytest.mark.parametrize("args", COMMANDS)
@pytest.mark.parametrize("value", ["1", "true", "0"])
def test_no_color_set_to_anything_turns_colour_off(args: list[str], value: str) -> None:
    output = invoke(args, color=True, env={"NO_COLOR": value})
    assert ESCAPE not in output
    assert output == invoke(args, color=False)


def test_an_empty_no_color_is_not_set() -> None:
    # no-color.org: "when present and not an empty string".
    args = ["check", "-f", "examples/coordinator.yaml"]
    assert ESCAPE in invoke(args, color=True, env={"NO_COLOR": ""})


@pytest.mark.parametrize("args", COMMANDS)
def test_the_flag_turns_colour_off(args: list[str]) -> None:
    output = invoke([*args, "--no-color"], color=True)
    assert ESCAPE not in output
    assert output == invoke(args, color=False)


@pytest.mark.parametrize(
    "args",
    [
        ["check", "-f", "examples/coordinator.yaml", "-o", "json"],
        ["explain", "-f", "examples/coordinator.yaml", "-o", "json"],
        ["check", "-f", "examples/coordinator.yaml", "-o", "manifests"],
        ["test", "policies/packing", "-o", "json"],
        ["test", "policies/packing", "-o", "junit"],
    ],
    ids=lambda a: " ".join(a[:1] + a[-2:]),
)
def test_formats_for_programs_never_have_colour(args: list[str]) -> None:
    assert ESCAPE not in invoke(args, color=True)


@pytest.mark.parametrize("args", COMMANDS)
def test_a_pipe_gets_no_colour(args: list[str]) -> None:
    proc = run(*args)
    assert proc.returncode in (0, 1)
    assert "\x1b" not in proc.stdout


def on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """What the installed command writes when its stdout is a pseudo-terminal."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [EXE, *args], stdout=follower, stderr=subprocess.PIPE, cwd=REPO, env=env
    ) as proc:
        os.close(follower)
        chunks = []
        with contextlib.suppress(OSError):  # EIO: the command closed its end
            while chunk := os.read(leader, 65536):
                chunks.append(chunk)
        os.close(leader)
        assert proc.wait(timeout=60) in (0, 1)
    return b"".join(chunks).decode()


def test_a_real_terminal_gets_colour_unless_no_color_is_set() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    args = ("check", "-f", "examples/coordinator.yaml")
    assert ESCAPE in on_a_terminal(*args, env=env)
    assert ESCAPE not in on_a_terminal(*args, env={**env, "NO_COLOR": "1"})
    assert ESCAPE not in on_a_terminal(*args, "--no-color", env=env)
