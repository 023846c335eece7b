"""Retries that do not count: Jobs of preemptible classes get a podFailurePolicy rule that
ignores reclaims, ahead of their own, at CREATE (webhook/engine/jobs.py)."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from webhook.admission import core, review
from webhook.admission.core import Hook, Subject, judge
from webhook.admission.lookups import no_namespaces
from webhook.cli.dryrun import check
from webhook.engine.findings import Code
from webhook.engine.jobs import MAX_RULES, disruption_rule
from webhook.engine.patch import apply_patch
from webhook.errors import PolicyError
from webhook.loading.manifests import load_manifests
from webhook.loading.policies import builtin_policy, load_policy

POLICY = builtin_policy()
RULE = disruption_rule()
USERS_RULES = [
    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
    {"action": "Count", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]},
]


def template(workload: str | None = "interruptible", restart: str = "Never") -> dict[str, Any]:
    annotations = {"together.ai/workload": workload} if workload else {}
    return {
        "metadata": {"annotations": annotations},
        "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "train"}]},
    }


def job(
    workload: str | None = "interruptible", restart: str = "Never", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep", "namespace": "ml"},
        "spec": {"backoffLimit": 0, **spec, "template": template(workload, restart)},
    }


def cronjob(workload: str = "interruptible") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "ml"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": template(workload)}},
        },
    }


def jobset(*workloads: str) -> dict[str, Any]:
    replicated = [
        {"name": f"r{i}", "template": {"spec": {"template": template(w)}}}
        for i, w in enumerate(workloads)
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"replicatedJobs": replicated},
    }


def judged(
    obj: dict[str, Any], *, as_sent: bool = False, operation: str = "CREATE"
) -> core.Judgement:
    subject = Subject(obj=obj, namespace="ml", as_sent=as_sent, operation=operation)  # type: ignore[arg-type]
    return judge(subject, POLICY, no_namespaces)


def stored(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return apply_patch(obj, judged(obj, **kwargs).stored_patch)


def codes(j: core.Judgement) -> set[Code]:
    return {f.code for f in (*j.decision.changes, *j.decision.notes)}


# --- Jobs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("workload", ["interruptible", "flexible"])
def test_a_preemptible_job_gets_the_rule_and_podreplacementpolicy_failed(workload: str) -> None:
    original = job(workload)
    before = copy.deepcopy(original)
    result = judged(original)
    after = apply_patch(original, result.stored_patch)
    assert after["spec"]["podFailurePolicy"] == {"rules": [RULE]}
    assert after["spec"]["podReplacementPolicy"] == "Failed"
    assert after["spec"]["template"] == original["spec"]["template"]  # templates: not here
    assert {Code.POD_FAILURE_POLICY, Code.POD_REPLACEMENT_POLICY} <= codes(result)
    assert original == before


def test_the_users_rules_are_kept_behind_the_new_one() -> None:
    original = job(podFailurePolicy={"rules": copy.deepcopy(USERS_RULES)})
    result = judged(original)
    assert stored(original)["spec"]["podFailurePolicy"]["rules"] == [RULE, *USERS_RULES]
    ops = [op for op in result.stored_patch if "podFailurePolicy" in op["path"]]
    assert ops == [{"op": "add", "path": "/spec/podFailurePolicy/rules/0", "value": RULE}]


def test_the_mutation_is_idempotent() -> None:
    once = stored(job(podFailurePolicy={"rules": copy.deepcopy(USERS_RULES)}))
    again = judged(once)
    assert again.stored_patch == []
    assert not {Code.POD_FAILURE_POLICY, Code.POD_REPLACEMENT_POLICY} & codes(again)


def test_a_job_whose_first_rule_already_ignores_disruptions_gets_nothing_new() -> None:
    own = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    original = job(podFailurePolicy={"rules": [own]}, podReplacementPolicy="Failed")
    assert judged(original).stored_patch == []


def test_a_rule_further_down_is_not_first_so_one_is_put_ahead() -> None:
    rules = [USERS_RULES[0], RULE]
    after = stored(job(podFailurePolicy={"rules": copy.deepcopy(rules)}))
    assert after["spec"]["podFailurePolicy"]["rules"] == [RULE, *rules]


@pytest.mark.parametrize("workload", ["coordinator", "login", "serving", None])
def test_critical_and_unclassified_jobs_get_nothing(workload: str | None) -> None:
    result = judged(job(workload))
    assert result.stored_patch == []
    assert not {Code.POD_FAILURE_POLICY, Code.RECLAIMS_COUNTED} & codes(result)


def test_on_failure_gets_a_warning_instead() -> None:
    result = judged(job(restart="OnFailure"))
    assert result.stored_patch == []
    warnings = [f for f in result.decision.notes if f.code is Code.RECLAIMS_COUNTED]
    assert len(warnings) == 1
    assert "backoffLimit" in warnings[0].message
    assert "restartPolicy Never" in warnings[0].message
    assert warnings[0].path == "spec.template.spec.restartPolicy"


def test_a_full_policy_gets_a_warning_and_is_left_alone() -> None:
    full = [copy.deepcopy(USERS_RULES[1]) for _ in range(MAX_RULES)]
    result = judged(job(podFailurePolicy={"rules": full}))
    assert result.stored_patch == []
    assert Code.RECLAIMS_COUNTED in codes(result)


def test_only_at_create() -> None:
    obj = job()
    result = judged(obj, operation="UPDATE")
    assert not any("podFailurePolicy" in op["path"] for op in result.patch)


def test_check_shows_the_jobs_change_in_its_patch_beside_the_templates() -> None:
    result = judged(job())
    paths = {op["path"] for op in result.patch}
    assert {"/spec/podFailurePolicy", "/spec/podReplacementPolicy"} <= paths
    assert any(p.startswith("/spec/template/") for p in paths)


# --- what the API server sent: its defaults tell what it knows ----------------------------


def test_as_sent_the_defaulted_podreplacementpolicy_is_replaced_by_failed() -> None:
    after = stored(job(podReplacementPolicy="TerminatingOrFailed"), as_sent=True)
    assert after["spec"]["podReplacementPolicy"] == "Failed"
    assert after["spec"]["podFailurePolicy"] == {"rules": [RULE]}


def test_as_sent_a_job_without_either_field_is_from_an_older_server_and_left_alone() -> None:
    result = judged(job(), as_sent=True)
    assert result.stored_patch == []


def test_as_sent_a_job_with_its_own_policy_keeps_podreplacementpolicy_unset() -> None:
    # Kubernetes 1.26 to 1.28 know podFailurePolicy but not (by default) podReplacementPolicy.
    after = stored(job(podFailurePolicy={"rules": copy.deepcopy(USERS_RULES)}), as_sent=True)
    assert after["spec"]["podFailurePolicy"]["rules"] == [RULE, *USERS_RULES]
    assert "podReplacementPolicy" not in after["spec"]


# --- templates of Jobs: CronJob, JobSet ---------------------------------------------------


def test_a_cronjobs_job_template_gets_the_rule() -> None:
    original = cronjob()
    result = judged(original, as_sent=True)
    spec = apply_patch(original, result.stored_patch)["spec"]["jobTemplate"]["spec"]
    assert spec["podFailurePolicy"] == {"rules": [RULE]}
    assert spec["podReplacementPolicy"] == "Failed"
    paths = [f.path for f in result.decision.changes if f.code is Code.POD_FAILURE_POLICY]
    assert paths == ["spec.jobTemplate.spec.podFailurePolicy.rules"]


def test_a_critical_cronjob_gets_nothing() -> None:
    assert judged(cronjob("serving")).stored_patch == []


def test_each_preemptible_replicated_job_of_a_jobset_gets_the_rule() -> None:
    original = jobset("interruptible", "coordinator", "flexible")
    after = apply_patch(original, judged(original, as_sent=True).stored_patch)
    specs = [r["template"]["spec"] for r in after["spec"]["replicatedJobs"]]
    assert [s.get("podFailurePolicy") for s in specs] == [
        {"rules": [RULE]},
        None,
        {"rules": [RULE]},
    ]
    assert [s.get("podReplacementPolicy") for s in specs] == ["Failed", None, "Failed"]
    assert judged(after, as_sent=True).stored_patch == []


def test_check_shows_each_replicated_jobs_change_with_its_template(tmp_path: Path) -> None:
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump(jobset("interruptible", "coordinator")))
    manifests = load_manifests([str(path)], io.StringIO())
    first, second = check(manifests, POLICY, default_namespace="ml")
    held = "/spec/replicatedJobs/0/template/spec"
    paths = {op["path"] for op in first.patch}
    assert {f"{held}/podFailurePolicy", f"{held}/podReplacementPolicy"} <= paths
    assert Code.POD_FAILURE_POLICY in {c.code for c in first.decision.changes}
    assert not [
        op for op in second.patch if "/spec/replicatedJobs/1/template/spec/pod" in op["path"]
    ]
    assert Code.POD_FAILURE_POLICY not in {c.code for c in second.decision.changes}


# --- the hooks ------------------------------------------------------------------------------


def request_for(obj: dict[str, Any], resource: str, operation: str = "CREATE") -> review.Request:
    group, _, version = obj["apiVersion"].rpartition("/")
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": resource},
            "namespace": "ml",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
        },
    }
    return review.parse_review(body)


def patch_of(admission: core.Admission) -> list[dict[str, Any]]:
    patch = admission.review["response"].get("patch")
    return review.decode_patch(patch) if patch else []


def test_the_mutating_hook_patches_the_job_itself_never_its_template() -> None:
    obj = job(podReplacementPolicy="TerminatingOrFailed")
    answered = core.answer(Hook.MUTATE, request_for(obj, "jobs"), POLICY, no_namespaces)
    assert answered.outcome is core.Outcome.PATCHED
    assert {op["path"] for op in patch_of(answered)} == {
        "/spec/podFailurePolicy",
        "/spec/podReplacementPolicy",
    }


def test_the_validating_hook_allows_the_stored_job_and_the_mutating_hook_leaves_refusals_to_it() -> (
    None
):
    obj = job(podReplacementPolicy="TerminatingOrFailed")
    after = apply_patch(
        obj, patch_of(core.answer(Hook.MUTATE, request_for(obj, "jobs"), POLICY, no_namespaces))
    )
    validated = core.answer(Hook.VALIDATE, request_for(after, "jobs"), POLICY, no_namespaces)
    assert validated.review["response"]["allowed"] is True
    refused = job(podReplacementPolicy="TerminatingOrFailed")
    refused["spec"]["template"]["metadata"]["annotations"]["together.ai/workload"] = "serving"
    refused["spec"]["template"]["spec"]["nodeSelector"] = {
        "together.ai/compute-class": "preemptible"
    }
    mutated = core.answer(Hook.MUTATE, request_for(refused, "jobs"), POLICY, no_namespaces)
    assert mutated.review["response"]["allowed"] is True
    assert patch_of(mutated) == []
    validated = core.answer(Hook.VALIDATE, request_for(refused, "jobs"), POLICY, no_namespaces)
    assert validated.review["response"]["allowed"] is False


def test_the_mutating_hook_leaves_workload_updates_alone() -> None:
    obj = job(podReplacementPolicy="TerminatingOrFailed")
    answered = core.answer(Hook.MUTATE, request_for(obj, "jobs", "UPDATE"), POLICY, no_namespaces)
    assert answered.outcome is core.Outcome.SKIPPED


# --- the policy data ------------------------------------------------------------------------


def test_pod_failure_policy_is_only_for_a_job_specs_template(tmp_path: Path) -> None:
    text = """\
