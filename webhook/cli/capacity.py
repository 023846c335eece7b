"""``preemptguard capacity``: GPUs by node class and workload class, pending demand for
preemptible capacity, GPU-hours and savings, and a suggested preemptible target, from the
cluster alone (``cluster/capacity.py`` computes; this renders)."""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from webhook.cli.audit import LARGE, StatusLine, cluster_options, connect, fail, load
from webhook.cli.options import output_option, policies_option

if TYPE_CHECKING:
    from webhook.cluster.capacity import Capacity, Settings

CAPACITY_EXAMPLES = """
\b
Examples:
  preemptguard capacity
  preemptguard capacity -o json | jq .suggestion
  preemptguard capacity --window 7d --idle-for 2h --preemptible-price-ratio 0.35
"""

UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(click.ParamType[float]):
    """Seconds, or a number with ``s``, ``m``, ``h`` or ``d``: ``90``, ``30m``, ``1.5h``."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if found is None:
            self.fail(f"{value!r} is not a duration (such as 90, 30m, 1.5h, 7d)", param, ctx)
        return float(found.group(1)) * UNITS[found.group(2)]


def capacity_options(func: click.decorators.FC) -> click.decorators.FC:
    """``--window``, ``--idle-for`` and ``--preemptible-price-ratio``: what ``capacity`` and the
    observer's capacity gauges are computed with (``capacity_settings`` reads them)."""
    func = click.option(
        "--preemptible-price-ratio",
        type=click.FloatRange(0, 1),
        default=0.5,
        show_default=True,
        help="The price of a preemptible GPU-hour over an on-demand one: what the GPU-hours "
        "cost in on-demand GPU-hours, and what was saved.",
    )(func)
    func = click.option(
        "--idle-for",
        type=Duration(),
        default="1h",
        show_default=True,
        help="A preemptible GPU node that has held no GPU pod this long counts as idle: the "
        "suggested target is lowered by its GPUs when nothing is pending.",
    )(func)
    return click.option(
        "--window",
        type=Duration(),
        default="24h",
        show_default=True,
        help="How far back reclaims, displaced pods and GPU-hours are counted.",
    )(func)


def capacity_settings(
    window: float,
    idle_for: float,
    preemptible_price_ratio: float,
    event_namespace: str | None = None,
) -> Settings:
    """The settings the capacity options give (Events about Nodes in ``event_namespace``)."""
    from webhook.cluster.capacity import Settings

    settings = Settings(window=window, idle_for=idle_for, price_ratio=preemptible_price_ratio)
    return (
        settings if event_namespace is None else replace(settings, event_namespace=event_namespace)
    )


