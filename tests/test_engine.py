"""The engine on the shipped example manifests and on odd pod specs, with exact outcomes."""

from __future__ import annotations

import copy
import dataclasses
import io
from typing import Any, cast

import pytest

from tests.conftest import EXAMPLES
from webhook.cli.dryrun import check
from webhook.engine.decision import Context
from webhook.engine.evaluation import evaluate
from webhook.engine.jobs import disruption_rule
from webhook.engine.patch import apply_patch, make_patch
from webhook.engine.policy import Mode, Policy
from webhook.loading.manifests import load_manifests

KEY = "together.ai/compute-class"
TOLERATION = {"key": KEY, "operator": "Equal", "value": "preemptible", "effect": "NoSchedule"}


def expr(op: str) -> dict[str, Any]:
    return {"key": KEY, "operator": op, "values": ["preemptible"]}


def required(op: str) -> dict[str, Any]:
    term = {"matchExpressions": [expr(op)]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def with_terms(*terms: dict[str, Any]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


GPU_TERM = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
NAME_FIELD = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}

PREFERRED = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [expr("In")]}}
        ]
    }
}


def record(prefix: str, cls: str, *, whole: bool = False) -> dict[str, Any]:
    if whole:
        return {
            "op": "add",
            "path": f"{prefix}/metadata/annotations",
            "value": {"together.ai/placement": cls},
        }
    return {
        "op": "add",
        "path": f"{prefix}/metadata/annotations/together.ai~1placement",
        "value": cls,
    }


def add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def batch(prefix: str, *, pod: bool) -> list[dict[str, Any]]:
    """What a batch class's pod (all three) or template (the name) gets: preemptguard-batch."""
    ops = [add(f"{prefix}/spec/priorityClassName", "preemptguard-batch")]
    if pod:
        ops += [
            add(f"{prefix}/spec/priority", -100),
            add(f"{prefix}/spec/preemptionPolicy", "Never"),
        ]
    return ops


T = "/spec/template"
CJ = "/spec/jobTemplate/spec/template"

EXPECTED: dict[str, tuple[str | None, bool, list[dict[str, Any]]]] = {
    "batch-inference": (
        "interruptible",
        True,
        [
            record(T, "interruptible"),
            add(f"{T}/spec/affinity", required("In")),
            add(f"{T}/spec/tolerations", [TOLERATION]),
            *batch(T, pod=False),
        ],
    ),
    "train-coordinator": ("coordinator", False, []),
    "train-coordinator-fixed": (
        "coordinator",
        True,
        [record("", "coordinator"), add("/spec/affinity", required("NotIn"))],
    ),
    "nightly-evals": (
        "flexible",
        True,
        [
            record(CJ, "flexible"),
            add(f"{CJ}/spec/affinity", PREFERRED),
            add(f"{CJ}/spec/tolerations", [TOLERATION]),
            *batch(CJ, pod=False),
        ],
    ),
    "finetune-321b": ("interruptible", False, []),
    "finetune-8b": (
        "interruptible",
        True,
        [
            record("", "interruptible"),
            add("/spec/affinity", required("In")),
            add("/spec/tolerations", [TOLERATION]),
            add("/spec/terminationGracePeriodSeconds", 150),
            *batch("", pod=True),
        ],
    ),
    "login": (
        "login",
        True,
        [record(T, "login", whole=True), add(f"{T}/spec/affinity", required("NotIn"))],
    ),
    "sweeps": (None, True, []),
    "inference": (None, True, []),
    "raycluster-sweep-head": (
        "coordinator",
        True,
        [record("", "coordinator", whole=True), add("/spec/affinity", required("NotIn"))],
    ),
    "raycluster-sweep-worker-gpu-x7k2p": (
        "interruptible",
        True,
        [
            record("", "interruptible", whole=True),
            add("/spec/affinity", required("In")),
            add("/spec/tolerations", [TOLERATION]),
            *batch("", pod=True),
        ],
    ),
    "chat-api": (
        "serving",
        True,
        [
            record(T, "serving"),
            add(
                f"{T}/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/1",
                expr("NotIn"),
            ),
        ],
    ),
    "chat-api-canary": ("serving", False, []),
    "lr-sweep": (
        "interruptible",
        True,
        [
            record(T, "interruptible"),
            add(f"{T}/spec/affinity", required("In")),
            add(f"{T}/spec/tolerations", [TOLERATION]),
            {"op": "replace", "path": f"{T}/spec/terminationGracePeriodSeconds", "value": 300},
            *batch(T, pod=False),
            add("/spec/podFailurePolicy", {"rules": [disruption_rule()]}),
            add("/spec/podReplacementPolicy", "Failed"),
        ],
    ),
    "dcgm-exporter": (None, True, []),
    "debug-shell": (None, True, []),
}


