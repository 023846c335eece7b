"""``preemptguard audit``: the live cluster judged by the same engine and policy as the webhook.

Also what the live-cluster commands (``audit``, ``drill``, ``observe``) share: the cluster
options, the policy option (``cli/options.py``, which ``check`` shares too), and progress
written to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from webhook.cli.options import output_option, policies_option
from webhook.engine.policy import Policy
from webhook.errors import PolicyError
from webhook.loading.policies import builtin_policy, load_policy

if TYPE_CHECKING:
    from webhook.cluster.audit import Audit, AuditResult
    from webhook.cluster.reports import Published
    from webhook.kube.client import Cluster

ERROR = 2

AUDIT_EXAMPLES = """
\b
Examples:
  preemptguard audit                       # every namespace
  preemptguard audit -n research -o json
  preemptguard audit -l app=sweep
  preemptguard audit --report              # also write policy reports
  preemptguard audit --report --report-api wgpolicyk8s --report-passing
"""

CLEAN, FINDINGS = 0, 1
REPORT_APIS = ("openreports", "wgpolicyk8s")  # webhook.cluster.reports.API_NAMES
# Progress goes to stderr from this many objects on (always on a terminal).
LARGE = 1000


def cluster_options(func: click.decorators.FC) -> click.decorators.FC:
    func = click.option(
        "--context", default=None, help="kubeconfig context (default: the current one)."
    )(func)
    return click.option(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: KUBECONFIG, in a pod its service account, "
        "else ~/.kube/config).",
    )(func)


def load(policies: Path | None) -> Policy:
    try:
        return builtin_policy() if policies is None else load_policy(policies)
    except PolicyError as exc:
        fail(f"invalid policy: {exc}")


def connect(kubeconfig: str | None, context: str | None) -> Cluster:
    from webhook.kube.client import Cluster, ClusterError

    try:
        return Cluster.connect(kubeconfig, context)
    except ClusterError as exc:
        fail(str(exc))


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(ERROR)


class StatusLine:
    """One line of progress on stderr: rewritten in place on a terminal; elsewhere (a CI log)
    written at most every ``every`` seconds, so a large cluster's log stays short."""

    def __init__(self, *, enabled: bool = True, every: float = 5.0) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.every = every
        self._last = 0.0
        self._shown = False

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            click.echo(f"\r\033[K{text}", err=True, nl=False)
            self._shown = True
            return
        now = time.monotonic()
        if force or now - self._last >= self.every:
            self._last = now
            click.echo(text, err=True)

    def done(self, text: str | None = None) -> None:
        if not self.enabled:
            return
        if self.tty and self._shown:
            click.echo("\r\033[K", err=True, nl=False)
        if text:
            click.echo(text, err=True)
        self._shown = False