apiVersion: preemptguard.together.ai/v1alpha1
kind: PlacementPolicy
metadata: {name: p}
spec:
  classes: [{name: batch, placement: preemptible}]
  workloadKinds:
    - group: example.com
      kind: Fleet
      templates:
        - path: spec.pods
          podFailurePolicy: true
"""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match="podFailurePolicy is for the pod template"):
        load_policy(path)


# --- the webhook configuration --------------------------------------------------------------


def test_the_shipped_mutating_configuration_sends_job_kinds_at_create() -> None:
    docs = list(yaml.safe_load_all((REPO / "manifests/base/webhooks.yaml").read_text()))
    mutating = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    pods, workloads = mutating["webhooks"]
    assert workloads["name"] == "workloads.mutate.preemptguard.together.ai"
    assert workloads["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": ["batch"],
            "apiVersions": ["*"],
            "resources": ["jobs", "cronjobs"],
            "scope": "Namespaced",
        },
        {
            "operations": ["CREATE"],
            "apiGroups": ["jobset.x-k8s.io"],
            "apiVersions": ["*"],
            "resources": ["jobsets"],
            "scope": "Namespaced",
        },
    ]
    assert workloads["clientConfig"]["service"]["path"] == "/mutate"
    assert (workloads["failurePolicy"], workloads["sideEffects"]) == ("Ignore", "None")
    assert workloads["reinvocationPolicy"] == "Never"
    assert workloads["namespaceSelector"] == pods["namespaceSelector"]
