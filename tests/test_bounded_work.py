"""Pods built to be slow, large or deep get an answer that says what to change.

How long the answers take is measured in benchmarks/slow_review_bench.py, not here; these
tests hold the outcomes: caps refuse with the field to fix, nothing recurses on depth, and no
message grows with the values quoted in it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import adversarial
from webhook.engine import evaluate
from webhook.engine.constraints import MAX_LABEL_VALUES, MAX_TERMS, read_constraints
from webhook.engine.decision import MAX_MESSAGE_CHARS, Context
from webhook.engine.jsoncompare import same_json
from webhook.engine.patch import apply_patch, make_patch
from webhook.loading.policies import builtin_policy

POLICY = builtin_policy()
CTX = Context(namespace="team-a")
KEY = "together.ai/compute-class"


def term(*values: str, op: str = "In") -> dict[str, Any]:
    return {"matchExpressions": [{"key": KEY, "operator": op, "values": list(values)}]}


def with_terms(pod: dict[str, Any], terms: list[Any]) -> dict[str, Any]:
    pod["spec"].pop("nodeSelector", None)
    required = {"nodeSelectorTerms": terms}
    pod["spec"]["affinity"] = {"nodeAffinity": {adversarial.REQUIRED: required}}
    return pod


def test_more_terms_than_the_cap_are_refused_with_what_to_do() -> None:
    pod = with_terms(adversarial.base_pod(), [term("standard")] * (MAX_TERMS + 1))
    d = evaluate(pod, POLICY, CTX)
    assert not d.allowed
    assert d.violations == (
        f"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms "
        f"has {MAX_TERMS + 1:,} terms, more than the {MAX_TERMS:,} preemptguard checks: merge them into fewer terms",
    )


def test_as_many_terms_as_the_cap_are_placed() -> None:
    zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    pod = with_terms(adversarial.base_pod(), [zone] * MAX_TERMS)
    d = evaluate(pod, POLICY, CTX)
    assert d.allowed
    assert len(make_patch(pod, d.mutated)) == MAX_TERMS + 1  # NotIn into every term, and the record


def test_more_label_values_than_the_cap_are_refused() -> None:
    values = [f"v{i}" for i in range(MAX_LABEL_VALUES + 1)]
    pod = with_terms(adversarial.base_pod(), [term(*values, op="NotIn")])
    d = evaluate(pod, POLICY, CTX)
    assert not d.allowed
    assert (
        f"name {MAX_LABEL_VALUES + 1:,} values of the label {KEY}, more than the" in d.violations[0]
    )
    assert "name only the values your nodes carry" in d.violations[0]


def test_values_repeated_in_many_terms_count_once() -> None:
    # 1,000 terms naming the same 100 values: within both caps, placed, not refused.
    pod = adversarial.many_values(target=400_000)
    d = evaluate(pod, POLICY, CTX)
    assert len(read_constraints(pod["spec"], KEY).mentioned) <= MAX_LABEL_VALUES
    assert d.allowed
    assert d.workload_class == "serving"


@pytest.mark.parametrize("name", sorted(adversarial.SLOW_PODS))
def test_every_slow_pod_gets_a_decision(name: str) -> None:
    pod = adversarial.SLOW_PODS[name]()
    original = copy.deepcopy(pod) if not name.startswith("deep") else None
    d = evaluate(pod, POLICY, CTX)
    assert d.workload_class in ("serving", "flexible")
    assert all(len(m) <= MAX_MESSAGE_CHARS for m in (*d.violations, *d.warnings))
    if original is not None:
        assert pod == original, "the engine changed its input"
    if d.allowed:
        patched = apply_patch(pod, make_patch(pod, d.mutated))
        assert make_patch(patched, evaluate(patched, POLICY, CTX).mutated) == []


def test_depth_never_reaches_the_recursion_limit() -> None:
    pod = adversarial.deep_managed_fields(depth=50_000)
    pod["metadata"]["annotations"]["together.ai/workload"] = "interruptible"
    del pod["spec"]["nodeSelector"]
    d = evaluate(pod, POLICY, CTX)
    assert d.allowed
    ops = make_patch(pod, d.mutated)
    assert ops
    assert all(not op["path"].startswith("/metadata/managedFields") for op in ops)
    assert d.mutated["metadata"]["managedFields"] is pod["metadata"]["managedFields"]
    old = adversarial.deep_managed_fields(depth=50_000)
    assert same_json(pod["metadata"]["managedFields"], old["metadata"]["managedFields"])


def test_a_workload_update_compares_deep_templates_without_recursing() -> None:
    deep: Any = {}
    for _ in range(20_000):
        deep = {"x": deep}
    template = {"metadata": {"annotations": {"together.ai/workload": "serving"}},
                "spec": {"containers": [{"name": "c", "image": "x", "env": [{"name": "A", "value": "1"}]}]}}  # fmt: skip
    job = {"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"template": template, "extra": deep}}  # fmt: skip
    job["apiVersion"] = "apps/v1"
    d = evaluate(
        job, POLICY, Context(namespace="team-a", operation="UPDATE", old_object=copy.copy(job))
    )
    assert d.skipped == "the pod template did not change"


def test_a_long_value_is_quoted_short() -> None:
    pod = adversarial.base_pod()
    pod["spec"]["nodeSelector"][KEY] = "preemptible"
    pod["metadata"]["annotations"]["together.ai/workload"] = "x" * 100_000
    d = evaluate(pod, POLICY, CTX)
    assert not d.allowed
    assert all(len(v) <= 400 for v in d.violations), [len(v) for v in d.violations]
    pod = adversarial.base_pod()
    pod["metadata"]["annotations"]["together.ai/workload"] = "interruptible"
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            adversarial.REQUIRED: {"nodeSelectorTerms": [term("y" * 100_000, op="NotIn")]}
        }
    }
    pod["spec"]["nodeSelector"] = {KEY: "z" * 100_000}
    d = evaluate(pod, POLICY, CTX)
    assert not d.allowed
    assert "nodeSelector together.ai/compute-class=zzz" in d.violations[0]
    assert all(len(v) <= 600 for v in d.violations), [len(v) for v in d.violations]


def test_what_pods_name_decides_neither_the_answer_nor_what_the_cache_keeps() -> None:
    """The label states a placement is checked against are cached for pods naming a few
    label-sized values only; long or many values are worked out each time, alike."""
    from webhook.engine import placement

    cached = placement._excluded_by_cached
    cached.cache_clear()
    long_value = "v" * 100_000
    for i in range(20):
        pod = with_terms(adversarial.base_pod(), [term(f"{long_value}{i}", "standard", op="NotIn")])
        d = evaluate(pod, POLICY, CTX)
        assert d.allowed, d.violations
        assert len(make_patch(pod, d.mutated)) == 2  # NotIn added to the term, and the record
    assert cached.cache_info().currsize == 0
    short = with_terms(adversarial.base_pod(), [term("gpu-a", "standard", op="NotIn")])
    assert evaluate(short, POLICY, CTX).allowed
    assert cached.cache_info().currsize == 1
