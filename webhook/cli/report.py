"""Render dry-run results for a terminal or a CI log, as JSON, or as the objects the API
server would store; own the exit status."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from webhook.admission.review import decode_patch
from webhook.cli.colour import PLAIN, Palette
from webhook.cli.dryrun import Admitted, Result
from webhook.engine.decision import Obj
from webhook.loading import goyaml, jsondoc
from webhook.loading.manifests import InputError


class ExitStatus(enum.IntEnum):
    ALLOWED = 0
    REFUSED = 1
    BAD_INPUT = 2


@dataclass(kw_only=True)
class Tally:
    """The counts a run ends with: the summary and the exit status."""

    objects: int = 0
    # Workloads with several pod templates get a result for each; the rest one each.
    results: int = 0
    allowed: int = 0
    refused: int = 0
    would_be_refused: int = 0
    changed: int = 0
    skipped: int = 0
    input_errors: int = 0

    def count(self, r: Result) -> None:
        d = r.decision
        self.objects += r.first
        self.results += 1
        self.allowed += d.allowed
        self.refused += not d.allowed
        self.would_be_refused += d.enforce_refuses and d.allowed
        self.changed += bool(r.patch)
        self.skipped += d.skip is not None

    def as_json(self) -> dict[str, int]:
        return {
            "objects": self.objects,
            "results": self.results,
            "allowed": self.allowed,
            "refused": self.refused,
            "wouldBeRefused": self.would_be_refused,
            "changed": self.changed,
            "skipped": self.skipped,
            "inputErrors": self.input_errors,
        }

    def exit_status(self) -> ExitStatus:
        if self.input_errors:
            return ExitStatus.BAD_INPUT
        return ExitStatus.REFUSED if self.refused else ExitStatus.ALLOWED


class _Gathered:
    """Text for a stream that is not a terminal, written in pieces of about 64 KiB: one
    write per result would be one system call each where output is unbuffered
    (``PYTHONUNBUFFERED``, as in the container image)."""

    SIZE = 2**16

    def __init__(self, out: TextIO) -> None:
        self.out, self.pending, self.size = out, list[str](), 0

    def write(self, text: str) -> None:
        self.pending.append(text)
        self.size += len(text)
        if self.size >= self.SIZE:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.out.write("".join(self.pending))
            self.pending.clear()
            self.size = 0
        self.out.flush()


class Report:
    """Writes results to ``out`` as they come (text); subclasses write JSON or explanations.

    Nothing is kept but the tally, the input errors and at most 64 KiB of text not yet
    written (none on a terminal), so a run over any number of objects holds one at a time.
    ``finish`` (or ``flush``) writes what is left.
    """

    def __init__(self, out: TextIO, palette: Palette = PLAIN) -> None:
        self.out: TextIO | _Gathered = out if _is_terminal(out) else _Gathered(out)
        self.palette = palette
        self.tally, self.errors = Tally(), list[str]()
        # No result written yet: the JSON and explanations write no separator before the first.
        self.first = True

    def add(self, item: Result | InputError) -> None:
        if isinstance(item, InputError):
            self.errors.append(str(item))
            self.tally.input_errors += 1
            return
        self.tally.count(item)
        self.write(item)
        self.first = False

    def write(self, r: Result) -> None:
        self.out.write("\n".join(text_lines(r, self.palette)) + "\n")

    def flush(self) -> None:
        self.out.flush()

    def finish(self) -> ExitStatus:
        self.out.write(self.palette.strong(_summary_line(self.tally.as_json())) + "\n")
        self.flush()
        return self.tally.exit_status()


class JsonReport(Report):
    """``{"results": [...], "summary": {...}, "inputErrors": [...]}``, results streamed."""

    def write(self, r: Result) -> None:
        self.out.write(
            ('{\n  "results": [\n    ' if self.first else ",\n    ") + _indented(r.as_json())
        )

    def finish(self) -> ExitStatus:
        results = '{\n  "results": []' if self.first else "\n  ]"
        summary = _indented(self.tally.as_json(), 1)
        errors = _indented(self.errors, 1)
        self.out.write(f'{results},\n  "summary": {summary},\n  "inputErrors": {errors}\n}}\n')
        self.flush()
        return self.tally.exit_status()


class ExplainReport(Report):
    """Why each object got what it got, a block each."""

    def write(self, r: Result) -> None:
        self.out.write(("" if self.first else "\n") + explain_block(r, self.palette) + "\n")

    def finish(self) -> ExitStatus:
        self.flush()
        return self.tally.exit_status()


class ManifestsReport:
    """Each object as the API server would store it, as multi-document YAML in input order;
    for each object it would refuse, a comment line on ``err`` instead."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out: TextIO | _Gathered = out if _is_terminal(out) else _Gathered(out)
        self.err = err
        self.refused = self.input_errors = 0

    def add(self, item: Admitted | InputError) -> None:
        if isinstance(item, InputError):
            self.input_errors += 1
        elif item.stored is None:
            self.refused += 1
            self.flush()  # the objects before it come first where both streams are one
            where = f"{item.document.source}:{item.document.line}"
            message = " ".join(item.refusal.split())
            self.err.write(f"# refused: {item.title} ({where}): {message}\n")
            self.err.flush()
        else:
            self._write(item, item.stored)

    def _write(self, item: Admitted, stored: Obj) -> None:
        try:
            self.out.write("---\n" + manifest_yaml(stored))
        except Unwritable as exc:
            self.input_errors += 1
            where = f"{item.document.source}:{item.document.line}"
            self.err.write(f"error: {where}: {item.title}: {exc}: not printed\n")

    def flush(self) -> None:
        self.out.flush()

    def finish(self) -> ExitStatus:
        self.flush()
        if self.input_errors:
            return ExitStatus.BAD_INPUT
        return ExitStatus.REFUSED if self.refused else ExitStatus.ALLOWED


