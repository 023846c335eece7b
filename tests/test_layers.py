"""The layers stated in pyproject.toml (import-linter) hold, and a broken one is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_the_layers_hold() -> None:
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def copy_of_the_package(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(
        REPO / "webhook", root / "webhook", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_engine_importing_the_server_breaks_the_layers(tmp_path: Path) -> None:
    root = copy_of_the_package(tmp_path)
    with (root / "webhook" / "engine" / "grace.py").open("a") as module:
        module.write("\nfrom webhook.server import app  # noqa\n")
    proc = lint_imports(root)
    assert proc.returncode != 0
    assert "Layers: the CLI drives the server" in proc.stdout
    assert "webhook.engine.grace -> webhook.server.app" in proc.stdout


def test_the_engine_reading_the_clock_breaks_its_purity(tmp_path: Path) -> None:
    root = copy_of_the_package(tmp_path)
    with (root / "webhook" / "engine" / "classify.py").open("a") as module:
        module.write("\nimport time  # noqa\n")
    proc = lint_imports(root)
    assert proc.returncode != 0
    assert "The engine is pure" in proc.stdout
    assert "webhook.engine.classify -> time" in proc.stdout


def test_the_server_importing_the_kubernetes_client_breaks_the_one_way_to_kubernetes(
    tmp_path: Path,
) -> None:
    root = copy_of_the_package(tmp_path)
    with (root / "webhook" / "server" / "caches.py").open("a") as module:
        module.write("\nimport kubernetes  # noqa\n")
    proc = lint_imports(root)
    assert proc.returncode != 0
    assert "One way to Kubernetes" in proc.stdout
    assert "webhook.server.caches -> kubernetes" in proc.stdout
