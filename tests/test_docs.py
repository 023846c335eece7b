"""The README and docs/ say what the code does.

- The README's quick start runs for real (``-k quickstart``): ``make run`` in the background,
  ``/readyz`` answering over TLS, then every command of the quick start with the output shown.
- Every offline command shown with its output after a ``$`` prompt prints that output.
- Every ``preemptguard <command> --flag`` written anywhere exists, with that command.
- Every relative link leads to a file, and every ``#anchor`` to a heading.
- Every metric named is one the code defines; every finding and audit problem code is listed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from prometheus_client import CollectorRegistry

from webhook.cli.main import main as cli
from webhook.cluster.audit import ProblemCode
from webhook.cluster.metrics import ObserverMetrics
from webhook.engine.findings import Code
from webhook.server.metrics import CertificateMetrics, Metrics

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent

QUICKSTART = "Quick start on a laptop"
PORTS = (8443, 9090)
CA = REPO / ".certs" / "ca.crt"
# How long `make run` may take to answer /readyz: it may set up the virtualenv and compile the
# engine first, on a busy machine. Only a bound on the wait, not a measurement.
READY_WAIT_SECONDS = 900.0
STOP_WAIT_SECONDS = 120.0
# The CLI's commands that need no cluster and no server: their shown output is checked.
OFFLINE = frozenset({"check", "explain", "test", "export"})
SEPARATORS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"})


# --- reading the pages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, its lines, where it starts, and its section."""

    page: Path
    lang: str
    lines: list[str]
    line: int
    section: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


@dataclass(frozen=True)
class Shown:
    """A command after a ``$`` prompt, and the output shown under it."""

    command: str
    output: list[str]
    where: str


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    section = ""
    fence: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if fence is None:
            if line.startswith("```"):
                fence = (line[3:].strip(), number, [])
            elif line.startswith("#"):
                section = line.lstrip("#").strip()
        elif line.startswith("```"):
            lang, start, lines = fence
            found.append(Block(page, lang, lines, start, section))
            fence = None
        else:
            fence[2].append(line)
    assert fence is None, f"{page.relative_to(REPO)}:{fence[1]}: a code block is not closed"
    return found