class Unwritable(Exception):
    """An object that cannot be written as YAML as it was given."""


_BaseDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[misc]
    """YAML that reads back as the same values both by YAML 1.1 and as kubectl reads it: a
    string either would take for something else (``y`` and ``0o17`` to kubectl, ``2024-01-01``
    to YAML 1.1) is quoted."""


for _tag, _pattern, _first in goyaml.IMPLICIT:
    _Dumper.add_implicit_resolver(_tag, _pattern, _first)


def _text(dumper: Any, value: str) -> yaml.ScalarNode:
    # Scripts and configuration files in a ConfigMap stay readable as literal blocks.
    style = "|" if "\n" in value else None
    node: yaml.ScalarNode = dumper.represent_scalar(goyaml.STR_TAG, value, style=style)
    return node


_Dumper.add_representer(str, _text)


def manifest_yaml(obj: Obj) -> str:
    """One object as a YAML document: keys in their order, long strings never folded.

    ``Unwritable`` when it cannot be written as it was given: nested deeper than the writer
    goes, or holding a value that was not read (see ``jsondoc``).
    """
    try:
        try:
            text = _dump(obj)
        except UnicodeEncodeError:
            text = _dump(_as_go_reads(obj))
    except RecursionError:
        raise Unwritable("nested too deeply to be written as YAML") from None
    if any(marker in text for marker in jsondoc.UNREAD):
        raise Unwritable("it holds a value nested too deeply or a number too long to be read")
    return text


def _dump(obj: Obj) -> str:
    text: str = yaml.dump(
        obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
        width=2**30,
    )  # fmt: skip
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _as_go_reads(obj: Obj) -> Obj:
    """``obj`` with each lone surrogate (``"\\ud800"`` in a JSON file) as U+FFFD, as Go's
    JSON decoder reads it: what kubectl sends and the API server stores. UTF-8 has no
    surrogates, so YAML cannot hold them."""
    text = json.dumps(obj, ensure_ascii=False)
    stored: Obj = json.loads(_SURROGATE.sub("\ufffd", text))
    return stored


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except ValueError:  # closed
        return False


def _indented(value: Any, levels: int = 2) -> str:
    """``value`` as indented JSON (2 spaces), nested ``levels`` deep in the document."""
    text = jsondoc.dumps_indented(value)
    return text.replace("\n", "\n" + "  " * levels)


def text_lines(r: Result, palette: Palette = PLAIN) -> list[str]:
    d, p = r.decision, palette
    lines = [_headline(r, p)]
    lines += [f"    {p.bad('refused:')} {v}" for v in d.violations if not d.allowed]
    lines += [f"    {p.warn('warning:')} {w}" for w in d.warnings]
    lines += [f"    {p.change('patch:')} {_op(op)}" for op in r.patch]
    lines += [f"    answer ({hook}): {_answer(review)}" for hook, review in r.reviews.items()]
    return lines


def explain_block(r: Result, palette: Palette = PLAIN) -> str:
    d, p = r.decision, palette
    lines = [f"{p.strong(_title(r))}  ({r.document.source}:{r.document.line})"]
    if d.skipped:
        lines.append(f"    {p.dim('untouched:')} {d.skipped}")
    else:
        lines.append(f"    class: {_class_origin(r)}")
    lines += [f"    {p.change('change')} {c.path}: {c.message}" for c in d.changes]
    refused = p.bad("refused") if not d.allowed else p.warn("would be refused")
    lines += [f"    {refused}: {v}" for v in d.violations]
    lines += [
        f"    {p.warn('warning:')} {w}" for w in d.warnings if not w.startswith("would be refused")
    ]
    if not d.skipped and not d.changes and not d.violations and d.workload_class:
        lines.append("    no change: the object already has everything its class needs")
    return "\n".join(lines)


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
    template = f" {r.template}" if r.template and r.template != "spec.template" else ""
    role = f" ({r.role})" if r.role else ""
    return f"{d.kind} {where}{d.name or '<unnamed>'}{template}{role}"


def _headline(r: Result, p: Palette) -> str:
    d = r.decision
    if d.skipped:
        verdict = p.dim(f"UNTOUCHED ({d.skipped})")
    elif not d.allowed:
        verdict = p.bad("REFUSED")
    else:
        verdict = p.good("ALLOWED")
        verdict += p.warn(", would be refused in enforce mode") if d.enforce_refuses else ""
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
        f"{s['objects']} object{'' if s['objects'] == 1 else 's'}"
        + (
            f" ({s['results']} results, one per pod template)"
            if s["results"] != s["objects"]
            else ""
        )
        + f": {s['allowed']} allowed ({s['changed']} with changes), "
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