@click.command("capacity", epilog=CAPACITY_EXAMPLES)
@policies_option
@output_option(
    "text",
    "json",
    help="text: tables and the suggestion; json: every figure.",
)
@capacity_options
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@cluster_options
def capacity_command(
    policies: Path | None,
    output: str,
    window: float,
    idle_for: float,
    preemptible_price_ratio: float,
    quiet: bool,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """GPUs by node class and workload class, pending demand for preemptible capacity, the
    flexible pods on standard nodes, reclaims, GPU-hours and their on-demand equivalent, and
    a suggested preemptible target with its reason.

    Computed from what the cluster lists (nodes, namespaces, pods, Events), one paginated
    list of each; no provider API. Exit status: 0, or 2 on an error.
    """
    from webhook.cluster import capacity_live
    from webhook.kube.client import ClusterError

    policy = load(policies)
    cluster = connect(kubeconfig, context)
    settings = capacity_settings(window, idle_for, preemptible_price_ratio)
    status = StatusLine(enabled=not quiet)

    def progress(kind: str, count: int) -> None:
        if status.tty or count >= LARGE:
            status.show(f"capacity: listed {count:,} {kind.lower()}s")

    try:
        report = capacity_live.measure(cluster, policy, time.time, settings, progress)
    except ClusterError as exc:
        status.done()
        fail(str(exc))
    finally:
        cluster.close()
    status.done()
    click.echo(render_json(report) if output == "json" else render_text(report))
    sys.exit(0)


def render_json(report: Capacity) -> str:
    from webhook.kube.clock import format_time

    s = report.suggestion
    doc = {
        "time": format_time(report.now),
        "settings": {
            "windowSeconds": report.settings.window,
            "idleForSeconds": report.settings.idle_for,
            "preemptiblePriceRatio": report.settings.price_ratio,
        },
        "nodes": {
            nc: {"nodes": f.nodes, "gpus": f.gpus, "requestedGpus": f.requested, "freeGpus": f.free}
            for nc, f in report.by_node_class.items()
        },
        "requestedGpus": _nested(report.requested),
        "pendingGpus": {"total": report.pending_gpus, "byClass": dict(report.pending)},
        "fallbackGpus": {"total": report.fallback_gpus, "byClass": dict(report.fallback)},
        "reclaims": report.reclaims,
        "displacedPods": dict(report.displaced),
        "gpuHours": _nested(report.gpu_hours),
        "cost": {
            "gpuHours": round(report.total_hours, 3),
            "onDemandEquivalentGpuHours": round(report.on_demand_equivalent, 3),
            "savedGpuHours": round(report.saved, 3),
        },
        "idlePreemptibleNodes": list(report.idle_nodes),
        "suggestion": {
            "currentPreemptibleGpus": s.current,
            "suggestedPreemptibleGpus": s.target,
            "change": s.change,
            "gpusPerNode": s.gpus_per_node,
            "reason": s.reason,
        },
    }
    return json.dumps(doc, indent=2)


def _nested(table: Any) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for (wclass, node_class), value in table.items():
        nested.setdefault(wclass, {})[node_class] = value
    return nested


def render_text(report: Capacity) -> str:
    from webhook.cluster.capacity import duration

    window = duration(report.settings.window)
    lines = ["GPUs (nvidia.com/gpu)   nodes   allocatable   requested   free"]
    for nc, f in report.by_node_class.items():
        lines.append(f"  {nc:<20}{f.nodes:>7,}{f.gpus:>14,}{f.requested:>12,}{f.free:>7,}")
    lines += ["", "Requested GPUs of running pods, by class and node class:"]
    lines += _table(report, report.requested, lambda v: f"{v:,}")
    lines += [
        "",
        f"Pending for preemptible capacity: {report.pending_gpus:,} GPUs{_by(report.pending)}",
        f"Flexible on standard nodes, could move back: {report.fallback_gpus:,} GPUs"
        f"{_by(report.fallback)}",
        f"Reclaims in the last {window}: {report.reclaims} (TogetherPreempted Events); "
        f"displaced pods: {sum(report.displaced.values())}{_by(report.displaced)}",
        "",
        f"GPU-hours in the last {window}, by class and node class:",
    ]
    lines += _table(report, report.gpu_hours, lambda v: f"{v:,.1f}")
    ratio = report.settings.price_ratio
    lines += [
        f"  {report.total_hours:,.1f} GPU-hours cost {report.on_demand_equivalent:,.1f} on-demand "
        f"GPU-hours (preemptible at {ratio:g} of the on-demand price): "
        f"{report.saved:,.1f} saved",
        "",
        _suggestion(report),
    ]
    return "\n".join(lines)


def _table(report: Capacity, table: Any, show: Any) -> list[str]:
    node_classes = report.node_classes
    width = max(len(c) for c in report.classes) + 2
    lines = ["  " + "class".ljust(width) + "".join(f"{nc:>13}" for nc in node_classes)]
    for wclass in report.classes:
        values = [table.get((wclass, nc), 0) for nc in node_classes]
        if any(values):
            lines.append("  " + wclass.ljust(width) + "".join(f"{show(v):>13}" for v in values))
    return lines


def _by(counts: Any) -> str:
    shown = [f"{name} {n:,}" for name, n in counts.items() if n]
    return f" ({', '.join(shown)})" if shown else ""


def _suggestion(report: Capacity) -> str:
    s = report.suggestion
    return (
        f"Suggested preemptible target: {s.target:,} GPUs (allocatable now {s.current:,}): "
        f"{s.reason}"
    )
