"""``preemptguard export``: the policy compiled to admission policies the API server evaluates."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from webhook.cli.report import ExitStatus
from webhook.errors import PolicyError
from webhook.export import export, render_json, render_yaml
from webhook.loading.policies import builtin_policy, load_policy

EXPORT_EXAMPLES = """
\b
Examples:
  preemptguard export --policies policies/default > admission-policies.yaml
  preemptguard export | kubectl apply -f -
  preemptguard export -o json | jq '.items[].kind'
"""


@click.command("export", epilog=EXPORT_EXAMPLES)
@click.option(
    "--policies",
    type=click.Path(path_type=Path),
    default=None,
    help="Policy folder or file (default: the built-in default policy).",
)
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
)
def export_command(policies: Path | None, output: str) -> None:
    """ValidatingAdmissionPolicy and MutatingAdmissionPolicy (admissionregistration.k8s.io/v1,
    Kubernetes 1.36+) with their bindings, applying the policy inside the API server.

    They hold while the webhook is down. What CEL cannot do as the webhook does is listed on
    stderr and in comments of the YAML output; the webhook stays the enforcement for it.
    Exit status: 0 written, 2 invalid policy.
    """
    try:
        policy = builtin_policy() if policies is None else load_policy(policies)
    except PolicyError as exc:
        click.echo(f"error: invalid policy: {exc}", err=True)
        sys.exit(ExitStatus.BAD_INPUT)
    exported = export(policy)
    source = "built-in default" if policies is None else policies.as_posix()
    text = render_json(exported) if output == "json" else render_yaml(exported, source=source)
    click.echo(text, nl=False)
    click.echo(
        "note: the exported admission policies differ from the webhook where CEL cannot "
        "express a rule; the webhook stays the enforcement for these:",
        err=True,
    )
    for note in exported.notes:
        click.echo(f"  - {note}", err=True)
