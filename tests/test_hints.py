"""Warnings for the mistakes people make with the annotations, never silence."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine import evaluate
from webhook.engine.decision import Context
from webhook.engine.hints import is_near_miss
from webhook.loading.policies import builtin_policy

POLICY = builtin_policy()


def pod(
    annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


@pytest.mark.parametrize(
    ("key", "ours"),
    [
        ("Together.AI/Workload", "together.ai/workload"),
        ("together.ai/workloads", "together.ai/workload"),
        ("together.ai/wrokload", "together.ai/workload"),
        ("togetherai/workload", "together.ai/workload"),
        ("together.ai/checkpoint-second", "together.ai/checkpoint-seconds"),
        ("together.ai/checkpointseconds", "together.ai/checkpoint-seconds"),
        ("together.ai/default-workloads", "together.ai/default-workload"),
    ],
)
def test_near_misses(key: str, ours: str) -> None:
    assert is_near_miss(key, ours)


@pytest.mark.parametrize(
    "key",
    ["together.ai/workload-id", "example.com/workload", "workload", "together.ai/placement", ""],
)
def test_not_near_misses(key: str) -> None:
    assert not is_near_miss(key, "together.ai/workload")


def test_a_misspelt_pod_annotation_is_named_with_the_right_key() -> None:
    d = evaluate(pod({"Together.AI/Workload": "serving"}), POLICY, Context(namespace="team-a"))
    assert d.workload_class is None
    assert d.warnings == (
        "annotation on the pod 'Together.AI/Workload' is not together.ai/workload, so it is "
        "ignored: rename it to together.ai/workload",
    )


def test_a_class_written_as_a_label_is_named() -> None:
    d = evaluate(
        pod(labels={"together.ai/workload": "serving"}), POLICY, Context(namespace="team-a")
    )
    assert d.workload_class is None
    assert d.warnings == (
        "together.ai/workload is a label of the pod; preemptguard reads together.ai/workload "
        "from annotations only: move it to metadata.annotations",
    )


def test_the_namespace_default_on_a_pod_and_the_class_on_a_namespace() -> None:
    d = evaluate(
        pod({"together.ai/default-workload": "serving"}), POLICY, Context(namespace="team-a")
    )
    assert any("belongs on the namespace" in w for w in d.warnings)
    ctx = Context(
        namespace="team-a",
        namespace_annotations={
            "together.ai/workload": "serving",
            "together.ai/default-workloads": "x",
        },
        namespace_labels={"together.ai/default-workload": "serving"},
    )
    warnings = evaluate(pod(), POLICY, ctx).warnings
    assert any("together.ai/workload on namespace team-a is ignored" in w for w in warnings)
    assert any(
        "'together.ai/default-workloads' is not together.ai/default-workload" in w for w in warnings
    )
    assert any("is a label of namespace team-a" in w for w in warnings)


def test_the_class_on_a_cronjobs_job_template_does_not_reach_its_pods() -> None:
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": "evals",
            "namespace": "team-a",
            "annotations": {"together.ai/workload": "flexible"},
        },
        "spec": {
            "schedule": "0 * * * *",
            "jobTemplate": {
                "metadata": {"annotations": {"together.ai/workload": "flexible"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            },
        },
    }
    d = evaluate(cronjob, POLICY, Context(namespace="team-a"))
    target = "put it in spec.jobTemplate.spec.template.metadata.annotations"
    assert (
        f"together.ai/workload on the CronJob's own metadata does not reach its pods and is ignored: {target}"
        in d.warnings
    )
    assert (
        f"together.ai/workload on spec.jobTemplate.metadata does not reach its pods and is ignored: {target}"
        in d.warnings
    )


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ({"apiVersion": "example.com/v1", "kind": "Fleet", "metadata": {"name": "r"},
          "spec": {"head": {"template": {"spec": {"containers": []}}},
                   "groups": [{"template": {"spec": {"containers": []}}}]}},
         "spec.head.template, spec.groups[0].template"),
        ({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r"},
          "spec": {"template": {"spec": {"containers": []}}}}, "spec.template"),
        # A kind the policy lists, of another group: not judged as the listed one.
        ({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "d"},
          "spec": {"template": {"spec": {"containers": []}}}}, "spec.template"),
        ({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
          "template": {"spec": {"containers": []}}}, "template"),
    ],
)  # fmt: skip
def test_an_unknown_kind_with_pod_templates_is_not_said_to_hold_no_pods(
    obj: dict[str, Any], where: str
) -> None:
    d = evaluate(obj, POLICY, Context(namespace="team-a"))
    assert (
        d.skipped
        == "its kind carries pod templates but is not listed in the policy's workloadKinds"
    )
    (warning,) = d.warnings
    assert f"is not checked at apply time, but it carries pod templates ({where})" in warning
    assert "its pods are checked by the webhook when they are created" in warning
    assert "list it under spec.workloadKinds in the policy: {group: " in warning


def test_a_kind_without_templates_holds_no_pods() -> None:
    d = evaluate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}},
        POLICY,
        Context(),
    )
    assert d.skipped == "kind 'ConfigMap' holds no pods"


def test_thousands_of_near_misses_give_a_few_warnings() -> None:
    annotations = {f"together.ai/workloa{i}": "x" for i in range(10_000)}
    d = evaluate(pod(annotations), POLICY, Context(namespace="team-a"))
    assert 0 < len(d.warnings) <= 5
