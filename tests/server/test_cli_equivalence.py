"""`preemptguard check` and the running server give every recorded review the same answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.server.helpers import FIXTURES, ServerProcess, fixture, fixture_names
from webhook.cli.main import main

pytestmark = pytest.mark.slow


def hook_of(name: str) -> str:
    return "validate" if "-validate" in name else "mutate"


def check_json(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["check", "-f", str(path), "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.parametrize("name", fixture_names())
def test_check_answers_a_recorded_review_as_the_server_does(
    server: ServerProcess, name: str
) -> None:
    hook = hook_of(name)
    client = server.client()
    served = client.post(f"/{hook}", fixture(name)).json()
    client.close()
    checked = check_json(FIXTURES / f"{name}.json")
    assert checked["inputErrors"] == []
    [result] = checked["results"]
    assert result["reviews"][hook] == served
    # The other hook's answer is the server's too.
    other = "mutate" if hook == "validate" else "validate"
    client = server.client()
    assert result["reviews"][other] == client.post(f"/{other}", fixture(name)).json()
    client.close()


def test_every_fixture_is_compared() -> None:
    assert len(fixture_names()) >= 18
