"""Seeded fuzzing of ``preemptguard check`` and ``explain`` on mutated manifests.

Hundreds of cases run in process (click's CliRunner); a handful through the installed
command, as a user runs it. ``python benchmarks/fuzz.py --seed S --cli-case N --show``
makes one case again.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fuzz import known
from tests.fuzz.mutators import ManifestCase
from tests.fuzz.oracle import cli_placement, judge_cli, same_in_every_format
from tests.fuzz.runner import (
    ReviewRunner,
    check_as_json_list,
    describe,
    invoke_in_process,
    run_cli,
    run_cli_reviews,
)

pytestmark = pytest.mark.slow

SEED = 20261203
CASES = 300
REVIEW_CASES = 150
# Through the console command: a few of each kind of input.
SUBPROCESS_CASES = (0, 1, 2, 3, 4, 5)
REPRODUCERS = Path(__file__).with_name("reproducers")


def test_seeded_cli_runs() -> None:
    report = run_cli(SEED, range(CASES))
    print(describe(report))
    unknown = [f for f in report.found if known.match(f) is None]
    assert not unknown, "\n".join(str(f) for f in unknown[:50])
    for status in ("exit-0", "exit-1", "exit-2"):
        assert report.outcomes[status] >= 10, report.outcomes
    assert report.outcomes["patched-and-rechecked"] >= 10, report.outcomes
    for name in ("yaml", "json", "bytes", "deep", "huge-list", "surrogate", "big-number", "review"):
        assert report.mutations[name] >= 3, report.mutations


def test_check_answers_reviews_as_the_server_does() -> None:
    """Mutated reviews given to ``check -o json``: the ``reviews`` it shows are the server's."""
    with ReviewRunner() as runner:
        report = run_cli_reviews(runner, SEED, range(REVIEW_CASES))
    print(describe(report))
    unknown = [f for f in report.found if known.match(f) is None]
    assert not unknown, "\n".join(str(f) for f in unknown[:50])
    assert report.outcomes["exit-0"] + report.outcomes["exit-1"] >= REVIEW_CASES // 3


def test_the_installed_command() -> None:
    report = run_cli(SEED + 1, SUBPROCESS_CASES, subprocesses=True)
    print(describe(report))
    assert not report.found, "\n".join(str(f) for f in report.found)


def _cli_reproducers() -> list[Any]:
    reasons = known.reproducer_reasons()
    params = []
    for path in sorted(REPRODUCERS.glob("cli--*")):
        marks = []
        if path.name in reasons:
            marks.append(pytest.mark.xfail(strict=True, reason=reasons[path.name]))
        params.append(pytest.param(path, marks=marks, id=path.stem))
    return params


@pytest.mark.parametrize("path", _cli_reproducers())
def test_cli_reproducer(path: Path, tmp_path: Path) -> None:
    """``cli--<what>.<ext>``: a manifest that once broke a rule, given to ``check -o json``."""
    case = ManifestCase(
        0, 0, {path.name: path.read_bytes()}, ["check", "-o", "json", "-f", path.name]
    )
    run = invoke_in_process(case, tmp_path)
    failures = judge_cli(case.args, run.exit_code, run.stdout, run.stderr, run.exception)
    objects = _objects(path)
    if not failures and objects is not None:
        rerun = partial(check_as_json_list, options=[])
        failures = same_in_every_format(objects, json.loads(run.stdout), rerun)
    assert not failures, [str(f) for f in failures]


def _objects(path: Path) -> list[Any] | None:
    """The objects in a reproducer, read independently of the CLI; None if it has none."""
    try:
        if path.suffix == ".json":
            docs = [json.loads(path.read_bytes())]
        else:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (ValueError, yaml.YAMLError, RecursionError):
        return None
    return docs if all(isinstance(d, dict) for d in docs) else None


# --- the oracle itself -------------------------------------------------------------------


def test_oracle_catches_tracebacks_and_odd_exits() -> None:
    ok = json.dumps({"results": [], "summary": {"objects": 0}, "inputErrors": []})
    assert judge_cli(["check", "-o", "json"], 0, ok, "", None) == []
    checks = [f.check for f in judge_cli(["check"], 3, "", "Traceback (most recent", None)]
    assert checks == ["cli-exit-status", "cli-traceback"]
    internal = judge_cli(["explain"], 2, "", "error: internal error (KeyError)", None)
    assert [f.check for f in internal] == ["cli-internal"]
    assert [f.check for f in judge_cli(["check", "-o", "json"], 0, "{", "", None)] == [
        "cli-json-unreadable"
    ]
    refused = json.dumps(
        {"results": [{"allowed": False}], "summary": {"objects": 1}, "inputErrors": []}
    )
    assert [f.check for f in judge_cli(["check", "-o", "json"], 0, refused, "", None)] == [
        "cli-exit-inconsistent"
    ]


def test_oracle_applies_cli_patches_and_checks_again() -> None:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"together.ai/workload": "serving"}},
        "spec": {"nodeSelector": {"together.ai/compute-class": "preemptible"}},
    }
    add = [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]
    result = {"allowed": True, "skipped": None, "namespace": "default", "patch": add}
    output = {"results": [result], "inputErrors": []}
    clean = json.dumps({"results": [dict(result, patch=[])]})
    checks = [f.check for f in cli_placement([pod], output, lambda objs: (0, clean))]
    assert checks == ["cli-standard-on-preemptible"]
    again = json.dumps({"results": [result]})
    pod["spec"] = {}
    pod["metadata"]["annotations"] = {}
    checks = [f.check for f in cli_placement([pod], output, lambda objs: (0, again))]
    assert checks == ["cli-not-idempotent"]
