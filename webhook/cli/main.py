"""The ``preemptguard`` command line: the same engine as the webhook, on files."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import click

from webhook import __version__
from webhook.cli.audit import audit_command
from webhook.cli.drill import drill_command
from webhook.cli.dryrun import Result, check
from webhook.cli.export import export_command
from webhook.cli.observe import observe_command
from webhook.cli.policy_tests import CaseResult, policy_dirs, run_policy_dir
from webhook.cli.report import ExitStatus, exit_status, render_explain, render_json, render_text
from webhook.cli.server_commands import certs_command, serve_command
from webhook.engine.policy import Policy
from webhook.errors import CaseError, PolicyError
from webhook.loading.manifests import load_manifests
from webhook.loading.policies import builtin_policy, load_policy

CHECK_EXAMPLES = """
\b
Examples:
  preemptguard check -f examples/
  kubectl get deploy -A -o yaml | preemptguard check -f - -o json
  preemptguard check -f job.yaml --policies policies/default
"""


class _Guarded(click.Group):
    """The command group; no input makes it print a traceback or a character it cannot."""

    def invoke(self, ctx: click.Context) -> object:
        _tolerant_streams()
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - one line instead of a traceback
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            click.echo(f"error: internal error ({detail}); please report it", err=True)
            sys.exit(ExitStatus.BAD_INPUT)


def _tolerant_streams() -> None:
    # Values read from JSON may hold lone surrogates ("\ud800"), which UTF-8 cannot encode:
    # print them escaped rather than fail on them.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


@click.group(cls=_Guarded, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="preemptguard")
def main() -> None:
    """Placement policy for GPU clusters that mix standard and preemptible nodes."""


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


def _policies_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--policies",
        type=click.Path(path_type=Path),
        default=None,
        help="Policy folder or file (default: the built-in default policy).",
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
@_policies_option
@_namespace_option
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def check_command(
    paths: tuple[str, ...], policies: Path | None, namespace: str, output: str
) -> None:
    """Dry run: class, verdict, warnings and the JSON Patch each object would get.

    Exit status: 0 all allowed, 1 something refused, 2 bad input.
    """
    results, errors = _dry_run(paths, policies, namespace)
    if output == "json":
        click.echo(render_json(results, input_errors=errors))
    else:
        click.echo(render_text(results, input_errors=len(errors)))
    sys.exit(exit_status(results, bad_input=bool(errors)))


@main.command("explain")
@_files_option
@_policies_option
@_namespace_option
def explain_command(paths: tuple[str, ...], policies: Path | None, namespace: str) -> None:
    """Why: which source classified each object and what each change is for."""
    results, errors = _dry_run(paths, policies, namespace)
    click.echo(render_explain(results))
    sys.exit(exit_status(results, bad_input=bool(errors)))


@main.command("test")
@click.argument("directory", type=click.Path(path_type=Path), default=Path("policies"))
def test_command(directory: Path) -> None:
    """Run the test cases kept beside each policy (DIR/**/tests/*.yaml)."""
    dirs = policy_dirs(directory)
    if not dirs:
        _fail_input(f"{directory}: no policy folder with a tests/ folder found")
    results: list[CaseResult] = []
    for policy_dir in dirs:
        try:
            results += run_policy_dir(policy_dir)
        except (PolicyError, CaseError) as exc:
            _fail_input(str(exc))
    for r in results:
        mark = "PASS" if r.passed else "FAIL"
        click.echo(f"{mark}  {r.case.name}  ({r.case.source})")
        for failure in r.failures:
            click.echo(f"      {failure}")
    failed = sum(not r.passed for r in results)
    click.echo(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(ExitStatus.REFUSED if failed else ExitStatus.ALLOWED)


def _dry_run(
    paths: Sequence[str], policies: Path | None, namespace: str
) -> tuple[list[Result], list[str]]:
    policy = _policy(policies)
    manifests = load_manifests(paths, sys.stdin)
    results = check(manifests, policy, default_namespace=namespace)
    errors = [str(e) for e in manifests.errors]
    for error in errors:
        click.echo(f"error: {error}", err=True)
    return results, errors


def _policy(policies: Path | None) -> Policy:
    try:
        return builtin_policy() if policies is None else load_policy(policies)
    except PolicyError as exc:
        _fail_input(f"invalid policy: {exc}")


def _fail_input(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(ExitStatus.BAD_INPUT)


main.add_command(serve_command)
main.add_command(certs_command)
main.add_command(export_command)
main.add_command(audit_command)
main.add_command(drill_command)
main.add_command(observe_command)
