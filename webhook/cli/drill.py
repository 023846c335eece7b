"""``preemptguard drill NODE``: rehearse a reclaim of one preemptible node."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from webhook.cli.audit import ERROR, StatusLine, cluster_options, connect, fail, load
from webhook.cli.options import FiniteSeconds, output_option, policies_option

if TYPE_CHECKING:
    from webhook.cluster.drill import Plan, Report

DRILL_EXAMPLES = """
\b
Examples:
  preemptguard drill gpu-spot-17 --dry-run      # the plan: pods, classes, grace periods
  preemptguard drill gpu-spot-17                # asks before it starts
  preemptguard drill gpu-spot-17 --yes --uncordon -o json
"""

CLEAN, NOT_CLEAN = 0, 1
BAR_WIDTH = 30


@click.command("drill", epilog=DRILL_EXAMPLES)
@click.argument("node")
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--uncordon", is_flag=True, help="Uncordon the node at the end (default: leave it cordoned)."
)
@click.option(
    "--wait",
    "wait_seconds",
    type=FiniteSeconds(),
    default=300.0,
    show_default=True,
    help="Seconds to wait for the pods to exit: the provider's window before the node is gone.",
)
@policies_option
@output_option(
    "text", "json", help="text: what the drill did, pod by pod; json: the same as one object."
)
@cluster_options
def drill_command(
    node: str,
    dry_run: bool,
    yes: bool,
    uncordon: bool,
    wait_seconds: float,
    policies: Path | None,
    output: str,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Rehearse a reclaim of preemptible NODE, as the provider does it.

    Cordons the node, emits the TogetherPreempted Event, gives every pod on it the
    DisruptionTarget condition (as the observer does in a reclaim) and deletes it with its own
    grace period (a delete, not an eviction: PodDisruptionBudgets are not honoured, as the
    provider does not honour them), waits for them to exit, and reports per pod when it
    exited or that it was still running at the deadline, and which pods of a standard-only
    class were on the node. DaemonSet and mirror pods are left running. The node is not
    removed and stays cordoned unless --uncordon is given. A standard node is refused.

    The node is uncordoned with --uncordon only when the drill cordoned it; a cordon made
    before the drill stays. A drill stopped before any delete (the Event refused) undoes its
    own cordon.

    Exit status: 0 every pod exited within its grace period and no critical pod was on the
    node, 1 otherwise, 2 error (including a refused node, an unconfirmed drill, or a node
    that could not be uncordoned).
    """
    from webhook.cluster import drill
    from webhook.kube.client import ClusterError
    from webhook.kube.clock import SystemClock

    policy = load(policies)
    cluster = connect(kubeconfig, context)
    try:
        the_plan = drill.plan(cluster, node, policy, wait_seconds=wait_seconds)
    except ClusterError as exc:
        cluster.close()
        fail(str(exc))
    if dry_run:
        click.echo(json.dumps(the_plan.as_json(), indent=2) if output == "json" else
                   render_plan(the_plan, dry_run=True))  # fmt: skip
        sys.exit(CLEAN)
    if output == "text":
        click.echo(render_plan(the_plan, dry_run=False))
    if not yes and not _confirmed(the_plan):
        cluster.close()
        click.echo("drill not started", err=True)
        sys.exit(ERROR)
    status = StatusLine(every=10.0)

    def progress(waited: float, wait: float, gone: int, total: int) -> None:
        status.show(_bar(waited, wait, gone, total))

    try:
        report = drill.execute(
            cluster, the_plan, SystemClock(), uncordon=uncordon, progress=progress
        )
    except ClusterError as exc:
        status.done()
        fail(str(exc))
    finally:
        cluster.close()
    status.done()
    click.echo(json.dumps(report.as_json(), indent=2) if output == "json" else render(report))
    if report.uncordon_error is not None:
        fail(f"node {node} {report.node_state()}")
    sys.exit(CLEAN if report.clean else NOT_CLEAN)


def _confirmed(the_plan: Plan) -> bool:
    """Asked on stderr; an input at its end (``</dev/null``, a closed pipe) or Ctrl-C at the
    prompt is a no, so it exits 2 as a drill not confirmed rather than click's ``Aborted!``."""
    question = f"Cordon {the_plan.node} and delete {len(the_plan.to_delete)} pods now?"
    if the_plan.cordoned:
        question = f"Delete {len(the_plan.to_delete)} pods on {the_plan.node} now?"
    try:
        return click.confirm(question, err=True)
    except click.Abort:
        click.echo(err=True)  # end the prompt's line
        return False


def _bar(waited: float, wait: float, gone: int, total: int) -> str:
    filled = int(BAR_WIDTH * (waited / wait)) if wait else BAR_WIDTH
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    return f"drill: [{bar}] {waited:3.0f}/{wait:.0f} s  {gone} of {total} pods gone"


def render_plan(the_plan: Plan, *, dry_run: bool) -> str:
    heading = "Plan" if dry_run else "Drill"
    cordon = "already cordoned" if the_plan.cordoned else "cordon it"
    lines = [
        f"{heading}: reclaim of {the_plan.node_class} node {the_plan.node}: {cordon}, emit "
        f"TogetherPreempted, delete {len(the_plan.to_delete)} pods with their own grace "
        f"period, wait up to {the_plan.wait_seconds:.0f} s",
    ]
    actions = {
        "delete": "delete",
        "daemonset": "leave (DaemonSet pod)",
        "mirror": "leave (mirror pod)",
        "terminating": "leave (already terminating)",
    }
    for p in the_plan.pods:
        checkpoint = f"{p.checkpoint} s" if p.checkpoint is not None else "-"
        critical = "  CRITICAL: must not run on preemptible nodes" if p.critical else ""
        lines.append(
            f"  {actions[p.action]:<28} {p.namespace}/{p.name}  class={p.workload_class}  "
            f"grace={p.grace} s  checkpoint={checkpoint}  owner={p.owner}{critical}"
        )
    if not the_plan.pods:
        lines.append("  (no pods on the node)")
    lines.append(_critical_line(the_plan))
    return "\n".join(lines)


def _critical_line(the_plan: Plan) -> str:
    if not the_plan.critical:
        return "Critical pods on the node: none"
    names = ", ".join(f"{p.namespace}/{p.name} ({p.workload_class})" for p in the_plan.critical)
    return f"Critical pods on the node: {len(the_plan.critical)} ({names})"


def render(report: Report) -> str:
    gone = sum(1 for r in report.results if r.gone_before)
    deleted = len(report.results) - gone
    before = f" ({gone} gone before their delete)" if gone else ""
    lines = [
        f"Drill of {report.plan.node}: TogetherPreempted Event {report.event}, "
        f"{deleted} pods deleted{before}, waited {report.waited:.0f} s"
    ]
    for r in report.results:
        lines.append(f"  {r.pod.namespace}/{r.pod.name} ({r.pod.workload_class}): {r.describe()}")
    outcomes: dict[str, int] = {}
    for r in report.results:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    counts = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "no pods"
    lines.append(f"Outcomes: {counts}")
    lines.append(_critical_line(report.plan))
    lines.append(f"Node {report.plan.node}: {report.node_state()}")
    return "\n".join(lines)