def prose(page: Path) -> str:
    """The page without its code blocks."""
    kept, inside = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings."""
    seen: dict[str, int] = {}
    result = set()
    for line in prose(page).splitlines():
        if not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def shown(block: Block) -> list[Shown]:
    """The commands of a console block, with the output under each."""
    found: list[Shown] = []
    lines = iter(enumerate(block.lines))
    for i, line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + next(lines)[1]
            found.append(Shown(command, [], f"{block.where}+{i + 1}"))
        elif found:
            found[-1].output.append(line)
    return found


def commands(block: Block) -> list[str]:
    """The shell commands of a code block: after a prompt in a console block, every line of a
    shell block, continuation lines joined."""
    if block.lang == "console":
        return [s.command for s in shown(block)]
    if block.lang not in ("sh", "bash", "shell", ""):
        return []
    found: list[str] = []
    pending = ""
    for line in block.lines:
        if pending or line.strip():
            pending += line
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            found.append(pending)
            pending = ""
    return found


# --- what a command line calls ---------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """``preemptguard <command> <args>`` found in a command line."""

    command: str | None
    args: list[str]
    text: str
    where: str


def calls(text: str, where: str) -> list[Call]:
    """Each call of preemptguard in one shell command line (pipelines included)."""
    tokens = shlex.split(text, comments=True)
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS or token.startswith(">"):
            segments.append([])
        else:
            segments[-1].append(token)
    found = []
    for segment in segments:
        rest = _after_program(segment)
        if rest is None:
            continue
        command = rest[0] if rest and re.fullmatch(r"[a-z]+", rest[0]) else None
        if rest and command is None and not rest[0].startswith("-"):
            continue  # a placeholder (<command>) or not a call at all
        found.append(Call(command, rest[1:] if command else rest, text, where))
    return found


def _after_program(tokens: list[str]) -> list[str] | None:
    """What follows the program when a command runs preemptguard (``KEY=value`` set first)."""
    rest = tokens
    while rest and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", rest[0]):
        rest = rest[1:]
    if rest and (rest[0] == "preemptguard" or rest[0].endswith("/preemptguard")):
        return rest[1:]
    if (
        len(rest) >= 3
        and Path(rest[0]).name in ("python", "python3")
        and rest[1:3]
        == [
            "-m",
            "webhook",
        ]
    ):
        return rest[3:]
    return None


def every_call() -> list[Call]:
    found = []
    for page in PAGES:
        for block in blocks(page):
            for text in commands(block):
                found += calls(text, block.where)
        for span in re.findall(r"`([^`\n]*\bpreemptguard [^`\n]*)`", prose(page)):
            with contextlib.suppress(ValueError):  # a span of prose, not a whole command
                found += calls(span, f"{page.relative_to(REPO)} (`{span}`)")
    return found


def option_names(command: click.Command) -> set[str]:
    names = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts, param.secondary_opts)
    return names


def flags(args: list[str]) -> list[str]:
    """The options among ``args``, as written (``[-n`` in a synopsis is ``-n``)."""
    found = []
    for arg in args:
        bare = arg.lstrip("[").rstrip(".]")
        if re.fullmatch(r"--?[A-Za-z][-A-Za-z0-9]*(=.*)?", bare):
            found.append(bare.split("=", 1)[0])
    return found


# --- commands and flags ----------------------------------------------------------------------------


def test_every_flag_written_exists_on_its_command() -> None:
    root = click.Context(cli, info_name="preemptguard")
    found = every_call()
    problems = []
    for call in found:
        if call.command is None:
            known = option_names(cli) | {"--version"}
        else:
            command = cli.get_command(root, call.command)
            if command is None:
                problems.append(f"{call.where}: no command {call.command!r}: {call.text}")
                continue
            known = option_names(command)
        problems += [
            f"{call.where}: {call.command} has no option {flag}: {call.text}"
            for flag in flags(call.args)
            if flag not in known
        ]
    assert not problems, "\n".join(problems)
    # What the pages show covers every command: a parse that found nothing would pass above.
    named = {c.command for c in found if c.command is not None}
    assert named == set(cli.list_commands(root)), f"commands never shown: {named}"


def offline_examples() -> Iterator[Shown]:
    for page in PAGES:
        for block in blocks(page):
            if block.lang != "console":
                continue
            for example in shown(block):
                found = calls(example.command, example.where)
                if (
                    found
                    and all(c.command in OFFLINE for c in found)
                    and "kubectl" not in (example.command)
                ):
                    yield example


def run_shell(command: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
        check=False,
    )


def assert_output(example: Shown, stdout: str) -> None:
    """Every line shown (but ``...``) is printed, in the order shown."""
    printed = [line.rstrip() for line in stdout.splitlines()]
    at = 0
    for line in example.output:
        if line.strip() == "...":
            continue
        try:
            at = printed.index(line.rstrip(), at) + 1
        except ValueError:
            pytest.fail(
                f"{example.where}: `{example.command}` does not print, after what comes before "
                f"it:\n{line}\n--- it printed:\n{stdout}"
            )


@pytest.mark.parametrize("example", list(offline_examples()), ids=lambda e: e.where)
def test_offline_examples_print_what_they_show(example: Shown) -> None:
    proc = run_shell(example.command, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    assert proc.returncode in (0, 1), f"{example.where}: {example.command}\n{proc.stderr}"
    assert_output(example, proc.stdout)


# --- links ---------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_to_a_file_and_a_heading(page: Path) -> None:
    problems = []
    for target in LINK.findall(re.sub(r"`[^`\n]*`", "", prose(page))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert not problems, f"{page.relative_to(REPO)}:\n" + "\n".join(problems)


def test_the_readme_links_every_page_and_stays_short() -> None:
    text = README.read_text()
    linked = set(LINK.findall(text))
    missing = [
        p.relative_to(REPO).as_posix()
        for p in PAGES[1:]
        if p.relative_to(REPO).as_posix() not in linked
    ]
    assert not missing, f"README.md links none of {missing}"
    assert "ARCHITECTURE.md" in linked
    lines = len(text.splitlines())
    assert lines <= 250, f"README.md has {lines} lines; reference belongs in docs/"


# --- names the code defines ----------------------------------------------------------------------


def metric_families() -> set[str]:
    registries = [Metrics().registry, ObserverMetrics().registry, CollectorRegistry()]
    CertificateMetrics(registries[-1])
    return {family.name for registry in registries for family in registry.collect()}


def test_every_metric_named_is_one_the_code_defines() -> None:
    defined = metric_families()
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"\bpreemptguard_[a-z_]*[a-z]", page.read_text()))
    unknown = sorted(
        name
        for name in named
        if re.sub(r"_(total|bucket|count|sum|created)$", "", name) not in defined
    )
    assert not unknown, f"metrics named in the docs that no code defines: {unknown}"
    assert len(named) > 20, named  # the pages name them: a broken pattern would find none


def test_every_finding_code_is_listed() -> None:
    text = (REPO / "docs" / "cli.md").read_text()
    missing = [c.value for c in Code if f"`{c.value}`" not in text]
    assert not missing, f"docs/cli.md lists none of {missing}: run `make generate`"


def test_every_audit_problem_code_is_listed() -> None:
    text = (REPO / "docs" / "live-cluster.md").read_text()
    missing = [c.value for c in ProblemCode if f"| `{c.value}` |" not in text]
    assert not missing, f"the audit table of docs/live-cluster.md lacks {missing}"


# --- the quick start -----------------------------------------------------------------------------


def quickstart() -> tuple[list[str], list[Shown]]:
    """The shell commands and the shown commands of the README's laptop quick start."""
    section = [b for b in blocks(README) if b.section == QUICKSTART]
    run = [c for b in section if b.lang == "sh" for c in commands(b)]
    examples = [s for b in section if b.lang == "console" for s in shown(b)]
    return run, examples


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def ready(server: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until /readyz answers 200 over TLS, verified with the CA `make run` issued."""
    deadline = time.monotonic() + READY_WAIT_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"`make run` exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        if CA.exists():
            with contextlib.suppress(OSError, ssl.SSLError):
                context = ssl.create_default_context(cafile=str(CA))
                url = "https://127.0.0.1:8443/readyz"
                with urllib.request.urlopen(url, context=context, timeout=5) as answer:
                    if answer.status == 200:
                        return
        time.sleep(1)
    pytest.fail(f"/readyz did not answer within {READY_WAIT_SECONDS:.0f} s:\n{log.read_text()}")


def stop(server: subprocess.Popen[bytes]) -> int:
    """SIGTERM to `preemptguard serve` (make's child), as Ctrl-C would stop it; make's status."""
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
    with contextlib.suppress(OSError):
        for pid in children.read_text().split():
            os.kill(int(pid), signal.SIGTERM)
    try:
        return server.wait(timeout=STOP_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        pytest.fail(f"`make run` did not stop within {STOP_WAIT_SECONDS:.0f} s of SIGTERM")


@pytest.mark.slow
def test_quickstart_on_a_laptop(tmp_path: Path) -> None:
    run, examples = quickstart()
    assert run == ["make run"], f"the quick start's set-up command is not `make run`: {run}"
    assert any("preemptguard check -f examples/" in e.command for e in examples), examples
    busy = [port for port in PORTS if port_in_use(port)]
    if busy:
        pytest.fail(
            f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 in use: `make run` serves on "
            "8443 and metrics on 9090; stop what listens there and run again"
        )
    log = tmp_path / "make-run.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["make", "run"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        ready(server, log)
        status: int | None = None
        for example in examples:
            if example.command.strip() == "echo $?":
                assert [str(status)] == [line for line in example.output if line.strip()], (
                    f"{example.where}: the command before exits {status}"
                )
                continue
            proc = run_shell(example.command)
            status = proc.returncode
            assert status in (0, 1), f"{example.where}: {example.command}\n{proc.stderr}"
            assert_output(example, proc.stdout)
    finally:
        code = stop(server)
    assert code == 0, f"`make run` exited {code} after SIGTERM:\n{log.read_text()[-4000:]}"
