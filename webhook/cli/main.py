"""The ``preemptguard`` command line: the same engine as the webhook, on files."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

import click

from webhook import __version__
from webhook.admission import lookups
from webhook.cli.colour import palette_for
from webhook.cli.dryrun import admit_each, judge_each
from webhook.cli.options import no_color_option, output_option, policies_option
from webhook.cli.report import ExitStatus, ExplainReport, JsonReport, ManifestsReport, Report
from webhook.engine.decision import NamespaceLookup
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.errors import CaseError, PolicyError
from webhook.loading import gcpause, jsondoc
from webhook.loading.manifests import InputError, Item, read, read_ahead, sources
from webhook.loading.policies import builtin_policy, load_policy
from webhook.native import engine_build

CHECK_EXAMPLES = """
\b
Examples:
  preemptguard check -f examples/
  kubectl get deploy -A -o yaml | preemptguard check -f - -o json
  preemptguard check -f job.yaml --policies policies/default
  preemptguard check -f k8s/ -o manifests > admitted.yaml
"""

EXPLAIN_EXAMPLES = """
\b
Examples:
  preemptguard explain -f examples/ray-cluster.yaml -f examples/namespaces.yaml
  preemptguard explain -f job.yaml -o json
"""

TEST_EXAMPLES = """
\b
Examples:
  preemptguard test policies/
  preemptguard test policies/default -o json
  preemptguard test policies/ -o junit > policy-tests.xml
"""

COMPLETION_EXAMPLES = """
\b
Examples:
  eval "$(preemptguard completion bash)"          # in ~/.bashrc
  eval "$(preemptguard completion zsh)"           # in ~/.zshrc
  preemptguard completion fish > ~/.config/fish/completions/preemptguard.fish
"""

PROGRAM = "preemptguard"
# kubectl runs a plugin named kubectl-<name> for `kubectl <name>`: its help reads that way.
KUBECTL_PROGRAM = "kubectl preemptguard"
COMPLETE_VAR = "_PREEMPTGUARD_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


class _Guarded(click.Group):
    """The command group; no input makes it print a traceback or a character it cannot."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(name)
        if target is None:
            return super().get_command(ctx, name)
        module, attribute = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def invoke(self, ctx: click.Context) -> object:
        _tolerant_streams()
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        except BrokenPipeError:
            # What reads the output stopped (``check ... | head``): stop as quietly, with the
            # status a shell shows for a writer SIGPIPE ended.
            _stop_writing()
            sys.exit(CLOSED_PIPE)
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - one line instead of a traceback
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            click.echo(f"error: internal error ({detail}); please report it", err=True)
            sys.exit(ExitStatus.BAD_INPUT)


CLOSED_PIPE = 128 + signal.SIGPIPE


