"""Drive the webhook's stable surfaces with fuzz cases: the WSGI app and the CLI.

Shared by the tests (a few thousand cases with fixed seeds) and ``benchmarks/fuzz.py``
(long runs). Of the package, only the click group and the app factory with what it is given
(policies, a namespace lookup, metrics, the process for large reviews, the log stream) are
used here; every input goes in as an HTTP request or a command line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.fuzz import corpus
from tests.fuzz.jsontext import dumps, parse
from tests.fuzz.mutators import Case, ManifestCase, manifest_case, review_case
from tests.fuzz.oracle import (
    Failure,
    Reply,
    ReviewOracle,
    Verdict,
    cli_placement,
    judge_cli,
    same_answers,
    same_in_every_format,
)
from tests.server.asgi import AppClient
from webhook.cli.main import main as cli_main
from webhook.engine.decision import NamespaceMeta
from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy, parse_policy
from webhook.server import logs
from webhook.server.app import create_app
from webhook.server.metrics import Metrics
from webhook.server.offload import Offload

REPO = Path(__file__).resolve().parents[2]
REVIEW_BOUND_SECONDS = 3.0
CLI_BOUND_SECONDS = 30.0
DEFAULT_POLICY_TEXT = (REPO / "webhook" / "data" / "default-policy.yaml").read_text()


@dataclass(frozen=True)
class Found:
    """A failure and the case that reproduces it."""

    ref: str
    hook: str
    origin: str
    mutations: tuple[str, ...]
    failure: Failure

    def __str__(self) -> str:
        return (
            f"[{self.ref}] {self.hook} {self.failure} "
            f"(from {self.origin}; {', '.join(self.mutations) or 'unmutated'})"
        )


@dataclass
class Report:
    cases: int = 0
    requests: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    found: list[Found] = field(default_factory=list)

    def add(self, other: Report) -> None:
        self.cases += other.cases
        self.requests += other.requests
        self.seconds += other.seconds
        self.slowest = max(self.slowest, other.slowest)
        self.outcomes.update(other.outcomes)
        self.mutations.update(other.mutations)
        self.found += other.found


class _ErrorLog:
    """The server's log stream, as the server has it: a file descriptor, so that each review's
    line is written by the path that writes it in production. Keeps nothing but the error-level
    events written since the last ``new_errors``."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115 - closed by close()
        self._fd = self._file.fileno()

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        pass

    def new_errors(self) -> list[str]:
        data = os.pread(self._fd, os.lseek(self._fd, 0, os.SEEK_END), 0)
        # Emptied once read: what is written next goes to the start of the file again.
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        return [
            line.decode("utf-8", "replace").strip()
            for line in data.splitlines()
            if b'"level": "error"' in line or b'"level":"error"' in line
        ]

    def close(self) -> None:
        self._file.close()


def namespace_lookup(namespace: str) -> NamespaceMeta:
    """The fake cluster's namespaces: the defaults of ``corpus.NAMESPACE_DEFAULTS``."""
    default = corpus.NAMESPACE_DEFAULTS.get(namespace)
    if default is None:
        return NamespaceMeta()
    labels = {"together.ai/workload": default} if namespace == "mixed" else {}
    return NamespaceMeta(annotations={"together.ai/default-workload": default}, labels=labels)


def _always(policy: Policy) -> Callable[[], Policy]:
    """A policy source that answers ``policy`` every time."""
    return lambda: policy


