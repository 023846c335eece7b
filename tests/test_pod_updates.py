"""Pod UPDATE: a pod's placement is fixed when it is created, so an update that gives it a class
that must run on standard nodes, while its node constraints still admit preemptible nodes, is
refused; every other update is left alone, and none is mutated."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from webhook.admission import core, review
from webhook.admission.core import Hook
from webhook.admission.lookups import no_namespaces
from webhook.engine.decision import Context
from webhook.engine.evaluation import evaluate
from webhook.engine.findings import Code
from webhook.engine.patch import make_patch
from webhook.engine.policy import Mode, Policy
from webhook.loading.policies import builtin_policy

POLICY = builtin_policy()
CREATE = Context(namespace="team-a")
KEY = "together.ai/compute-class"
CONTAINERS = [{"name": "c", "image": "busybox"}]


def _pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations or {}},
        "spec": {"containers": CONTAINERS, **spec},
    }


def _created(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as stored: placed by the engine as the mutating webhook places it."""
    decision = evaluate(obj, POLICY, CREATE)
    assert decision.allowed
    return decision.mutated


def _update(
    old: dict[str, Any], policy: Policy = POLICY, **meta: Any
) -> tuple[dict[str, Any], Any]:
    new = copy.deepcopy(old)
    new["metadata"].update(meta)
    ctx = Context(operation="UPDATE", namespace="team-a", old_object=old)
    return new, evaluate(new, policy, ctx)


def _codes(decision: Any) -> list[str]:
    return [f.code.value for f in decision.findings()]


def test_an_unclassified_pod_made_serving_is_refused() -> None:
    old = _created(_pod())
    new, decision = _update(old, annotations={"together.ai/workload": "serving"})
    assert not decision.allowed
    assert [r.code for r in decision.refusals] == [Code.CLASS_CHANGED]
    assert decision.refusals[0].path == "metadata.annotations"
    assert decision.violations[0].startswith(
        "this update makes the pod serving (annotation), a class that must run on standard "
        "nodes, but the pod was created unclassified and its node constraints still admit "
        "together.ai/compute-class=preemptible nodes"
    )
    assert decision.mutated is new  # never mutated
    assert decision.workload_class == "serving"


def test_a_placed_interruptible_pod_made_a_coordinator_by_its_labels_is_refused() -> None:
    old = _created(_pod({"together.ai/workload": "interruptible"}))
    annotations = {k: v for k, v in old["metadata"]["annotations"].items()
                   if k != "together.ai/workload"}  # fmt: skip
    new, decision = _update(old, annotations=annotations, labels={"ray.io/node-type": "head"})
    assert [r.code for r in decision.refusals] == [Code.CLASS_CHANGED]
    assert decision.workload_class == "coordinator"
    assert "the pod was created interruptible (annotation)" in decision.violations[0]
    assert make_patch(new, decision.mutated) == []


@pytest.mark.parametrize(
    ("annotations", "spec", "labels"),
    [
        # The class does not change: a label of no rule.
        ({"together.ai/workload": "serving"}, {}, {"app": "web"}),
        # Placed as serving, now a coordinator: its constraints already keep it off.
        ({"together.ai/workload": "serving"}, {}, {"ray.io/node-type": "head"}),
        # Unclassified but pinned to standard nodes: serving may run where it is.
        ({}, {"nodeSelector": {KEY: "standard"}}, {"app": "web", "together.ai/x": "y"}),
        # Made interruptible: the webhook keeps standard-only classes off preemptible nodes,
        # not the reverse (audit reports an interruptible pod on a standard node).
        ({}, {}, {"app": "sweep"}),
    ],
    ids=["same-class", "standard-to-standard", "pinned-to-standard", "to-interruptible"],
)
def test_other_updates_are_left_alone(
    annotations: dict[str, str], spec: dict[str, Any], labels: dict[str, str]
) -> None:
    old = _created(_pod(annotations, **spec))
    meta_annotations = dict(old["metadata"]["annotations"])
    if labels.get("app") == "sweep":
        meta_annotations["together.ai/workload"] = "interruptible"
    _, decision = _update(old, labels=labels, annotations=meta_annotations)
    assert decision.allowed
    assert decision.skip is not None
    assert decision.skip.code is Code.POD_UPDATE


def test_an_update_that_changes_nothing_that_classifies_is_not_classified() -> None:
    old = _created(_pod())
    _, decision = _update(old, finalizers=["example.com/hold"])
    assert decision.skip is not None
    assert decision.skip.code is Code.POD_UPDATE
    assert "changes nothing that classifies it" in decision.skip.message


def test_a_pod_being_deleted_is_judged_too_and_its_finalizers_stay_removable() -> None:
    """A deletion may be given years of grace (the API server sets no limit), and the pod runs
    until then: being deleted is no licence to change class."""
    old = _created(_pod())
    old["metadata"]["deletionTimestamp"] = "2036-12-05T00:00:00Z"
    old["metadata"]["finalizers"] = ["example.com/hold"]
    _, relabelled = _update(old, annotations={"together.ai/workload": "serving"})
    assert [r.code for r in relabelled.refusals] == [Code.CLASS_CHANGED]
    _, released = _update(old, finalizers=[])
    assert released.allowed
    assert released.skip is not None
    assert released.skip.code is Code.POD_UPDATE


def test_a_claimed_owner_does_not_let_an_update_through() -> None:
    """The owner a pod names is its writer's claim: naming a DaemonSet changes nothing."""
    old = _created(_pod())
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u",
             "controller": True}  # fmt: skip
    _, decision = _update(
        old, annotations={"together.ai/workload": "login"}, ownerReferences=[owner]
    )
    assert [r.code for r in decision.refusals] == [Code.CLASS_CHANGED]


def test_warn_mode_allows_the_update_with_the_refusal_as_a_warning() -> None:
    warn = dataclasses.replace(POLICY, mode=Mode.WARN)
    old = _created(_pod())
    _, decision = _update(old, warn, annotations={"together.ai/workload": "serving"})
    assert decision.allowed
    assert any(f.code is Code.WOULD_BE_REFUSED for f in decision.notes)


def _review(hook: str, new: dict[str, Any], old: dict[str, Any]) -> review.Request:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"u-{hook}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-a",
            "operation": "UPDATE",
            "userInfo": {"username": "alice"},
            "object": new,
            "oldObject": old,
        },
    }
    return review.parse_review(body)


def test_the_validating_hook_refuses_the_update_and_the_mutating_hook_patches_nothing() -> None:
    old = _created(_pod())
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["together.ai/workload"] = "serving"
    validated = core.answer(Hook.VALIDATE, _review("v", new, old), POLICY, no_namespaces)
    response = validated.review["response"]
    assert response["allowed"] is False
    assert "this update makes the pod serving" in response["status"]["message"]
    mutated = core.answer(Hook.MUTATE, _review("m", new, old), POLICY, no_namespaces)
    assert "patch" not in mutated.review["response"]