@pytest.fixture(scope="module")
def example_results(policy: Policy) -> dict[str, Any]:
    manifests = load_manifests([str(EXAMPLES)], io.StringIO())
    assert manifests.errors == []
    return {r.decision.name: r for r in check(manifests, policy, default_namespace="default")}


def test_examples_cover_every_object(example_results: dict[str, Any]) -> None:
    assert sorted(example_results) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_outcome(example_results: dict[str, Any], name: str) -> None:
    cls, allowed, patch = EXPECTED[name]
    result = example_results[name]
    assert (result.decision.workload_class, result.decision.allowed) == (cls, allowed)
    assert sorted(result.patch, key=lambda op: op["path"]) == sorted(
        patch, key=lambda op: op["path"]
    )
    if not allowed:
        assert result.decision.violations
        assert all(":" in v for v in result.decision.violations)


def pod(spec: Any, annotations: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    metadata = {
        "name": "p",
        "namespace": "team-a",
        "annotations": annotations or {"together.ai/workload": "interruptible"},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**metadata, **meta}, "spec": spec}


CTX = Context(namespace="team-a")
C: list[Any] = [{"name": "c", "image": "busybox"}]


@pytest.mark.parametrize(
    ("spec", "expected_spec"),
    [
        pytest.param(
            {"containers": C, "affinity": None, "tolerations": None},
            {"containers": C, "affinity": required("In"), "tolerations": [TOLERATION]},
            id="null-affinity-and-tolerations",
        ),
        pytest.param(
            {
                "containers": C,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                    }
                },
            },
            {"containers": C, "affinity": required("In"), "tolerations": [TOLERATION]},
            id="empty-term-list",
        ),
        pytest.param(
            {"containers": C, "affinity": with_terms(GPU_TERM, {}, {"matchExpressions": []})},
            {
                "containers": C,
                "affinity": with_terms(
                    {"matchExpressions": [*GPU_TERM["matchExpressions"], expr("In")]},
                    {},
                    {"matchExpressions": []},
                ),
                "tolerations": [TOLERATION],
            },
            id="empty-terms-match-nothing-and-stay-so",
        ),
        pytest.param(
            {"containers": C, "affinity": with_terms({"matchExpressions": None, **NAME_FIELD})},
            {
                "containers": C,
                "affinity": with_terms({"matchExpressions": [expr("In")], **NAME_FIELD}),
                "tolerations": [TOLERATION],
            },
            id="null-expressions-beside-match-fields",
        ),
        pytest.param(
            {"containers": C, "tolerations": [{"operator": "Exists"}]},
            {"containers": C, "tolerations": [{"operator": "Exists"}], "affinity": required("In")},
            id="exists-with-empty-key-already-tolerates",
        ),
        pytest.param(
            {
                "containers": C,
                "tolerations": [{"key": KEY, "operator": "Exists", "effect": "NoExecute"}],
            },
            {
                "containers": C,
                "tolerations": [
                    {"key": KEY, "operator": "Exists", "effect": "NoExecute"},
                    TOLERATION,
                ],
                "affinity": required("In"),
            },
            id="toleration-for-another-effect-does-not-count",
        ),
        pytest.param(
            {"containers": C, "affinity": {"podAntiAffinity": {"x": 1}}},
            {
                "containers": C,
                "affinity": {"podAntiAffinity": {"x": 1}, **required("In")},
                "tolerations": [TOLERATION],
            },
            id="sibling-affinity-kept",
        ),
        pytest.param(
            {
                "containers": C,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [expr("In")]}]
                        }
                    }
                },
            },
            {"containers": C, "affinity": required("In"), "tolerations": [TOLERATION]},
            id="requirement-already-present",
        ),
        pytest.param(
            {
                "containers": C,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": KEY, "operator": "Exists"},
                                        {"key": KEY, "operator": "NotIn", "values": ["standard"]},
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
            {
                "containers": C,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": KEY, "operator": "Exists"},
                                        {"key": KEY, "operator": "NotIn", "values": ["standard"]},
                                        expr("In"),
                                    ]
                                }
                            ]
                        }
                    }
                },
                "tolerations": [TOLERATION],
            },
            id="term-admitting-unnamed-values-is-narrowed",
        ),
    ],
)
def test_odd_but_valid_pod_specs(
    policy: Policy, spec: dict[str, Any], expected_spec: dict[str, Any]
) -> None:
    decision = evaluate(pod(spec), policy, CTX)
    assert decision.allowed, decision.violations
    assert decision.mutated["spec"] == expected_spec


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        pytest.param(pod(None), "Pod has no spec mapping", id="null-spec"),
        pytest.param(pod("text"), "Pod has no spec mapping", id="string-spec"),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
            "Deployment has no spec.template.spec mapping",
            id="deployment-without-template",
        ),
        pytest.param(
            pod({"containers": C, "terminationGracePeriodSeconds": "600"}),
            "spec.terminationGracePeriodSeconds must be a whole number, not a string",
            id="grace-as-string",
        ),
        pytest.param(
            pod({"containers": C, "tolerations": {"key": KEY, "operator": "Exists"}}),
            "spec.tolerations must be a list, not a mapping",
            id="tolerations-as-mapping",
        ),
        pytest.param(
            pod({"containers": C, "nodeSelector": [KEY]}),
            "spec.nodeSelector must be a mapping, not a list",
            id="node-selector-as-list",
        ),
        pytest.param(
            pod({"containers": C, "affinity": []}),
            "spec.affinity must be a mapping, not a list",
            id="affinity-as-list",
        ),
        pytest.param(
            pod(
                {"containers": C},
                # a number where annotations hold strings: the mistake under test
                cast(
                    "dict[str, str]",
                    {
                        "together.ai/workload": "interruptible",
                        "together.ai/checkpoint-seconds": 120,
                    },
                ),
            ),
            "metadata.annotations.together.ai/checkpoint-seconds must be a string, not the number 120: quote it",
            id="unquoted-annotation",
        ),
        pytest.param(
            pod({"containers": C}, labels={"version": True}),
            "metadata.labels.version must be a string, not the boolean true: quote it",
            id="boolean-label",
        ),
        pytest.param(
            pod(
                {
                    "containers": C,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchExpressions": expr("In")}]
                            }
                        }
                    },
                }
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions must be a list, not a mapping",
            id="expressions-as-mapping",
        ),
        pytest.param(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"template": {"spec": {"containers": C, "tolerations": "all"}}},
            },
            "spec.template.spec.tolerations must be a list, not a string",
            id="template-field-path",
        ),
        pytest.param(
            pod({"containers": C, "terminationGracePeriodSeconds": -5}),
            "non-negative",
            id="negative-grace",
        ),
    ],
)
def test_malformed_objects_are_refused_with_a_reason(
    policy: Policy, obj: dict[str, Any], reason: str
) -> None:
    decision = evaluate(obj, policy, CTX)
    assert not decision.allowed
    assert any(reason in v for v in decision.violations), decision.violations
    assert decision.mutated == obj