@click.command("audit", epilog=AUDIT_EXAMPLES)
@click.option(
    "-n", "--namespace", "namespaces", multiple=True, help="Only this namespace. Repeatable."
)
@click.option(
    "-A", "--all-namespaces", is_flag=True, help="Every namespace (the default without -n)."
)
@click.option("-l", "--selector", default=None, help="Label selector for pods and workloads.")
@policies_option
@output_option(
    "text",
    "json",
    help="text: a summary and one line per finding; json: every finding, with its code.",
)
@click.option(
    "--report",
    is_flag=True,
    help="Also write policy reports: openreports.io/v1alpha1 Reports (one per object with "
    "findings, scoped to its top-level owner) when the cluster serves them, else "
    "wgpolicyk8s.io/v1alpha2 PolicyReports (one per namespace). Needs their CRD.",
)
@click.option(
    "--report-api",
    type=click.Choice(REPORT_APIS),
    default=None,
    help="With --report: write this format whatever else the cluster serves (an error where "
    "it does not serve it). Default: openreports where served, else wgpolicyk8s.",
)
@click.option(
    "--report-passing",
    is_flag=True,
    help="With --report: also list each clean object as a pass result (it is counted in "
    "summary.pass either way).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@cluster_options
def audit_command(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    selector: str | None,
    policies: Path | None,
    output: str,
    report: bool,
    report_api: str | None,
    report_passing: bool,
    quiet: bool,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Judge every pending or running pod and every workload in the cluster by the policy.

    Finds pods of a standard-only class on (or pinned to) preemptible nodes, pods the policy
    classifies that lack the placement the webhook would have given them, pods of a
    preemptible-only class on standard nodes, and workloads whose pod template the webhook
    would now refuse. One paginated list of each kind; nothing is read per object.

    Exit status: 0 nothing found, 1 findings, 2 error.
    """
    from webhook.cluster import audit as auditing
    from webhook.cluster import reports
    from webhook.kube.client import ClusterError
    from webhook.loading import gcpause

    if namespaces and all_namespaces:
        raise click.UsageError("give -n/--namespace or -A/--all-namespaces, not both")
    if report and selector:
        raise click.UsageError(
            "--report describes whole namespaces: leave out -l/--selector to write reports"
        )
    if (report_api or report_passing) and not report:
        raise click.UsageError("--report-api and --report-passing need --report")
    policy = load(policies)
    cluster = connect(kubeconfig, context)
    scope = auditing.Scope(namespaces=namespaces, label_selector=selector)
    status = StatusLine(enabled=not quiet)
    started = time.monotonic()

    def progress(kind: str, count: int) -> None:
        if status.tty or count >= LARGE:
            verb = "judged" if kind == "Pod" else "listed"
            status.show(f"audit: {verb} {count:,} {_plural(kind)}")

    # Tens of thousands of objects, none in a cycle: the collector would only walk them again
    # and again while they are made (off, a 10,000-pod list takes half the time).
    with gcpause.paused():
        try:
            # Which format, before the long part: a format the cluster lacks fails at once.
            target = reports.choose(cluster, report_api) if report else None
            result = auditing.audit_cluster(cluster, scope, policy, progress)
            published = None
            if target is not None:
                published = reports.publish(
                    cluster, result, policy, now=time.time(), target=target, passing=report_passing
                )
        except ClusterError as exc:
            status.done()
            fail(str(exc))
        finally:
            cluster.close()
        elapsed = time.monotonic() - started
        summary = result.summary()
        status.done(
            f"audit: {summary['pods']:,} pods and {summary['workloads']:,} workloads judged "
            f"in {elapsed:.1f} s ({result.pages} pages listed)"
            if summary["pods"] >= LARGE or status.tty
            else None
        )
        for note in result.notes:
            click.echo(f"note: {note}", err=True)
        if output == "json":
            click.echo(render_json(result, reports=published))
        else:
            click.echo(render_text(result, reports=published))
    sys.exit(FINDINGS if result.findings else CLEAN)


def _plural(kind: str) -> str:
    return {"Namespace": "namespaces", "Node": "nodes", "Pod": "pods"}.get(kind, f"{kind}s")


def render_json(result: Audit, *, reports: Published | None = None) -> str:
    from webhook.cluster.audit import sort_key

    doc: dict[str, Any] = {
        "results": [r.as_json() for r in sorted(result.findings, key=sort_key)],
        "summary": result.summary(),
        "notes": list(result.notes),
        "reports": reports.reports if reports is not None else [],
        "reportApi": reports.api.api_version if reports is not None else None,
    }
    return json.dumps(doc, indent=2)


def render_text(result: Audit, *, reports: Published | None = None) -> str:
    from webhook.cluster.audit import sort_key

    lines: list[str] = []
    for r in sorted(result.findings, key=sort_key):
        lines.append(_headline(r))
        lines += [f"    {p.code.value}: {p.message}" for p in r.problems]
        lines += [f"    patch: {_op(op)}" for op in (r.judgement.patch if r.judgement else [])]
    s = result.summary()
    counts = ", ".join(f"{n} {code}" for code, n in s["findings"].items() if n)
    lines.append(
        f"{_count(s['pods'], 'pod')} and {_count(s['workloads'], 'workload')} in "
        f"{_count(s['namespaces'], 'namespace')} audited: {s['withFindings']} with findings"
        + (f" ({counts})" if counts else "")
        + f", {s['untouched']} untouched"
    )
    if reports is not None:
        lines.append(_reports_line(reports))
    return "\n".join(lines)


def _reports_line(published: Published) -> str:
    """``Reports (openreports.io/v1alpha1): 3 in 2 namespaces (research, serving) and 1
    cluster-wide; 2 written, 1 up to date, 1 retired``."""
    api = published.api
    namespaces = sorted({name.split("/")[0] for name in published.reports if "/" in name})
    cluster_wide = sum("/" not in name for name in published.reports)
    where = _count(len(namespaces), "namespace")
    if namespaces:
        where += f" ({', '.join(namespaces)})"
    if cluster_wide:
        where += f" and {cluster_wide} cluster-wide"
    total = len(published.reports)
    return (
        f"{api.kind}s ({api.api_version}): {total} in {where}; {published.written} written, "
        f"{total - published.written} up to date, {published.retired} retired"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _headline(r: AuditResult) -> str:
    v = r.verdict
    klass = f"  class={v.workload_class} ({v.class_source})" if v.workload_class else ""
    where = ""
    if r.kind == "Pod":
        node = f"{r.node} ({r.node_class})" if r.node else "none (not scheduled)"
        where = f"  node={node}  {r.phase}"
    return f"{r.kind} {r.namespace}/{r.name}{klass}{where}"


def _op(op: dict[str, Any]) -> str:
    value = f" {json.dumps(op['value'], separators=(',', ':'))}" if "value" in op else ""
    return f"{op['op']} {op['path']}{value}"
