"""Shell completion (`preemptguard completion`) and the kubectl plugin (`kubectl-preemptguard`),
run as installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_cli import run

BIN = Path(sys.executable).parent
PLUGIN = shutil.which("kubectl-preemptguard", path=str(BIN)) or "kubectl-preemptguard"


@pytest.mark.parametrize(
    ("shell", "hooks_in"),
    [
        ("bash", "complete -o nosort -F _preemptguard_completion preemptguard"),
        ("zsh", "#compdef preemptguard"),
        ("fish", "complete --no-files --command preemptguard"),
    ],
)
def test_each_shell_gets_a_script_for_the_program(shell: str, hooks_in: str) -> None:
    proc = run("completion", shell)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert hooks_in in proc.stdout
    # The script asks the program itself, through the variable click answers to.
    assert f"_PREEMPTGUARD_COMPLETE={shell}_complete" in proc.stdout


def test_the_program_answers_what_the_script_asks() -> None:
    env = {
        **os.environ,
        "_PREEMPTGUARD_COMPLETE": "bash_complete",
        "COMP_WORDS": "preemptguard check -o ",
        "COMP_CWORD": "3",
    }
    proc = subprocess.run(
        [BIN / "preemptguard"], env=env, capture_output=True, text=True, check=False
    )
    assert proc.stdout.split() == ["plain,text", "plain,json", "plain,manifests"]
    env["COMP_WORDS"], env["COMP_CWORD"] = "preemptguard comp", "1"
    proc = subprocess.run(
        [BIN / "preemptguard"], env=env, capture_output=True, text=True, check=False
    )
    assert proc.stdout.split() == ["plain,completion"]


def test_bash_loads_the_script() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = 'eval "$(preemptguard completion bash)" && complete -p preemptguard'
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [bash, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "complete -o nosort -F _preemptguard_completion preemptguard"


def test_an_unknown_shell_is_a_usage_error() -> None:
    proc = run("completion", "tcsh")
    assert proc.returncode == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in proc.stderr


# --- kubectl-preemptguard -----------------------------------------------------------------------


def test_the_plugin_is_declared_and_installed() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-preemptguard"] == "webhook.cli.main:kubectl_plugin"
    # The executable pip writes from the entry point, where kubectl looks for it: on PATH.
    executable = BIN / "kubectl-preemptguard"
    assert executable.is_file(), "run `pip install -e .` again"
    assert "from webhook.cli.main import kubectl_plugin" in executable.read_text()


def plugin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLUGIN, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


def test_the_plugin_runs_and_names_itself_as_kubectl_does() -> None:
    proc = plugin("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: kubectl preemptguard [OPTIONS] COMMAND [ARGS]...")
    usage = plugin("check")
    assert usage.returncode == 2
    assert usage.stderr.startswith("Usage: kubectl preemptguard check [OPTIONS]")
    assert "Try 'kubectl preemptguard check --help' for help." in usage.stderr


def test_the_plugin_is_the_same_program() -> None:
    args = ("check", "-f", "examples/coordinator.yaml", "-o", "json")
    assert plugin(*args).stdout == run(*args).stdout
    assert plugin(*args).returncode == run(*args).returncode == 1


def test_kubectl_finds_the_plugin() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [kubectl, "preemptguard", "check", "-f", "examples/coordinator.yaml"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Pod research/train-coordinator  class=coordinator (annotation)  REFUSED" in proc.stdout
