"""The output formats for CI and GitOps: `check -o manifests`, `explain -o json`, and
`test -o json|junit`, run as users run them (the installed console script)."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import EXAMPLES, POLICIES, REPO
from tests.test_cli import EXE, run
from webhook.loading.manifests import load_manifests

FIXTURES = REPO / "tests" / "fixtures" / "admission-reviews"
REFUSAL = re.compile(r"^# refused: (\S+) (\S+) \(([^)]*)\): (.+)$")


def documents(text: str) -> list[dict[str, Any]]:
    """The objects of multi-document YAML, read as kubectl reads them."""
    manifests = load_manifests(["-"], stdin=io.StringIO(text))
    assert manifests.errors == []
    return [d.obj for d in manifests.documents]


def source_objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# --- check -o manifests ---------------------------------------------------------------------


def test_manifests_are_the_objects_with_the_mutating_patch_and_without_the_refused() -> None:
    proc = run("check", "-f", "examples/", "-o", "manifests")
    checked = json.loads(run("check", "-f", "examples/", "-o", "json").stdout)["results"]
    assert proc.returncode == 1, proc.stderr
    refused = [REFUSAL.match(line) for line in proc.stderr.splitlines()]
    assert all(refused), proc.stderr
    refused_names = {m.group(2).split("/")[-1] for m in refused if m}
    assert refused_names == {r["name"] for r in checked if not r["allowed"]}
    expected = []
    seen = set()
    for r in checked:
        key = (r["file"], r["line"])
        if key in seen or r["name"] in refused_names:
            continue
        seen.add(key)
        obj = next(
            o for o in source_objects(REPO / r["file"]) if o["metadata"]["name"] == r["name"]
        )
        # Pods are mutated; workloads are stored with their own changes only (a Job's
        # podFailurePolicy), whatever their templates get.
        if r["kind"] != "Pod":
            prefix = (r["template"] or "").replace(".", "/")
            r["patch"] = [op for op in r["patch"] if not op["path"].startswith(f"/{prefix}/")]
        expected.append(jsonpatch.apply_patch(obj, r["patch"]))
    stored = documents(proc.stdout)
    assert stored == expected
    # The examples' pods carry no placement: the stored ones got it from the mutating hook.
    placed = [o for o in stored if "together.ai/placement" in o["metadata"].get("annotations", {})]
    assert placed
    # An interruptible Job whose pods use restartPolicy Never ignores reclaims.
    (sweep,) = [o for o in stored if o["metadata"]["name"] == "lr-sweep"]
    assert sweep["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == (
        "DisruptionTarget"
    )
    assert {o["kind"] for o in placed} == {"Pod"}


def test_stdout_and_stderr_together_are_still_yaml() -> None:
    proc = subprocess.run(
        [EXE, "check", "-f", "examples/coordinator.yaml", "-o", "manifests"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout.startswith(
        "# refused: Pod research/train-coordinator (examples/coordinator.yaml:3): class coordinator must run on standard nodes"
    )
    [pod] = documents(proc.stdout)
    assert pod["metadata"]["name"] == "train-coordinator-fixed"
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] == "NotIn"


def test_the_stored_objects_are_stored_again_unchanged() -> None:
    first = run("check", "-f", "examples/", "-o", "manifests")
    again = run("check", "-f", "-", "-o", "manifests", stdin=first.stdout)
    assert again.returncode == 0, again.stderr
    assert (again.stdout, again.stderr) == (first.stdout, "")


def test_strings_kubectl_would_read_as_other_values_stay_strings() -> None:
    tricky = [
        "y",
        "N",
        "on",
        "off",
        "0o17",
        "1e2",
        "0x1F",
        "1_000",
        "2024-01-01",
        "1:30",
        "=",
        "~",
        "",
    ]
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "x", "labels": {"enabled": "y"}},
        "data": {f"k{i}": value for i, value in enumerate(tricky)}
        | {"script": "#!/bin/sh\necho hi\n"},
    }
    proc = run("check", "-f", "-", "-o", "manifests", stdin=json.dumps(config))
    assert proc.returncode == 0, proc.stderr
    assert documents(proc.stdout) == [config]
    assert yaml.safe_load(proc.stdout.removeprefix("---\n")) == config
    assert "script: |\n    #!/bin/sh\n    echo hi\n" in proc.stdout


def test_an_admission_review_prints_its_object_as_admitted() -> None:
    path = FIXTURES / "create-pod-sweep-mutate.json"
    proc = run("check", "-f", str(path), "-o", "manifests")
    assert proc.returncode == 0, proc.stderr
    request = json.loads(path.read_text())["request"]
    answer = json.loads(run("check", "-f", str(path), "-o", "json").stdout)["results"][0]
    patch = json.loads(base64.b64decode(answer["reviews"]["mutate"]["response"]["patch"]))
    assert documents(proc.stdout) == [jsonpatch.apply_patch(request["object"], patch)]


def test_a_review_without_an_object_is_bad_input() -> None:
    proc = run(
        "check", "-f", str(FIXTURES / "delete-pod-coordinator-0-mutate.json"), "-o", "manifests"
    )
    assert proc.returncode == 2
    assert "carries no object to store (DELETE)" in proc.stderr
    assert proc.stdout == ""


def test_warn_mode_stores_what_enforce_would_refuse(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        (POLICIES / "default" / "policy.yaml").read_text().replace("mode: enforce", "mode: warn")
    )
    args = ("check", "-f", "examples/coordinator.yaml", "-o", "manifests")
    proc = run(*args, "--policies", str(tmp_path))
    assert (proc.returncode, proc.stderr) == (0, "")
    names = [o["metadata"]["name"] for o in documents(proc.stdout)]
    assert names == ["train-coordinator", "train-coordinator-fixed"]


def test_input_errors_exit_two_and_the_other_objects_are_still_printed(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    proc = run(
        "check",
        "-f",
        str(tmp_path / "bad.yaml"),
        "-f",
        "examples/batch-inference.yaml",
        "-o",
        "manifests",
    )
    assert proc.returncode == 2
    assert f"error: {tmp_path / 'bad.yaml'}:2: not valid YAML" in proc.stderr
    assert [o["metadata"]["name"] for o in documents(proc.stdout)] == ["batch-inference"]


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        pytest.param(
            "deep.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata: "
            + "[" * 400
            + "]" * 400
            + "\n",
            "nested too deeply to be written as YAML",
            id="deeper-than-yaml-is-written",
        ),
        pytest.param(
            "deep.json",
            '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"}, "data": '
            + "[" * 300
            + "]" * 300
            + "}",
            "it holds a value nested too deeply or a number too long to be read",
            id="deeper-than-json-is-read",
        ),
    ],
)
def test_an_object_that_cannot_be_printed_as_given_is_named(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    (tmp_path / name).write_text(text)
    proc = run(
        "check",
        "-f",
        str(tmp_path / name),
        "-f",
        "examples/batch-inference.yaml",
        "-o",
        "manifests",
    )
    assert proc.returncode == 2
    assert (
        f"error: {tmp_path / name}:1: ConfigMap default/deep: {problem}: not printed" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert [o["metadata"]["name"] for o in documents(proc.stdout)] == ["batch-inference"]


def test_lone_surrogates_are_stored_as_the_replacement_character(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"a": "x\\ud800y"}}'
    )
    proc = run("check", "-f", str(tmp_path / "s.json"), "-o", "manifests")
    assert proc.returncode == 0, proc.stderr
    assert documents(proc.stdout)[0]["data"] == {"a": "x\ufffdy"}


# --- explain -o json --------------------------------------------------------------------------


def test_explain_json_is_the_check_document() -> None:
    args = ("-f", "examples/namespaces.yaml", "-f", "examples/ray-cluster.yaml", "-o", "json")
    explained, checked = run("explain", *args), run("check", *args)
    assert explained.returncode == checked.returncode == 0
    doc = json.loads(explained.stdout)
    assert doc == json.loads(checked.stdout)
    head = next(r for r in doc["results"] if r["name"] == "raycluster-sweep-head")
    assert (head["class"], head["source"]) == ("coordinator", "rule ray-head")
    assert head["sourceDetail"] == "label ray.io/node-type=head"


def test_explain_text_stays_the_default() -> None:
    args = ("-f", "examples/coordinator.yaml")
    assert run("explain", *args).stdout == run("explain", *args, "-o", "text").stdout
    assert run("explain", *args).stdout.startswith("Pod research/train-coordinator  (examples/")


# --- test -o json / junit ---------------------------------------------------------------------


def case(name: str, expect: dict[str, Any], *, label: str = "") -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "sweeps",
            "annotations": {"together.ai/workload": "interruptible"},
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    return {
        "apiVersion": "preemptguard.together.ai/v1alpha1",
        "kind": "PlacementTest",
        "metadata": {"name": name + label},
        "spec": {"object": pod, "expect": expect},
    }


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A policy with two test files: two cases that pass, then one that fails."""
    shutil.copy(POLICIES / "default" / "policy.yaml", tmp_path / "policy.yaml")
    (tmp_path / "tests").mkdir()
    passing = [
        case("is-interruptible", {"class": "interruptible"}),
        case("is-allowed", {"allowed": True}),
    ]
    (tmp_path / "tests" / "a.yaml").write_text(yaml.safe_dump_all(passing))
    failing = case("is-flexible", {"class": "flexible", "allowed": True}, label="-\x1b[31m")
    (tmp_path / "tests" / "b.yaml").write_text(yaml.safe_dump(failing))
    return tmp_path