class ReviewRunner:
    """The app in two modes (enforce, warn), a test client each, and the oracle."""

    def __init__(self, bound_seconds: float = REVIEW_BOUND_SECONDS) -> None:
        self.bound = bound_seconds
        self.log = _ErrorLog()
        logs.configure("info", stream=self.log)  # type: ignore[arg-type]
        self.offload = Offload()
        enforce = builtin_policy()
        warn = parse_policy(
            DEFAULT_POLICY_TEXT.replace("mode: enforce", "mode: warn"), source="warn.yaml"
        )
        self.clients = {
            mode: AppClient(
                create_app(
                    _always(policy),
                    namespaces=namespace_lookup,
                    metrics=Metrics(),
                    offloaded=self.offload,
                )
            )
            for mode, policy in (("enforce", enforce), ("warn", warn))
        }
        self.requests = 0
        self.slowest = 0.0

    def close(self) -> None:
        self.offload.stop()
        logs.configure("info")
        self.log.close()

    def __enter__(self) -> ReviewRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def poster(self, mode: str) -> Callable[[str, bytes, str], Reply]:
        client = self.clients[mode]

        def post(hook: str, body: bytes, content_type: str) -> Reply:
            self.requests += 1
            headers = {"Content-Type": content_type} if content_type else {}
            started = time.perf_counter()
            try:
                response = client.post(f"/{hook}?timeout=3s", data=body, headers=headers)
            except Exception:  # noqa: BLE001 - an exception out of the app is a finding
                seconds = time.perf_counter() - started
                return Reply(-1, "exception", traceback.format_exc().encode(), seconds)
            seconds = time.perf_counter() - started
            return Reply(
                response.status_code, response.mimetype or "", response.get_data(), seconds
            )

        return post

    def judge(self, hook: str, body: bytes, content_type: str, *, warn_mode: bool) -> Verdict:
        mode = "warn" if warn_mode else "enforce"
        timings: list[float] = []
        post = self.poster(mode)

        def timed(h: str, b: bytes, c: str) -> Reply:
            reply = post(h, b, c)
            timings.append(reply.seconds)
            return reply

        oracle = ReviewOracle(timed, bound_seconds=self.bound, warn_mode=warn_mode)
        self.log.new_errors()
        verdict = oracle.judge(hook, body, content_type)
        for line in self.log.new_errors():
            verdict.fail("error-logged", line[:400])
        self.slowest = max([self.slowest, *timings])
        return verdict

    def run_case(self, case: Case) -> Verdict:
        return self.judge(case.hook, case.body, case.content_type, warn_mode=case.warn_mode)

    def run(
        self,
        seed: int,
        indices: Iterable[int],
        progress: Callable[[int, Report], None] | None = None,
    ) -> Report:
        report = Report()
        started = time.perf_counter()
        self.slowest = 0.0
        requests = self.requests
        for n, index in enumerate(indices, 1):
            case = review_case(seed, index)
            verdict = self.run_case(case)
            report.cases += 1
            report.outcomes[verdict.outcome] += 1
            report.mutations.update(m.split(":")[0] for m in case.mutations)
            report.found += [
                Found(case.ref, f"/{case.hook}", case.origin, tuple(case.mutations), f)
                for f in verdict.failures
            ]
            if progress is not None:
                report.seconds = time.perf_counter() - started
                progress(n, report)
        report.seconds = time.perf_counter() - started
        report.requests = self.requests - requests
        report.slowest = self.slowest
        return report


# --- the CLI ------------------------------------------------------------------------------


