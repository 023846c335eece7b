"""The engine stays pure: its modules import no web, CLI, cluster or logging library."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

ENGINE = [
    "classify",
    "constraints",
    "decision",
    "engine",
    "grace",
    "jsoncompare",
    "hints",
    "trust",
    "patch",
    "placement",
    "podshape",
    "policy",
    "policy_files",
    "workloads",
    "yamlnodes",
]
FORBIDDEN = {
    "click",
    "flask",
    "werkzeug",
    "gunicorn",
    "kubernetes",
    "structlog",
    "prometheus_client",
    "socket",
    "ssl",
    "http",
    "urllib",
    "requests",
    "subprocess",
    "threading",
    "logging",
}


def imports(module: str) -> set[str]:
    tree = ast.parse((REPO / "webhook" / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", ENGINE)
def test_engine_module_imports_only_pure_libraries(module: str) -> None:
    names = imports(module)
    assert not {n.split(".")[0] for n in names} & FORBIDDEN
    inner = {n.removeprefix("webhook.") for n in names if n.startswith("webhook.")}
    assert inner <= set(ENGINE), f"{module} reaches outside the engine: {inner - set(ENGINE)}"
