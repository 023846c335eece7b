"""Policy files: the shipped ones load, and bad ones are refused with file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import POLICIES, REPO
from webhook.engine.policy import Mode, Placement
from webhook.errors import PolicyError
from webhook.loading.policies import builtin_policy, load_policy, policy_schema

GOOD = (POLICIES / "default" / "policy.yaml").read_text()


def test_builtin_policy_is_the_shipped_default() -> None:
    assert builtin_policy() == load_policy(POLICIES / "default")


def test_default_policy_has_the_documented_classes() -> None:
    policy = builtin_policy()
    assert {n: c.placement for n, c in policy.classes.items()} == {
        "interruptible": Placement.PREEMPTIBLE,
        "flexible": Placement.PREFER_PREEMPTIBLE,
        "coordinator": Placement.STANDARD,
        "login": Placement.STANDARD,
        "serving": Placement.STANDARD,
    }
    assert (policy.mode, policy.max_grace_seconds, policy.checkpoint_margin_seconds) == (
        Mode.ENFORCE,
        300,
        30,
    )
    assert str(policy.taint) == "together.ai/compute-class=preemptible:NoSchedule"
    assert policy.default_class is None
    assert {"kube-system", "kube-node-lease", "preemptguard-system"} <= set(
        policy.excluded_namespaces
    )


def test_schema_is_a_valid_json_schema_and_accepts_the_default() -> None:
    schema = policy_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(GOOD), schema)
    on_disk = json.loads((REPO / "webhook" / "data" / "placementpolicy.schema.json").read_text())
    assert on_disk == schema


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "policy.yaml").write_text(text)
    return tmp_path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("old", "new", "field", "message", "needle"),
    [
        pytest.param(
            "mode: enforce",
            "mode: strict",
            "spec.mode",
            "'strict' is not one of ['enforce', 'warn']",
            "mode: strict",
            id="bad-mode",
        ),
        pytest.param(
            "      class: coordinator\n      match:\n        podSelector:\n          matchLabels:\n            ray.io",
            "      class: boss\n      match:\n        podSelector:\n          matchLabels:\n            ray.io",
            "spec.rules[0].class",
            "unknown class 'boss'; declared classes: coordinator, flexible, interruptible, login, serving",
            "class: boss",
            id="rule-with-unknown-class",
        ),
        pytest.param(
            "    maxSeconds: 300",
            "    maxSeconds: -1",
            "spec.gracePeriod.maxSeconds",
            "-1 is less than the minimum of 1",
            "maxSeconds: -1",
            id="negative-grace",
        ),
        pytest.param(
            "    - name: login\n",
            "    - name: serving\n",
            "spec.classes[4].name",
            "duplicate class 'serving'",
            "- name: serving\n      placement: standard\n      description: User",
            id="duplicate-class",
        ),
        pytest.param(
            "  preferredAffinityWeight: 100",
            "  preferedAffinityWeight: 100",
            "spec.preferedAffinityWeight",
            "Additional properties are not allowed ('preferedAffinityWeight' was unexpected)",
            "preferedAffinityWeight",
            id="misspelt-field",
        ),
        pytest.param(
            "defaultClass: null",
            "defaultClass: cheap",
            "spec.defaultClass",
            "unknown class 'cheap'",
            "defaultClass: cheap",
            id="unknown-default",
        ),
        pytest.param(
            "              operator: In\n              values: [launcher, master]",
            "              operator: In",
            "spec.rules[1].match.podSelector.matchExpressions[0]",
            "operator In needs at least one value",
            "- key: training.kubeflow.org/job-role",
            id="in-without-values",
        ),
        pytest.param(
            "    key: together.ai/compute-class\n    preemptibleValue",
            "    key: not a label key\n    preemptibleValue",
            "spec.nodeLabel.key",
            "'not a label key' is not a valid name here",
            "key: not a label key",
            id="bad-label-key",
        ),
        pytest.param(
            "    checkpointMarginSeconds: 30",
            "    checkpointMarginSeconds: 300",
            "spec.gracePeriod.checkpointMarginSeconds",
            "a margin of 300 s leaves no time for a checkpoint within the 300 s maximum grace period",
            "checkpointMarginSeconds: 300",
            id="margin-as-long-as-the-grace-period",
        ),
        pytest.param(
            "    - name: login\n",
            "    - name: none\n",
            "spec.classes[3].name",
            "'none' is a word preemptguard's output uses for itself",
            "- name: none",
            id="reserved-class-name",
        ),
        pytest.param(
            "defaultClass: null",
            "defaultClass: unclassified",
            "spec.defaultClass",
            "'unclassified' is a word preemptguard's output uses for itself",
            "defaultClass: unclassified",
            id="reserved-default-class",
        ),
        pytest.param(
            "  defaultClass: null",
            "  defaultClass: null\n  trustedRequesters:\n    daemonSetControllers: system:kube-controller-manager",
            "spec.trustedRequesters.daemonSetControllers",
            "is not of type 'array'",
            "daemonSetControllers: system:kube-controller-manager",
            id="trusted-requesters-not-a-list",
        ),
    ],
)
def test_invalid_policy_names_file_line_and_field(
    tmp_path: Path, old: str, new: str, field: str, message: str, needle: str
) -> None:
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    directory = write(tmp_path, text)
    with pytest.raises(PolicyError) as caught:
        load_policy(directory)
    err = caught.value
    assert (err.source, err.field) == (str(directory / "policy.yaml"), field)
    assert message in err.message
    first_line = needle.split("\n")[0]
    expected_line = (
        line_of(text, first_line)
        if "\n" not in needle
        else text[: text.index(needle)].count("\n") + 1
    )
    assert err.line == expected_line
    assert str(err).startswith(f"{directory / 'policy.yaml'}:{expected_line}: {field}: ")


@pytest.mark.parametrize(
    ("new", "message", "needle"),
    [
        pytest.param("  mode: warn", "duplicate key 'mode'", "  mode: warn", id="duplicate-key"),
        pytest.param(
            "  ? [a, b]\n  : 1", "a key must be a plain value", "  ? [a, b]", id="list-as-key"
        ),
        pytest.param(
            "  extra: &loop {again: *loop}",
            "the anchor at line {line} contains an alias to itself",
            "  extra: &loop",
            id="recursive-alias",
        ),
    ],
)
def test_unusable_yaml_is_refused_with_its_line(
    tmp_path: Path, new: str, message: str, needle: str
) -> None:
    anchor = "  preferredAffinityWeight: 100"
    text = GOOD.replace(anchor, f"{anchor}\n{new}", 1)
    directory = write(tmp_path, text)
    with pytest.raises(PolicyError) as caught:
        load_policy(directory)
    line = line_of(text, needle)
    assert caught.value.line == line
    assert f"not valid YAML: {message.format(line=line)}" in caught.value.message


def test_deeply_nested_yaml_is_refused(tmp_path: Path) -> None:
    directory = write(tmp_path, GOOD + "extra: " + "[" * 5_000 + "\n")
    with pytest.raises(PolicyError, match="nested too deeply"):
        load_policy(directory)


def test_broken_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    directory = write(tmp_path, GOOD.replace("  mode: enforce", "  mode: [enforce", 1))
    with pytest.raises(PolicyError, match=r"policy.yaml:\d+: \(document\): not valid YAML"):
        load_policy(directory)


def test_a_folder_must_hold_exactly_one_policy(tmp_path: Path) -> None:
    with pytest.raises(
        PolicyError, match="expected exactly one PlacementPolicy document, found none"
    ):
        load_policy(tmp_path)
    write(tmp_path, GOOD)
    (tmp_path / "second.yaml").write_text(GOOD)
    with pytest.raises(PolicyError, match=r"found .*policy\.yaml, .*second\.yaml"):
        load_policy(tmp_path)


def test_taint_can_be_switched_off(tmp_path: Path) -> None:
    start = GOOD.index("  preemptibleTaint:")
    end = GOOD.index("  gracePeriod:")
    policy = load_policy(write(tmp_path, GOOD[:start] + "  preemptibleTaint: null\n" + GOOD[end:]))
    assert policy.taint is None


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="no such policy file or directory"):
        load_policy(tmp_path / "nope")


def test_the_reserved_class_names_are_the_schemas() -> None:
    from webhook.engine.policy import RESERVED_CLASS_NAMES
    from webhook.loading.policies import policy_schema

    assert set(policy_schema()["$defs"]["className"]["not"]["enum"]) == RESERVED_CLASS_NAMES