def test_input_is_never_modified(policy: Policy) -> None:
    obj = pod({"containers": C, "terminationGracePeriodSeconds": 900})
    before = copy.deepcopy(obj)
    decision = evaluate(obj, policy, CTX)
    assert obj == before
    assert decision.mutated["spec"]["terminationGracePeriodSeconds"] == 300


def test_warn_mode_allows_and_reports(policy: Policy) -> None:
    warn = dataclasses.replace(policy, mode=Mode.WARN)
    obj = pod({"containers": C, "nodeSelector": {KEY: "standard"}})
    decision = evaluate(obj, warn, CTX)
    assert decision.allowed
    assert decision.enforce_refuses
    assert decision.mutated == obj
    assert any(
        w.startswith("would be refused in enforce mode: class interruptible")
        for w in decision.warnings
    )


def test_without_a_taint_no_toleration_is_added(policy: Policy) -> None:
    untainted = dataclasses.replace(policy, taint=None)
    decision = evaluate(pod({"containers": C}), untainted, CTX)
    assert "tolerations" not in decision.mutated["spec"]
    assert decision.mutated["spec"]["affinity"] == required("In")


def test_a_list_is_checked_item_by_item(policy: Policy) -> None:
    text = """
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Pod, metadata: {name: a, annotations: {together.ai/workload: serving}}, spec: {containers: [{name: c, image: x}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: b, annotations: {together.ai/workload: nope}}, spec: {containers: [{name: c, image: x}]}}
"""
    manifests = load_manifests(["-"], io.StringIO(text))
    results = check(manifests, policy, default_namespace="default")
    assert [(r.decision.name, r.decision.allowed) for r in results] == [("a", True), ("b", False)]


def test_patch_applies_to_the_original(policy: Policy) -> None:
    obj = pod(
        {"containers": C, "tolerations": [{"key": "a", "operator": "Exists"}]}, labels={"x/y": "z"}
    )
    decision = evaluate(obj, policy, CTX)
    ops = make_patch(obj, decision.mutated)
    assert apply_patch(obj, ops) == decision.mutated
    assert make_patch(obj, obj) == []


