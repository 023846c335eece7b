"""The harness's own parts that need no control plane: reading the API server's JSON of any
depth and its warnings, telling releases and flags apart, the token file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import pki
from harness.binaries import MAIN, OLDEST, Binaries, ControlPlaneError, release
from harness.kube import _loads_iteratively, loads, parse_warnings
from tests.adversarial import encode


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "[]",
        '"s"',
        "-1.5e3",
        " [ true , false, null ] ",
        '{"a": [1, 2, {"b": null}], "c": "x\\"y\\u00e9", "": ""}',
        '{"a": {"b": {}}, "e": [[], [{}]]}',
    ],
)
def test_the_iterative_decoder_reads_what_json_reads(text: str) -> None:
    assert _loads_iteratively(text) == json.loads(text)


@pytest.mark.parametrize("text", ["{", "[1] 2", "{1: 2}", "nul", "[1]]"])
def test_the_iterative_decoder_refuses_broken_nesting_and_tokens(text: str) -> None:
    # It reads what the API server writes, which is valid JSON: it checks brackets, keys and
    # tokens, not where every comma and colon stands.
    with pytest.raises(ValueError):  # noqa: PT011 - every message is about the text
        _loads_iteratively(text)


def test_json_nested_as_deep_as_the_api_server_returns_it_is_read_whole() -> None:
    deep: dict[str, object] = {}
    for _ in range(10_000):
        deep = {"f:x": deep}
    value = loads(encode({"managedFields": [deep]}).decode())
    levels, node = 0, value["managedFields"][0]
    while node:
        node, levels = node["f:x"], levels + 1
    assert levels == 10_000


def test_warnings_are_read_from_the_header() -> None:
    header = '299 - "first, with a comma", 299 - "second \\"quoted\\""'
    assert parse_warnings(header) == ["first, with a comma", 'second "quoted"']
    assert parse_warnings(None) == []


def test_releases_are_known_by_name_or_test_id() -> None:
    assert release("1.37") is MAIN
    assert release("k8s-1.20") is OLDEST
    assert MAIN.honours_assets
    assert not OLDEST.honours_assets
    with pytest.raises(ControlPlaneError, match=r"known: 1\.37, 1\.20"):
        release("1.99")


def test_flags_are_read_from_help_whole(tmp_path: Path) -> None:
    tool = tmp_path / "kube-scheduler"
    tool.write_text(
        "#!/bin/sh\ncat <<'EOF'\n"
        "      --port int         DEPRECATED: the insecure port\n"
        "      --authentication-skip-lookup   If false, ...\n"
        "  -v, --v Level          log level\n"
        "EOF\n"
    )
    tool.chmod(0o755)
    found = Binaries(MAIN, tmp_path)
    assert found.has_flag("kube-scheduler", "--port")
    assert found.has_flag("kube-scheduler", "--authentication-skip-lookup")
    assert found.has_flag("kube-scheduler", "--v")
    assert not found.has_flag("kube-scheduler", "--por")
    assert not found.has_flag("kube-scheduler", "--authentication")


def test_each_identity_gets_a_token_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    tokens = pki.write_token_file(path, [pki.ADMIN, pki.SCHEDULER])
    lines = path.read_text().splitlines()
    assert lines == [
        f'{tokens["admin"]},admin,uid-0,"system:masters"',
        f"{tokens['system:kube-scheduler']},system:kube-scheduler,uid-1",
    ]
    assert tokens["admin"] != tokens["system:kube-scheduler"]
    assert path.stat().st_mode & 0o777 == 0o600
