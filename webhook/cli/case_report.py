"""The results of ``preemptguard test``: text for a terminal or a CI log, one JSON document,
or JUnit XML as CI systems (GitLab, Jenkins, GitHub's test reporters) read it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from itertools import groupby
from pathlib import PurePosixPath
from typing import Any

from webhook.cli.colour import PLAIN, Palette
from webhook.cli.policy_tests import CaseResult

SUITES_NAME = "preemptguard test"
FAILURE_TYPE = "PlacementTestFailure"


def text_lines(results: Sequence[CaseResult], palette: Palette = PLAIN) -> Iterator[str]:
    """A line per case, its failures under it, then the totals."""
    for r in results:
        mark = palette.good("PASS") if r.passed else palette.bad("FAIL")
        yield f"{mark}  {r.case.name}  ({r.case.source})"
        for failure in r.failures:
            yield f"      {failure}"
    failed = _failed(results)
    yield palette.strong(f"{len(results) - failed} passed, {failed} failed")


def as_json(results: Sequence[CaseResult]) -> dict[str, Any]:
    """``{"cases": [...], "summary": {...}}``: each case with what it expected and got."""
    cases = [
        {
            "policy": r.case.policy_dir.as_posix(),
            "file": r.case.file,
            "line": r.case.line,
            "name": r.case.name,
            "passed": r.passed,
            "message": "; ".join(r.failures) or None,
            "failures": r.failures,
            "expected": dict(r.case.expect),
            "actual": r.actual(),
        }
        for r in results
    ]
    failed = _failed(results)
    summary = {"cases": len(results), "passed": len(results) - failed, "failed": failed}
    return {"cases": cases, "summary": summary}


def junit(results: Sequence[CaseResult]) -> bytes:
    """JUnit XML, UTF-8: a ``<testsuite>`` per test file, a ``<testcase>`` per case, and a
    ``<failure>`` on each that failed."""
    root = ET.Element("testsuites", _counts(results, name=SUITES_NAME))
    for file, cases in groupby(results, key=lambda r: r.case.file):
        in_file = list(cases)
        suite = ET.SubElement(root, "testsuite", _counts(in_file, name=file, file=file))
        for r in in_file:
            _testcase(suite, r)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n").encode()


def _testcase(suite: ET.Element, r: CaseResult) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "name": _xml_text(r.case.name),
            "classname": _xml_text(_classname(r.case.file)),
            "file": _xml_text(r.case.file),
            "line": str(r.case.line),
            "time": _seconds(r.seconds),
        },
    )
    if r.passed:
        return
    failure = ET.SubElement(
        case, "failure", {"message": _xml_text("; ".join(r.failures)), "type": FAILURE_TYPE}
    )
    failure.text = _xml_text("\n".join([f"{r.case.source}: {r.case.name}", *r.failures]))


def _counts(results: Sequence[CaseResult], **attributes: str) -> dict[str, str]:
    counted = {
        "tests": str(len(results)),
        "failures": str(_failed(results)),
        "errors": "0",
        "skipped": "0",
        "time": _seconds(sum(r.seconds for r in results)),
    }
    return {**{k: _xml_text(v) for k, v in attributes.items()}, **counted}


def _classname(file: str) -> str:
    """``policies/default/tests/rules.yaml`` as ``policies.default.tests.rules``: Jenkins reads
    a classname's dots as packages, and shows the cases of a file as one class."""
    return ".".join(part for part in PurePosixPath(file).with_suffix("").parts if part != "/")


def _seconds(seconds: float) -> str:
    return f"{seconds:.6f}"


def _failed(results: Sequence[CaseResult]) -> int:
    return sum(not r.passed for r in results)


# What XML 1.0 cannot hold at all, not even escaped: control characters but tab and line
# breaks, lone surrogates, U+FFFE and U+FFFF. A case's name or message may carry them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """``text`` with each character XML cannot hold written as a Python escape (``\\x1b``)."""
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