def test_test_json_has_every_case_with_what_it_expected_and_got(policy_dir: Path) -> None:
    proc = run("test", str(policy_dir), "-o", "json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"] == {"cases": 3, "passed": 2, "failed": 1}
    first, _, failed = doc["cases"]
    assert first == {
        "policy": policy_dir.as_posix(),
        "file": f"{policy_dir}/tests/a.yaml",
        "line": 1,
        "name": "is-interruptible",
        "passed": True,
        "message": None,
        "failures": [],
        "expected": {"class": "interruptible"},
        "actual": first["actual"],
    }
    assert failed["name"] == "is-flexible-\x1b[31m"
    assert failed["passed"] is False
    assert failed["message"] == "class: expected 'flexible', got 'interruptible' (annotation)"
    assert failed["expected"] == {"class": "flexible", "allowed": True}
    actual = failed["actual"]
    assert (actual["class"], actual["allowed"], actual["refused"], actual["unchanged"]) == (
        "interruptible",
        True,
        False,
        False,
    )
    assert "toleration-added" in actual["codes"]
    pod = case("x", {})["spec"]["object"]
    placed = jsonpatch.apply_patch(pod, actual["patch"])
    assert placed["metadata"]["annotations"]["together.ai/placement"] == "interruptible"


def test_test_json_totals_are_the_text_totals() -> None:
    text = run("test", "policies/default")
    summary = json.loads(run("test", "policies/default", "-o", "json").stdout)["summary"]
    assert (
        text.stdout.rstrip().splitlines()[-1]
        == f"{summary['passed']} passed, {summary['failed']} failed"
    )


