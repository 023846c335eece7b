"""Priority and scheduler per class: batch classes a ceiling that never preempts, standard
classes a floor; consistent with what the API server resolves; the shipped classes in step."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.test_cli import run
from webhook.admission import lookups
from webhook.engine import evaluate
from webhook.engine.decision import Context
from webhook.engine.findings import Code
from webhook.engine.policy import Placement, Policy
from webhook.engine.scheduling import NEVER, PREEMPT, PriorityClassInfo
from webhook.loading.policies import builtin_policy, load_policy
from webhook.server.caches import priority_class_cache
from webhook.server.metrics import Metrics

DEFAULT = builtin_policy()
BATCH = PriorityClassInfo("preemptguard-batch", -100, NEVER)
CRITICAL = PriorityClassInfo("critical", 1000, PREEMPT)
CLASSES = {c.name: c for c in (BATCH, CRITICAL, PriorityClassInfo("scavenger", -1000, NEVER),
                                PriorityClassInfo("low-preempting", -500, PREEMPT))}  # fmt: skip


def with_critical_floor(policy: Policy) -> Policy:
    """The default policy with its serving class given the floor ``critical``."""
    classes = dict(policy.classes)
    classes["serving"] = dataclasses.replace(classes["serving"], priority_class_name="critical")
    return dataclasses.replace(policy, classes=classes)


def pod(workload: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"together.ai/workload": workload}},
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}  # fmt: skip


def decide(obj: dict[str, Any], policy: Policy = DEFAULT) -> dict[str, Any]:
    d = evaluate(obj, policy, Context(namespace="team-a", priority_classes=CLASSES.get))
    assert d.allowed, d.refusals
    spec: dict[str, Any] = d.mutated["spec"]
    again = evaluate(d.mutated, policy, Context(namespace="team-a", priority_classes=CLASSES.get))
    assert again.mutated == d.mutated, "not idempotent"
    return spec


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, ("preemptguard-batch", -100, NEVER)),
        # As the API server hands the pod over: no class, priority 0 resolved.
        ({"priority": 0, "preemptionPolicy": PREEMPT}, ("preemptguard-batch", -100, NEVER)),
        ({"priorityClassName": "critical", "priority": 1000}, ("preemptguard-batch", -100, NEVER)),
        ({"priorityClassName": "scavenger", "priority": -1000, "preemptionPolicy": NEVER},
         ("scavenger", -1000, NEVER)),
        # Lower, but able to preempt: batch work never evicts anything.
        ({"priorityClassName": "low-preempting", "priority": -500,
          "preemptionPolicy": PREEMPT}, ("preemptguard-batch", -100, NEVER)),
    ],
)  # fmt: skip
def test_batch_classes_are_a_ceiling_that_never_preempts(
    given: dict[str, Any], expected: tuple[str, int, str]
) -> None:
    for workload in ("interruptible", "flexible"):
        spec = decide(pod(workload, **given))
        got = (spec["priorityClassName"], spec.get("priority"), spec.get("preemptionPolicy"))
        assert got == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"priority": 0}, "critical"),
        ({"priorityClassName": "scavenger", "priority": -1000}, "critical"),
        ({"priorityClassName": "system-cluster-critical", "priority": 2_000_000_000},
         "system-cluster-critical"),
    ],
)  # fmt: skip
def test_standard_classes_are_a_floor(given: dict[str, Any], expected: str) -> None:
    spec = decide(pod("serving", **given), with_critical_floor(DEFAULT))
    assert spec["priorityClassName"] == expected


def test_a_pod_gets_the_resolved_priority_a_template_only_the_name() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": pod("interruptible")}}  # fmt: skip
    d = evaluate(job, DEFAULT, Context(namespace="team-a", priority_classes=CLASSES.get))
    template = d.mutated["spec"]["template"]["spec"]
    assert template["priorityClassName"] == "preemptguard-batch"
    assert "priority" not in template
    assert "preemptionPolicy" not in template


def test_a_class_missing_from_the_cluster_refuses_with_what_to_do() -> None:
    no_classes: dict[str, PriorityClassInfo] = {}
    d = evaluate(
        pod("flexible"), DEFAULT, Context(namespace="team-a", priority_classes=no_classes.get)
    )
    assert not d.allowed
    (refusal,) = d.refusals
    assert refusal.code is Code.UNKNOWN_PRIORITY_CLASS
    assert "create it (preemptguard's manifests ship it)" in refusal.message


def test_the_packing_policy_is_the_default_one_with_schedulers() -> None:
    packing = load_policy(REPO / "policies" / "packing")
    assert packing.rules == DEFAULT.rules
    assert packing.workload_kinds == DEFAULT.workload_kinds
    for name, wclass in DEFAULT.classes.items():
        scheduler = "preemptguard-packing" if wclass.placement is not Placement.STANDARD else None
        assert packing.classes[name] == dataclasses.replace(wclass, scheduler_name=scheduler)


def test_the_shipped_batch_class_is_the_same_everywhere() -> None:
    def batch(text: str) -> dict[str, Any]:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
        (found,) = [d for d in docs if d["metadata"]["name"] == "preemptguard-batch"]
        return {k: found[k] for k in ("value", "preemptionPolicy", "globalDefault")}

    data = batch((REPO / "webhook" / "data" / "priorityclasses.yaml").read_text())
    assert data == batch((REPO / "manifests" / "base" / "priorityclass.yaml").read_text())
    assert lookups.offline_priority_classes()("preemptguard-batch") == BATCH
    assert data == {"value": -100, "preemptionPolicy": NEVER, "globalDefault": False}


def test_check_reads_priority_classes_from_its_input() -> None:
    text = (
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: preemptguard-batch}\n"
        "value: -7\npreemptionPolicy: Never\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: s, annotations: {together.ai/workload: interruptible}}\n"
        "spec: {containers: [{name: a, image: b}]}\n"
    )
    proc = run("check", "-o", "json", "-f", "-", stdin=text)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["results"]
    pod_result = next(r for r in results if r["kind"] == "Pod")
    assert {"op": "add", "path": "/spec/priority", "value": -7} in pod_result["patch"]


def test_without_a_cluster_the_server_assumes_the_shipped_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cache = priority_class_cache(Metrics())
    assert cache.lookup("preemptguard-batch") == BATCH
    assert cache.lookup("nonexistent") is None
    assert cache.not_ready() is None