def preemptguard_command() -> list[str]:
    """The installed console command beside this interpreter, else ``python -m webhook``."""
    script = Path(sys.executable).with_name("preemptguard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]


@dataclass(frozen=True)
class CliRun:
    exit_code: int | None
    stdout: str
    stderr: str
    exception: str | None
    seconds: float


def _materialise(case: ManifestCase, folder: Path) -> list[str]:
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    args = list(case.args)
    for i, arg in enumerate(args):
        if i and args[i - 1] == "-f" and arg != "-":
            args[i] = str(folder / arg) if arg != "." else str(folder)
    return args


def invoke_in_process(case: ManifestCase, folder: Path) -> CliRun:
    args = _materialise(case, folder)
    started = time.perf_counter()
    result = CliRunner().invoke(cli_main, args, input=case.stdin)
    seconds = time.perf_counter() - started
    exception = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc_info = result.exc_info
        exception = (
            "".join(traceback.format_exception(*exc_info)) if exc_info else repr(result.exception)
        )
    return CliRun(result.exit_code, result.stdout, result.stderr, exception, seconds)


def invoke_subprocess(case: ManifestCase, folder: Path) -> CliRun:
    args = _materialise(case, folder)
    started = time.perf_counter()
    # The command runs the package of this repository, as the tests in this process do.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONIOENCODING="utf-8", PYTHONPATH=path)
    proc = subprocess.run(
        [*preemptguard_command(), *args],
        input=case.stdin or b"",
        capture_output=True,
        timeout=CLI_BOUND_SECONDS * 2,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - started
    out = proc.stdout.decode("utf-8", "backslashreplace")
    err = proc.stderr.decode("utf-8", "backslashreplace")
    return CliRun(proc.returncode, out, err, None, seconds)


def _placement(case: ManifestCase, run: CliRun, rechecked: list[int]) -> list[Failure]:
    """The patches of ``check -o json``, applied and checked again (see ``cli_placement``)."""
    if case.objects is None or case.args[:3] != ["check", "-o", "json"] or run.exit_code == 2:
        return []
    options = (
        case.args[case.args.index("-n") : case.args.index("-n") + 2] if "-n" in case.args else []
    )

    def rerun(objects: list[Any]) -> tuple[int | None, str]:
        return check_as_json_list(objects, options)

    def recheck(objects: list[Any]) -> tuple[int | None, str]:
        rechecked.append(1)
        return check_as_json_list(objects, options)

    try:
        output = json.loads(run.stdout)
    except ValueError:
        return []  # judge_cli reports it
    # The objects as a reader sees them (markers such as deep values written as text, read).
    objects = [parse(dumps(obj).encode("ascii")) for obj in case.objects]
    return same_in_every_format(objects, output, rerun) or cli_placement(objects, output, recheck)


def check_as_json_list(objects: list[Any], options: list[str]) -> tuple[int | None, str]:
    """``check -o json`` on ``objects`` written as one JSON List: exit status and stdout."""
    folder = Path(tempfile.mkdtemp(prefix="pg-fuzz-"))
    try:
        path = folder / "objects.json"
        path.write_text(dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        result = CliRunner().invoke(cli_main, ["check", "-o", "json", "-f", str(path), *options])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result.exit_code, result.stdout


def run_cli(
    seed: int,
    indices: Iterable[int],
    *,
    subprocesses: bool = False,
    progress: Callable[[int, Report], None] | None = None,
) -> Report:
    report = Report()
    invoke = invoke_subprocess if subprocesses else invoke_in_process
    started = time.perf_counter()
    for n, index in enumerate(indices, 1):
        case = manifest_case(seed, index)
        folder = Path(tempfile.mkdtemp(prefix="pg-fuzz-"))
        try:
            run = invoke(case, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        failures = judge_cli(case.args, run.exit_code, run.stdout, run.stderr, run.exception)
        rechecked: list[int] = []
        if not failures:
            failures = _placement(case, run, rechecked)
        if run.seconds > CLI_BOUND_SECONDS:
            failures.append(Failure("cli-slow", f"{run.seconds:.1f} s"))
        report.cases += 1
        report.requests += 1
        report.slowest = max(report.slowest, run.seconds)
        report.outcomes[f"exit-{run.exit_code}"] += 1
        report.outcomes["patched-and-rechecked"] += len(rechecked)
        report.mutations.update(m.split(":")[0] for m in case.mutations)
        report.found += [
            Found(
                case.ref,
                "preemptguard " + " ".join(case.args),
                "manifests",
                tuple(case.mutations),
                f,
            )
            for f in failures
        ]
        if progress is not None:
            report.seconds = time.perf_counter() - started
            progress(n, report)
    report.seconds = time.perf_counter() - started
    return report


def describe(report: Report) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items()))
    return (
        f"{report.cases} cases, {report.requests} requests in {report.seconds:.1f} s "
        f"(slowest {report.slowest * 1000:.0f} ms): {counts}; {len(report.found)} failures"
    )


def namespace_objects() -> list[dict[str, Any]]:
    """The fake cluster's namespaces as objects, for the CLI to read beside a review."""
    out = []
    for name in corpus.NAMESPACE_DEFAULTS:
        meta = namespace_lookup(name)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "annotations": dict(meta.annotations),
                    "labels": dict(meta.labels),
                },
            }
        )
    return out


def run_cli_reviews(
    runner: ReviewRunner,
    seed: int,
    indices: Iterable[int],
    progress: Callable[[int, Report], None] | None = None,
) -> Report:
    """Review cases given to ``check -o json`` as files, answered as the server answers them."""
    report = Report()
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="pg-fuzz-"))
    namespaces = folder / "namespaces.json"
    namespaces.write_text(dumps({"apiVersion": "v1", "kind": "List", "items": namespace_objects()}))
    post = runner.poster("enforce")
    try:
        for n, index in enumerate(indices, 1):
            case = review_case(seed, index)
            if case.warn_mode or case.content_type != "application/json":
                continue
            path = folder / "review.json"
            path.write_bytes(case.body)
            args = ["check", "-o", "json", "-f", str(path), "-f", str(namespaces)]
            began = time.perf_counter()
            result = CliRunner().invoke(cli_main, args)
            seconds = time.perf_counter() - began
            exception = None
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                exception = repr(result.exception)
            failures = judge_cli(args, result.exit_code, result.stdout, result.stderr, exception)
            if not failures:
                server = {
                    hook: post(hook, case.body, case.content_type)
                    for hook in ("mutate", "validate")
                }
                failures = same_answers(server, result.exit_code, json.loads(result.stdout))
            report.cases += 1
            report.requests += 3
            report.slowest = max(report.slowest, seconds)
            report.outcomes[f"exit-{result.exit_code}"] += 1
            report.found += [
                Found(
                    case.ref, "preemptguard check (review)", case.origin, tuple(case.mutations), f
                )
                for f in failures
            ]
            if progress is not None:
                report.seconds = time.perf_counter() - started
                progress(n, report)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report