def test_test_junit_is_a_suite_per_file_and_a_testcase_per_case(policy_dir: Path) -> None:
    proc = subprocess.run(
        [EXE, "test", str(policy_dir), "-o", "junit"], capture_output=True, cwd=REPO, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(proc.stdout)  # well-formed, the escape code in a name included
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")
    suites = root.findall("testsuite")
    assert [(s.get("name"), s.get("tests"), s.get("failures")) for s in suites] == [
        (f"{policy_dir}/tests/a.yaml", "2", "0"),
        (f"{policy_dir}/tests/b.yaml", "1", "1"),
    ]
    cases = [c for s in suites for c in s.findall("testcase")]
    assert [c.get("name") for c in cases] == [
        "is-interruptible",
        "is-allowed",
        "is-flexible-\\x1b[31m",
    ]
    assert cases[0].get("classname", "").endswith(".tests.a")
    lines = [
        c["line"] for c in json.loads(run("test", str(policy_dir), "-o", "json").stdout)["cases"]
    ]
    assert [c.get("line") for c in cases] == [str(line) for line in lines]
    assert all(float(c.get("time", "x")) >= 0 for c in cases)
    assert [c.find("failure") is None for c in cases] == [True, True, False]
    failure = cases[2].find("failure")
    assert failure is not None
    assert failure.get("message") == "class: expected 'flexible', got 'interruptible' (annotation)"
    assert failure.text is not None
    assert "class: expected 'flexible'" in failure.text


def test_unusable_cases_still_exit_two_with_nothing_on_stdout(tmp_path: Path) -> None:
    shutil.copy(POLICIES / "default" / "policy.yaml", tmp_path / "policy.yaml")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "c.yaml").write_text(yaml.safe_dump(case("c", {"reasons": "x"})))
    for output in ("json", "junit"):
        proc = run("test", str(tmp_path), "-o", output)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert "spec.expect.reasons must be a list of strings" in proc.stderr


def test_an_unknown_format_is_a_usage_error() -> None:
    proc = run("test", "policies", "-o", "xml")
    assert proc.returncode == 2
    assert (
        "Invalid value for '-o' / '--output': 'xml' is not one of 'text', 'json', 'junit'"
        in proc.stderr
    )
    assert run("explain", "-f", str(EXAMPLES), "-o", "manifests").returncode == 2