def test_a_standard_pod_whose_only_matching_term_requires_preemptible_is_refused(
    policy: Policy,
) -> None:
    # The empty term matches no node, so the pod can only ever run on preemptible nodes.
    terms = [{"matchExpressions": [expr("In")]}, {"matchExpressions": []}]
    spec = {
        "containers": C,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        },
    }
    decision = evaluate(pod(spec, {"together.ai/workload": "serving"}), policy, CTX)
    assert decision.enforce_refuses
    assert (
        "requires preemptible capacity through its required node affinity terms"
        in (decision.violations[0])
    )


def _term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


def _on(key_op: str, *values: str) -> dict[str, Any]:
    return {"key": KEY, "operator": key_op, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize("workload", ["serving", "coordinator", "interruptible"])
@pytest.mark.parametrize(
    ("selector", "terms"),
    [
        (None, [{}]),
        (None, [_term(_on("In", "preemptible"), _on("In", "standard"))]),
        (None, [_term(_on("Exists"), _on("DoesNotExist"))]),
        ({KEY: "standard"}, [_term(_on("In", "preemptible"))]),
        ({KEY: "preemptible"}, [_term(_on("NotIn", "preemptible"))]),
        ({KEY: "preemptible"}, [_term(_on("In", "standard")), {}]),
        # The scheduler reads numbers as Go does: "1_0" is none, so Gt admits no node here.
        (None, [_term(_on("Exists"), _on("Gt", "0"), _on("In", "1_0"))]),
        (None, [_term(_on("Gt", "1_0"))]),
    ],
    ids=[
        "empty-term",
        "in-both",
        "exists-and-not",
        "selector-standard",
        "selector-preemptible",
        "selector-and-other-term",
        "gt-and-a-value-go-does-not-read",
        "gt-a-bound-go-does-not-read",
    ],
)
def test_a_pod_whose_constraints_admit_no_node_is_refused_as_such(
    policy: Policy, workload: str, selector: dict[str, str] | None, terms: list[Any]
) -> None:
    """Neither kind of capacity keeps such a pod off: the refusal says its constraints
    contradict each other, instead of blaming one of them for a class it does not ask for."""
    spec: dict[str, Any] = {
        "containers": C,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        },
    }
    if selector is not None:
        spec["nodeSelector"] = selector
    obj = pod(spec, {"together.ai/workload": workload})
    decision = evaluate(obj, policy, CTX)
    assert [r.code.value for r in decision.refusals] == ["matches-no-node"]
    assert "no node can meet the pod's own node constraints" in decision.violations[0]
    assert make_patch(obj, decision.mutated) == []


def _deployment(workload: str, replicas: int, **meta: Any) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": {"together.ai/workload": workload}},
        "spec": {"containers": C, "nodeSelector": {KEY: "preemptible"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "team-a", **meta},
        "spec": {"replicas": replicas, "template": template},
    }


def test_workload_updates_that_keep_the_template_pass(policy: Policy) -> None:
    """A serving Deployment pinned to preemptible nodes, admitted before enforcement began."""
    old = _deployment("serving", 2)
    scaled = evaluate(
        _deployment("serving", 0),
        policy,
        Context(operation="UPDATE", namespace="team-a", old_object=old),
    )
    assert (scaled.allowed, scaled.skipped) == (True, "the pod template did not change")
    deleting = evaluate(
        _deployment("serving", 2, deletionTimestamp="2026-12-03T07:00:00Z", finalizers=[]),
        policy,
        Context(operation="UPDATE", namespace="team-a", old_object=None),
    )
    assert (deleting.allowed, deleting.skipped) == (True, "the object is being deleted")


def test_workload_updates_that_change_the_template_are_judged(policy: Policy) -> None:
    old = _deployment("flexible", 2)
    decision = evaluate(
        _deployment("serving", 2),
        policy,
        Context(operation="UPDATE", namespace="team-a", old_object=old),
    )
    assert decision.enforce_refuses
    assert "class serving must run on standard nodes" in decision.violations[0]


def test_user_values_in_reasons_are_cut_short(policy: Policy) -> None:
    long_class = "x" * 20_000
    decision = evaluate(pod({"containers": C}, {"together.ai/workload": long_class}), policy, CTX)
    assert decision.enforce_refuses
    assert all(len(v) < 300 for v in decision.violations), decision.violations
    digits = "9" * 5_000  # past Python's limit on converting digit strings
    decision = evaluate(
        pod(
            {"containers": C},
            {"together.ai/workload": "interruptible", "together.ai/checkpoint-seconds": digits},
        ),
        policy,
        CTX,
    )
    assert decision.enforce_refuses
    assert "must be a whole number of seconds" in decision.violations[0]
    assert len(decision.violations[0]) < 300
