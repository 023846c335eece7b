"""Render dry-run results for a terminal or a CI log, or as JSON; own the exit status."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.admission.review import decode_patch
from webhook.cli.dryrun import Result


class ExitStatus(enum.IntEnum):
    ALLOWED = 0
    REFUSED = 1
    BAD_INPUT = 2


def exit_status(results: Sequence[Result], *, bad_input: bool) -> ExitStatus:
    if bad_input:
        return ExitStatus.BAD_INPUT
    if any(not r.decision.allowed for r in results):
        return ExitStatus.REFUSED
    return ExitStatus.ALLOWED


def summary(results: Sequence[Result], *, input_errors: int = 0) -> dict[str, int]:
    decisions = [r.decision for r in results]
    return {
        "objects": len(decisions),
        "allowed": sum(d.allowed for d in decisions),
        "refused": sum(not d.allowed for d in decisions),
        "wouldBeRefused": sum(d.enforce_refuses and d.allowed for d in decisions),
        "changed": sum(bool(r.patch) for r in results),
        "skipped": sum(d.skipped is not None for d in decisions),
        "inputErrors": input_errors,
    }


def render_json(results: Sequence[Result], *, input_errors: Sequence[str] = ()) -> str:
    doc = {
        "results": [r.as_json() for r in results],
        "summary": summary(results, input_errors=len(input_errors)),
        "inputErrors": list(input_errors),
    }
    return json.dumps(doc, indent=2)


def render_text(results: Sequence[Result], *, input_errors: int = 0) -> str:
    lines: list[str] = []
    for r in results:
        lines.append(_headline(r))
        lines += [f"    refused: {v}" for v in r.decision.violations if not r.decision.allowed]
        lines += [f"    warning: {w}" for w in r.decision.warnings]
        lines += [f"    patch: {_op(op)}" for op in r.patch]
        lines += [f"    answer ({hook}): {_answer(review)}" for hook, review in r.reviews.items()]
    lines.append(_summary_line(summary(results, input_errors=input_errors)))
    return "\n".join(lines)


def render_explain(results: Sequence[Result]) -> str:
    blocks = []
    for r in results:
        d = r.decision
        lines = [f"{_title(r)}  ({r.document.source}:{r.document.line})"]
        if d.skipped:
            lines.append(f"    untouched: {d.skipped}")
        else:
            lines.append(f"    class: {_class_origin(r)}")
        lines += [f"    change {c.path}: {c.message}" for c in d.changes]
        lines += [
            f"    {'refused' if not d.allowed else 'would be refused'}: {v}" for v in d.violations
        ]
        lines += [f"    warning: {w}" for w in d.warnings if not w.startswith("would be refused")]
        if not d.skipped and not d.changes and not d.violations and d.workload_class:
            lines.append("    no change: the object already has everything its class needs")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _class_origin(r: Result) -> str:
    c = r.decision.classification
    if c.name is None:
        return (
            f"none ({c.source}): no annotation, rule, namespace default or policy default applies"
        )
    detail = f" ({c.detail})" if c.detail else ""
    return f"{c.name}, decided by {c.source}{detail}"


def _title(r: Result) -> str:
    d = r.decision
    where = f"{d.namespace}/" if d.namespace else ""
    return f"{d.kind} {where}{d.name or '<unnamed>'}"


def _headline(r: Result) -> str:
    d = r.decision
    if d.skipped:
        verdict = f"UNTOUCHED ({d.skipped})"
    elif not d.allowed:
        verdict = "REFUSED"
    else:
        verdict = "ALLOWED" + (", would be refused in enforce mode" if d.enforce_refuses else "")
        verdict += "" if d.workload_class else ", unclassified: left as written"
    klass = f"  class={d.workload_class} ({d.classification.source})" if d.workload_class else ""
    return f"{r.document.source}:{r.document.line}  {_title(r)}{klass}  {verdict}"


def _answer(review: Mapping[str, Any]) -> str:
    """A review answer in a few words, as the API server would act on it."""
    response = review["response"]
    if not response["allowed"]:
        return f"refused ({response['status']['code']}): {response['status']['message']}"
    if "patch" in response:
        return f"allowed with a patch of {len(decode_patch(response['patch']))} operations"
    return "allowed"


def _op(op: dict[str, Any]) -> str:
    value = f" {json.dumps(op['value'], separators=(',', ':'))}" if "value" in op else ""
    return f"{op['op']} {op['path']}{value}"


def _summary_line(s: dict[str, int]) -> str:
    return (
        f"{s['objects']} objects: {s['allowed']} allowed ({s['changed']} with changes), "
        f"{s['refused']} refused, {s['skipped']} untouched"
        + (
            f", {s['wouldBeRefused']} would be refused in enforce mode"
            if s["wouldBeRefused"]
            else ""
        )
        + (
            f"; {s['inputErrors']} input error{'s' if s['inputErrors'] != 1 else ''} "
            "(see above): nothing was checked there"
            if s["inputErrors"]
            else ""
        )
    )