def _stop_writing() -> None:
    """Send what is left to write to /dev/null: the interpreter flushes stdout as it exits."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _tolerant_streams() -> None:
    # Values read from JSON may hold lone surrogates ("\ud800"), which UTF-8 cannot encode:
    # print them escaped rather than fail on them.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


@click.group(cls=_Guarded, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__,
    prog_name=PROGRAM,
    message=f"%(prog)s, version %(version)s (engine {engine_build()})",
)
def main() -> None:
    """Placement policy for GPU clusters that mix standard and preemptible nodes."""


def kubectl_plugin() -> None:
    """The ``kubectl-preemptguard`` executable: ``kubectl preemptguard ...`` runs it."""
    # Shell completion stays with the preemptguard program (see `completion`).
    main(prog_name=KUBECTL_PROGRAM, complete_var="_KUBECTL_PREEMPTGUARD_COMPLETE")


def _files_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "-f",
        "--filename",
        "paths",
        multiple=True,
        required=True,
        help="Manifest file, folder (searched for *.yaml, *.yml, *.json), or - for stdin. "
        "Repeatable.",
    )(func)


def _namespace_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "-n",
        "--namespace",
        default="default",
        show_default=True,
        help="Namespace of objects that do not name one, as kubectl would apply them.",
    )(func)


@main.command("check", epilog=CHECK_EXAMPLES)
@_files_option
@policies_option
@_namespace_option
@output_option(
    "text",
    "json",
    "manifests",
    help="text: one line per object and what was found; json: every finding and the JSON "
    "Patch; manifests: each object as the API server would store it after the webhook, as "
    "YAML (refused objects left out and named on stderr).",
)
@no_color_option
def check_command(
    paths: tuple[str, ...], policies: Path | None, namespace: str, output: str, no_color: bool
) -> None:
    """Dry run: class, verdict, warnings and the JSON Patch each object would get.

    Exit status: 0 all allowed, 1 something refused, 2 bad input.
    """
    if output == "manifests":
        stored = ManifestsReport(sys.stdout, sys.stderr)
        sys.exit(_dry_run(paths, policies, namespace, stored, admit_each))
    if output == "json":
        report: Report = JsonReport(sys.stdout)
    else:
        report = Report(sys.stdout, palette_for(sys.stdout, no_color=no_color))
    sys.exit(_dry_run(paths, policies, namespace, report, judge_each))


@main.command("explain", epilog=EXPLAIN_EXAMPLES)
@_files_option
@policies_option
@_namespace_option
@output_option(
    "text",
    "json",
    help="text: a block per object; json: the same document as check -o json.",
)
@no_color_option
def explain_command(
    paths: tuple[str, ...], policies: Path | None, namespace: str, output: str, no_color: bool
) -> None:
    """Why: which source classified each object and what each change is for."""
    if output == "json":
        report: Report = JsonReport(sys.stdout)
    else:
        report = ExplainReport(sys.stdout, palette_for(sys.stdout, no_color=no_color))
    sys.exit(_dry_run(paths, policies, namespace, report, judge_each))


@main.command("test", epilog=TEST_EXAMPLES)
@click.argument("directory", type=click.Path(path_type=Path), default=Path("policies"))
@output_option(
    "text",
    "json",
    "junit",
    help="text: a line per case; json: every case with what it expected and got; junit: "
    "JUnit XML for CI test reports.",
)
@no_color_option
def test_command(directory: Path, output: str, no_color: bool) -> None:
    """Run the test cases kept beside each policy (DIR/**/tests/*.yaml).

    Exit status: 0 every case passed, 1 a case failed, 2 no test folder, an invalid case or
    policy.
    """
    from webhook.cli import case_report
    from webhook.cli.policy_tests import CaseResult, policy_dirs, run_policy_dir

    dirs = policy_dirs(directory)
    if not dirs:
        _fail_input(f"{directory}: no policy folder with a tests/ folder found")
    results: list[CaseResult] = []
    for policy_dir in dirs:
        try:
            results += run_policy_dir(policy_dir)
        except (PolicyError, CaseError) as exc:
            _fail_input(str(exc))
    if output == "json":
        click.echo(jsondoc.dumps_indented(case_report.as_json(results)))
    elif output == "junit":
        click.echo(case_report.junit(results), nl=False)
    else:
        palette = palette_for(sys.stdout, no_color=no_color)
        click.echo("\n".join(case_report.text_lines(results, palette)))
    failed = any(not r.passed for r in results)
    sys.exit(ExitStatus.REFUSED if failed else ExitStatus.ALLOWED)


@main.command("completion", epilog=COMPLETION_EXAMPLES)
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the completion script of preemptguard for a shell: bash, zsh or fish. Commands,
    options and their values then complete on Tab."""
    from click.shell_completion import get_completion_class

    completion = get_completion_class(shell)
    assert completion is not None  # every choice is one of click's shells
    click.echo(completion(main, {}, PROGRAM, COMPLETE_VAR).source())


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class _Judge(Protocol[T_co]):
    def __call__(
        self,
        items: Iterable[Item],
        policy: Policy,
        lookup: NamespaceLookup,
        default_namespace: str,
        *,
        priority_classes: PriorityLookup | None = None,
    ) -> Iterator[T_co | InputError]: ...


class _Sink(Protocol[T_contra]):
    def add(self, item: T_contra | InputError, /) -> None: ...

    def flush(self) -> None: ...

    def finish(self) -> ExitStatus: ...


def _dry_run(
    paths: Sequence[str],
    policies: Path | None,
    namespace: str,
    report: _Sink[T],
    each: _Judge[T],
) -> int:
    """Judge every object of ``paths`` with ``each`` into ``report``, one at a time; the exit
    status.

    Namespace and PriorityClass objects are read ahead, so that they apply wherever they stand
    in the input.
    """
    policy = _policy(policies)
    inputs = sources(paths, sys.stdin)
    ahead = list(read_ahead(inputs))
    lookup = lookups.namespaces_from_objects(ahead)
    classes = lookups.priority_classes_from_objects(ahead)
    # The garbage collector would walk every object read so far, again and again; each is
    # freed by reference counting once it is reported.
    try:
        with gcpause.paused():
            for item in each(read(inputs), policy, lookup, namespace, priority_classes=classes):
                if isinstance(item, InputError):
                    click.echo(f"error: {item}", err=True)
                report.add(item)
    finally:
        report.flush()  # what was judged before an interruption is shown
    return report.finish()


def _policy(policies: Path | None) -> Policy:
    try:
        return builtin_policy() if policies is None else load_policy(policies)
    except PolicyError as exc:
        _fail_input(f"invalid policy: {exc}")


def _fail_input(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(ExitStatus.BAD_INPUT)


# The commands that need the server, the cluster client or the exporter, imported when run:
# `check` starts in a fraction of the time without Flask, granian and the kubernetes client.
LAZY_COMMANDS = {
    "serve": "webhook.cli.server_commands:serve_command",
    "certs": "webhook.cli.server_commands:certs_command",
    "export": "webhook.cli.export:export_command",
    "audit": "webhook.cli.audit:audit_command",
    "capacity": "webhook.cli.capacity:capacity_command",
    "drill": "webhook.cli.drill:drill_command",
    "observe": "webhook.cli.observe:observe_command",
}
