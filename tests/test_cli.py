"""The CLI, run as users run it: the installed `preemptguard` console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import EXAMPLES, POLICIES, REPO
from webhook.cli.policy_tests import load_cases, policy_dirs
from webhook.native import engine_build

EXE = shutil.which("preemptguard", path=str(Path(sys.executable).parent)) or "preemptguard"


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *args], input=stdin, capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


def test_check_examples_text() -> None:
    proc = run("check", "-f", "examples/")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert (
        "examples/serving.yaml:39  Deployment inference/chat-api-canary  class=serving (annotation)  REFUSED"
        in out
    )
    assert (
        "examples/coordinator.yaml:3  Pod research/train-coordinator  class=coordinator (annotation)  REFUSED"
        in out
    )
    assert "grace period lowered from 900 to 300 s" in out
    assert "needs 315 s, more than the 300 s" in out
    assert out.rstrip().endswith("16 objects: 13 allowed (9 with changes), 3 refused, 3 untouched")


def test_check_json_patches_apply_to_the_file_objects() -> None:
    proc = run("check", "-f", "examples/", "-o", "json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["summary"]["objects"] == 16
    assert doc["summary"]["refused"] == 3
    required = {
        "file",
        "kind",
        "namespace",
        "name",
        "class",
        "allowed",
        "reasons",
        "warnings",
        "patch",
    }
    for result in doc["results"]:
        assert required <= set(result)
        source = [d for d in yaml.safe_load_all(Path(REPO / result["file"]).read_text()) if d]
        obj = next(d for d in source if d["metadata"]["name"] == result["name"])
        patched = jsonpatch.apply_patch(obj, result["patch"])
        if result["class"] and result["allowed"] and result["kind"] != "Pod":
            assert patched != obj, result["name"]
        if not result["allowed"]:
            assert result["patch"] == []
            assert result["reasons"]


def test_check_reads_stdin_and_exits_zero_when_all_allowed() -> None:
    text = (EXAMPLES / "batch-inference.yaml").read_text()
    proc = run("check", "-f", "-", "-o", "json", stdin=text)
    assert proc.returncode == 0, proc.stdout
    [result] = json.loads(proc.stdout)["results"]
    assert (result["file"], result["class"], result["allowed"]) == (
        "<stdin>",
        "interruptible",
        True,
    )


def test_namespace_annotations_come_from_namespace_objects_in_the_input() -> None:
    alone = json.loads(run("check", "-f", "examples/sweep-job.yaml", "-o", "json").stdout)
    together = json.loads(
        run(
            "check", "-f", "examples/namespaces.yaml", "-f", "examples/sweep-job.yaml", "-o", "json"
        ).stdout
    )
    assert alone["results"][0]["class"] is None
    job = next(r for r in together["results"] if r["kind"] == "Job")
    assert (job["class"], job["source"]) == ("interruptible", "namespace default")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "kind: Pod\nmetadata: {name: [\n", "<stdin>:3: not valid YAML", id="broken-yaml"
        ),
        pytest.param(
            "- a\n- b\n", "a document must be a Kubernetes object, not a list", id="not-an-object"
        ),
        pytest.param("metadata: {name: x}\n", "apiVersion and kind missing", id="no-kind"),
        pytest.param(
            "apiVersion: v1\nkind: List\nitems:\n- 5\n- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n",
            "<stdin>:4: items[0]: a document must be a Kubernetes object, not the number 5",
            id="list-item-not-an-object",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelector: {a: b}\n  nodeSelector: {c: d}\n",
            "<stdin>:6: not valid YAML: duplicate key 'nodeSelector'",
            id="duplicate-key",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: &s {extra: *s}\n",
            "<stdin>:4: not usable YAML: the anchor at line 4 contains an alias to itself",
            id="recursive-alias",
        ),
        pytest.param(
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{m}'] * 10)}]\n"
                for m, n in zip("abcdef", "bcdefg", strict=True)
            ),
            "<stdin>:1: not usable YAML: aliases expand to more than 1,000,000 values",
            id="alias-bomb",
        ),
    ],
)
def test_bad_input_exits_two_with_a_located_error(text: str, message: str) -> None:
    proc = run("check", "-f", "-", stdin=text)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_lists_as_the_api_returns_them_are_expanded() -> None:
    pods = {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}, "spec": {}}
            for i in range(3)
        ],
    }
    proc = run("check", "-f", "-", "-o", "json", stdin=json.dumps(pods))
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)["results"]] == ["p0", "p1", "p2"]


def test_deeply_nested_json_and_undecodable_stdin_exit_two(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000)
    proc = run("check", "-f", str(tmp_path / "deep.json"))
    assert proc.returncode == 2
    assert f"{tmp_path / 'deep.json'}:1: not valid JSON: Expecting" in proc.stderr
    done = subprocess.run(
        [EXE, "check", "-f", "-"],
        input=b"kind: Pod\nname: \xff\xfe\n",
        capture_output=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2
    assert b"<stdin>:2: cannot read: not UTF-8 text (byte 16)" in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_pod_field_of_the_wrong_type_is_refused_with_the_field() -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    together.ai/workload: interruptible\n    together.ai/checkpoint-seconds: 120\nspec: {}\n"
    proc = run("check", "-f", "-", stdin=pod)
    assert proc.returncode == 1
    assert (
        "refused: metadata.annotations.together.ai/checkpoint-seconds must be a string, not the number 120: quote it"
        in proc.stdout
    )


def test_unreadable_path_and_invalid_policy_exit_two(tmp_path: Path) -> None:
    proc = run("check", "-f", str(tmp_path / "missing.yaml"))
    assert (proc.returncode, "cannot read" in proc.stderr) == (2, True)
    (tmp_path / "policy.yaml").write_text(
        (POLICIES / "default" / "policy.yaml").read_text().replace("mode: enforce", "mode: maybe")
    )
    proc = run("check", "-f", "examples/", "--policies", str(tmp_path))
    assert proc.returncode == 2
    assert f"error: invalid policy: {tmp_path / 'policy.yaml'}:10: spec.mode:" in proc.stderr


def test_warn_mode_policy_allows_everything(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        (POLICIES / "default" / "policy.yaml").read_text().replace("mode: enforce", "mode: warn")
    )
    proc = run("check", "-f", "examples/", "--policies", str(tmp_path))
    assert proc.returncode == 0
    assert "3 would be refused in enforce mode" in proc.stdout


def test_explain_names_the_source_and_the_reason_for_each_change() -> None:
    proc = run("explain", "-f", "examples/namespaces.yaml", "-f", "examples/ray-cluster.yaml")
    assert proc.returncode == 0
    head = proc.stdout.split("\n\n")[2]
    assert head.splitlines()[:2] == [
        "Pod sweeps/raycluster-sweep-head  (examples/ray-cluster.yaml:4)",
        "    class: coordinator, decided by rule ray-head (label ray.io/node-type=head)",
    ]
    assert (
        "change spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: requires together.ai/compute-class NotIn [preemptible]"
        in head
    )
    assert "warning: classification sources disagree" in head


def test_policy_test_command_runs_the_shipped_cases() -> None:
    proc = run("test", "policies")
    assert proc.returncode == 0, proc.stdout
    cases = sum(len(load_cases(d)) for d in policy_dirs(POLICIES))
    assert cases > 100
    assert proc.stdout.rstrip().splitlines()[-1] == f"{cases} passed, 0 failed"


def test_policy_test_command_fails_on_a_wrong_case(tmp_path: Path) -> None:
    shutil.copy(POLICIES / "default" / "policy.yaml", tmp_path / "policy.yaml")
    (tmp_path / "tests").mkdir()
    case = yaml.safe_load_all((POLICIES / "default" / "tests" / "rules.yaml").read_text())
    first = next(case)
    first["spec"]["expect"]["class"] = "serving"
    (tmp_path / "tests" / "case.yaml").write_text(yaml.safe_dump(first))
    proc = run("test", str(tmp_path))
    assert proc.returncode == 1
    assert "FAIL  rule-ray-head-makes-a-coordinator" in proc.stdout
    assert "class: expected 'serving', got 'coordinator' (rule ray-head)" in proc.stdout


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param(None, "no PlacementTest documents", id="no-cases"),
        pytest.param(
            {"expect": {"reasons": "too long"}},
            "spec.expect.reasons must be a list of strings, not a string",
            id="reasons-as-string",
        ),
        pytest.param(
            {"namespaceAnnotations": ["a"], "expect": {"allowed": True}},
            "spec.namespaceAnnotations must be a mapping of strings to strings, not a list",
            id="annotations-as-list",
        ),
        pytest.param(
            {"operation": "PATCH", "expect": {"allowed": True}},
            "spec.operation must be one of CREATE, UPDATE, DELETE, CONNECT",
            id="unknown-operation",
        ),
    ],
)
def test_policy_test_command_refuses_unusable_cases(
    tmp_path: Path, case: dict[str, Any] | None, message: str
) -> None:
    shutil.copy(POLICIES / "default" / "policy.yaml", tmp_path / "policy.yaml")
    (tmp_path / "tests").mkdir()
    docs = []
    if case is not None:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
        spec = {"object": pod, **case}
        docs.append(
            {
                "apiVersion": "preemptguard.together.ai/v1alpha1",
                "kind": "PlacementTest",
                "metadata": {"name": "c"},
                "spec": spec,
            }
        )
    (tmp_path / "tests" / "case.yaml").write_text(yaml.safe_dump_all(docs))
    proc = run("test", str(tmp_path))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_module_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "--version"], capture_output=True, text=True, check=False
    )
    expected = f"preemptguard, version 0.1.0 (engine {engine_build()})"
    assert proc.stdout.strip() == expected


def test_numbers_longer_than_python_reads_are_text_or_unread(tmp_path: Path) -> None:
    digits = "1" * 5000
    (tmp_path / "big.yaml").write_text(
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: a}}\nspec: {{terminationGracePeriodSeconds: {digits}}}\n"
    )
    proc = run("check", "-f", str(tmp_path / "big.yaml"))
    # Too large for Go's parsers: kubectl sends it as text, which the API server refuses.
    assert proc.returncode == 1, proc.stderr
    assert "terminationGracePeriodSeconds must be a whole number, not a string" in proc.stdout
    (tmp_path / "big.json").write_text(
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"x": '
        + digits
        + "}}"
    )
    proc = run("check", "-f", str(tmp_path / "big.json"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_key_written_twice_in_json_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "dup.json").write_text(
        '{"apiVersion": "v1", "kind": "Pod", "kind": "Pod", "metadata": {}}'
    )
    proc = run("check", "-f", str(tmp_path / "dup.json"))
    assert proc.returncode == 2
    assert f"{tmp_path / 'dup.json'}:1: not valid JSON: duplicate key 'kind'" in proc.stderr


def test_an_endless_input_is_cut_and_said_so() -> None:
    proc = run("check", "-f", "/dev/zero")
    assert proc.returncode == 2
    assert (
        "error: /dev/zero: more than 64 MiB: not read; split it into smaller files" in proc.stderr
    )
    assert "1 input error (see above): nothing was checked there" in proc.stdout


def test_lone_surrogates_are_printed_escaped(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a\\ud800b", "namespace": "x",'
        ' "annotations": {"together.ai/workload": "c\\udfff"}}, "spec": {"containers": []}}'
    )
    for command in (["check"], ["check", "-o", "json"], ["explain"]):
        proc = run(*command, "-f", str(tmp_path / "s.json"))
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "\\ud800" in proc.stdout


def test_the_text_summary_counts_input_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    proc = run("check", "-f", str(tmp_path / "bad.yaml"), "-f", "examples/untouched.yaml")
    assert proc.returncode == 2
    assert (
        proc.stdout.rstrip()
        .splitlines()[-1]
        .endswith("; 1 input error (see above): nothing was checked there")
    )


def test_check_leaves_no_cyclic_garbage_behind_an_object(tmp_path: Path) -> None:
    """check pauses the cyclic collector while it reads (webhook.loading.gcpause), trusting
    reference counting to free each object once it is reported: a cycle per object would
    keep every object read until the end (memory growing with the input, not flat)."""
    import gc
    import io

    from webhook.admission import lookups
    from webhook.cli.dryrun import judge_each
    from webhook.cli.report import JsonReport
    from webhook.loading.manifests import read, sources
    from webhook.loading.policies import builtin_policy

    text = "---\n".join(p.read_text() for p in sorted(EXAMPLES.glob("*.yaml")))
    path = tmp_path / "many.yaml"
    path.write_text("---\n".join([text] * 20))
    policy = builtin_policy()

    def run() -> int:
        report = JsonReport(io.StringIO())
        items = judge_each(
            read(sources([str(path)], sys.stdin)),
            policy,
            lookups.namespaces_from_objects([]),
            "default",
            priority_classes=lookups.offline_priority_classes(),
        )
        for item in items:
            report.add(item)
        return report.tally.objects

    run()  # first-use caches
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        judged = run()
        unreachable = gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert judged >= 300
    assert unreachable == 0


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_reader_that_stops_early_ends_check_quietly(tmp_path: Path, output: str) -> None:
    """``check ... | head``: the closed pipe ends the run with SIGPIPE's status, no error."""
    pod = (EXAMPLES / "finetune-pod.yaml").read_text()
    manifest = tmp_path / "many.yaml"
    manifest.write_text("---\n".join([pod] * 2000))
    with subprocess.Popen(
        [EXE, "check", "-f", str(manifest), "-o", output],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.read(100)  # the reader takes a little, then goes away
        proc.stdout.close()
        errors = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 128 + 13, errors  # SIGPIPE
    assert errors == ""


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        ("serve", "--reload-interval", "nan"),
        ("serve", "--reload-interval", "0"),
        ("serve", "--port", "70000"),
        ("serve", "--metrics-port", "-1"),
        ("serve", "--threads", "0"),
        ("serve", "--workers", "-1"),
        ("serve", "--graceful-timeout", "-5"),
        ("observe", "--audit-interval", "inf"),
        ("observe", "--metrics-port", "99999"),
        ("drill", "--wait", "nan"),
    ],
)
def test_numbers_out_of_range_are_usage_errors_before_anything_starts(
    command: str, option: str, value: str
) -> None:
    args = [command, option, value]
    if command == "drill":
        args.append("some-node")
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert f"Invalid value for '{option}'" in result.stderr
