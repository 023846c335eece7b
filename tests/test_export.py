"""``preemptguard export``: the objects it writes, the CEL they carry, the generated component
kept in manifests/, and the command line.

What these CEL expressions decide is proven against the webhook on a real API server in
tests/e2e/test_admission_policies.py: no offline CEL evaluator reads the Kubernetes dialect
these use (optional fields, the strings and lists extensions, two-variable comprehensions,
``Object{}`` and ``JSONPatch{}`` literals), so here the expressions are checked as text.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from webhook.cli.main import main
from webhook.engine.policy import Mode
from webhook.export import HEADER, NOT_EXPRESSED, export, names, render_json, render_yaml
from webhook.export.cel import PY_SPACE, glob_regex, lit, literal_value
from webhook.export.rules import Rules, template_kinds, template_of
from webhook.loading.policies import builtin_policy, load_policy

REPO = Path(__file__).resolve().parents[1]
POLICY_DIR = REPO / "policies" / "default"
COMPONENTS = REPO / "manifests" / "components"
# Each generated file, with what it holds (``preemptguard export --only``).
GENERATED = {
    "validating": COMPONENTS / "admission-policies" / "admission-policies.yaml",
    "mutating": COMPONENTS / "mutating-admission-policy" / "mutating-admission-policy.yaml",
}
KINDS = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
]


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in export(load_policy(POLICY_DIR)).objects}


def _variables(obj: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in obj["spec"]["variables"]}


# --- the objects -----------------------------------------------------------------------------


def test_two_policies_each_with_its_binding(objects: dict[str, dict[str, Any]]) -> None:
    assert list(objects) == KINDS
    validating, mutating = names(builtin_policy())
    assert objects["ValidatingAdmissionPolicy"]["metadata"]["name"] == validating
    assert objects["ValidatingAdmissionPolicyBinding"]["spec"]["policyName"] == validating
    assert objects["MutatingAdmissionPolicy"]["metadata"]["name"] == mutating
    assert objects["MutatingAdmissionPolicyBinding"]["spec"]["policyName"] == mutating
    assert objects["ValidatingAdmissionPolicyBinding"]["spec"]["validationActions"] == ["Deny"]
    for obj in objects.values():
        assert obj["apiVersion"] == "admissionregistration.k8s.io/v1"


def test_validation_covers_pods_and_workload_templates(
    objects: dict[str, dict[str, Any]],
) -> None:
    rules = objects["ValidatingAdmissionPolicy"]["spec"]["matchConstraints"]["resourceRules"]
    found = {
        (group, resource): tuple(rule["operations"])
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert found == {
        ("", "pods"): ("CREATE", "UPDATE"),
        ("apps", "deployments"): ("CREATE", "UPDATE"),
        ("apps", "statefulsets"): ("CREATE", "UPDATE"),
        ("apps", "replicasets"): ("CREATE", "UPDATE"),
        ("batch", "jobs"): ("CREATE", "UPDATE"),
        ("batch", "cronjobs"): ("CREATE", "UPDATE"),
        ("", "replicationcontrollers"): ("CREATE", "UPDATE"),
    }


def test_mutation_is_pods_create_only_with_json_patch_and_reinvocation(
    objects: dict[str, dict[str, Any]],
) -> None:
    spec = objects["MutatingAdmissionPolicy"]["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        [""],
        ["pods"],
        ["CREATE"],
    )
    assert spec["reinvocationPolicy"] == "IfNeeded"
    (mutation,) = spec["mutations"]
    # Tolerations and node-selector terms are atomic lists: no ApplyConfiguration merges them.
    assert mutation["patchType"] == "JSONPatch"
    expression = mutation["jsonPatch"]["expression"]
    assert expression.startswith(
        "variables.workloadClass == '' || size(variables.refusals) > 0 ? [] :"
    )
    for path in (
        "/spec/tolerations/-",
        "/spec/terminationGracePeriodSeconds",
        "/metadata/annotations/together.ai~1placement",
        "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/",
        "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/-",
    ):
        assert f"'{path}" in expression, path


def test_excluded_namespaces_and_trusted_requesters_come_from_the_policy(
    objects: dict[str, dict[str, Any]],
) -> None:
    policy = load_policy(POLICY_DIR)
    for obj in objects.values():
        selector = (
            obj["spec"]["matchConstraints"]["namespaceSelector"]
            if "matchConstraints" in obj["spec"]
            else obj["spec"]["matchResources"]["namespaceSelector"]
        )
        (expr,) = selector["matchExpressions"]
        assert expr == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": list(policy.excluded_namespaces),
        }
    conditions = {
        c["name"]: c["expression"]
        for c in objects["MutatingAdmissionPolicy"]["spec"]["matchConditions"]
    }
    exempt = conditions["not-a-trusted-daemonset-or-mirror-pod"]
    for name in policy.trusted.daemonset_controllers:
        assert lit(name) in exempt
    assert lit(policy.trusted.node_group) in exempt
    assert f".startsWith({lit(policy.trusted.node_username_prefix)})" in exempt
    # Trust comes from the request: the pod's claim alone never exempts it.
    assert "request.userInfo" in exempt


def test_failing_expressions_refuse(objects: dict[str, dict[str, Any]]) -> None:
    assert objects["ValidatingAdmissionPolicy"]["spec"]["failurePolicy"] == "Fail"
    assert objects["MutatingAdmissionPolicy"]["spec"]["failurePolicy"] == "Fail"


def test_every_refusal_in_one_message_as_the_webhook_joins_them(
    objects: dict[str, dict[str, Any]],
) -> None:
    (validation,) = objects["ValidatingAdmissionPolicy"]["spec"]["validations"]
    assert validation["expression"] == "size(variables.refusals) == 0"
    assert "variables.refusals.join('; ')" in validation["messageExpression"]


def test_warn_mode_warns_instead_of_refusing() -> None:
    policy = load_policy(POLICY_DIR)
    warned = export(dataclasses.replace(policy, mode=Mode.WARN)).objects
    binding = next(o for o in warned if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["validationActions"] == ["Warn"]
    vap = next(o for o in warned if o["kind"] == "ValidatingAdmissionPolicy")
    assert (
        "would be refused in enforce mode: " in vap["spec"]["validations"][0]["messageExpression"]
    )


# --- the CEL ---------------------------------------------------------------------------------


def test_the_classification_names_every_source_in_order(objects: dict[str, dict[str, Any]]) -> None:
    variables = _variables(objects["ValidatingAdmissionPolicy"])
    policy = load_policy(POLICY_DIR)
    candidates = variables["candidates"].splitlines()
    # annotation, each rule in policy order, the template defaults of pods without an
    # annotation (in the order of their templates), the namespace default: ties go to the first.
    assert "variables.annotated" in candidates[0]
    defaults = [line for line in candidates if line.startswith("(!variables.annotated.hasValue()")]
    rules = candidates[1 : -1 - len(defaults)]
    for line, rule in zip(rules, policy.rules, strict=True):
        assert line.endswith(f"? [{lit(rule.workload_class)}] : []) +")
    # A rule for template roles matches the pods whose labels say they come from such a
    # template (the podSelector of each head, master, launcher, chief and ps template).
    roles = next(
        line for line, r in zip(rules, policy.rules, strict=True) if r.match.template_roles
    )
    assert "object.kind == 'Pod' && " in roles
    assert "variables.labels['training.kubeflow.org/replica-type'] == 'ps'" in roles
    assert candidates[len(rules) + 1 : -1] == defaults
    assert all(line.endswith("? ['serving'] : []) +") for line in defaults)
    assert any("variables.labels['ray.io/serve'] == 'true'" in line for line in defaults)
    assert "variables.namespaceDefault" in candidates[-1]
    assert variables["namespaceDefault"].startswith("namespaceObject.")
    # Stricter wins: standard classes first, then prefer-preemptible, then the first candidate.
    choice = variables["workloadClass"]
    assert choice.index("'coordinator', 'login', 'serving'") < choice.index("['flexible']")


def test_every_engine_message_is_written_into_the_refusals(
    objects: dict[str, dict[str, Any]],
) -> None:
    text = "\n".join(_variables(objects["ValidatingAdmissionPolicy"]).values())
    for fragment in (
        "must run on standard nodes, but the pod requires preemptible capacity through its ",
        " runs only on preemptible nodes (together.ai/compute-class=preemptible), but they are excluded",
        "unknown workload class ",
        ": use one of coordinator, flexible, interruptible, login, serving",
        "annotation together.ai/checkpoint-seconds must be a whole number of seconds, got ",
        "checkpoint in pieces that take at most 270 s",
        "spec.terminationGracePeriodSeconds must be a non-negative whole number of seconds",
        "terms, more than the 1,000 preemptguard checks",
        "more than the 100 preemptguard checks",
        "a class that must run on standard nodes, but the pod was created ",
        "a pod's placement cannot change after it is created: leave its labels",
        "priorityClassName 'preemptguard' is reserved for pods in preemptguard-system",
        " runs below pods that name no priority class (its priority class is ",
    ):
        assert fragment in text, fragment


def test_rules_with_every_kind_of_match(tmp_path: Path) -> None:
    text = (POLICY_DIR / "policy.yaml").read_text()
    extra = """
    - name: sweeps
      class: interruptible
      match:
        namespaces: ["sweeps-*", "evals", "batch-[0-9]?"]
        podSelector:
          matchExpressions:
            - {key: tier, operator: NotIn, values: [gold]}
            - {key: scratch, operator: Exists}
            - {key: pinned, operator: DoesNotExist}
        ownerKinds: [Job]
"""
    custom = text.replace("  rules:\n", "  rules:\n" + extra, 1)
    assert custom != text
    path = tmp_path / "policy.yaml"
    path.write_text(custom)
    policy = load_policy(path)
    rule = next(r for r in policy.rules if r.name == "sweeps")
    cel = Rules(policy)._rule(rule, pods_only=True)
    assert "request.namespace.matches('^(?s:sweeps-.*)$')" in cel
    assert "request.namespace.matches('^(?s:batch-[0-9].)$')" in cel
    assert "request.namespace == 'evals'" in cel
    assert "(!('tier' in variables.labels) || !(variables.labels['tier'] in ['gold']))" in cel
    assert "'scratch' in variables.labels" in cel
    assert "!('pinned' in variables.labels)" in cel
    assert "variables.ownerKind in ['Job']" in cel


def test_kubernetes_kinds_are_checked_at_apply_time_only_as_kubernetes_keeps_them(
    tmp_path: Path,
) -> None:
    """A StatefulSet template given a role and a default class is the webhook's to check (the
    CEL reads no role or default of a template); a Job the policy leaves alone is checked by
    neither; the others as before."""
    text = (POLICY_DIR / "policy.yaml").read_text()
    statefulset = (
        "      kind: StatefulSet\n      podOwnerKind: StatefulSet\n      templates:\n"
        "        - path: spec.template\n"
    )
    job = "    - group: batch\n      kind: Job\n      podOwnerKind: Job\n      templates:\n"
    assert text.count(statefulset) == 1
    assert text.count(job) == 1
    custom = text.replace(
        statefulset, statefulset + "          role: server\n          defaultClass: serving\n"
    ).replace(
        job, job.replace("      templates:", "      ignore: its pods are checked\n      templates:")
    )
    path = tmp_path / "policy.yaml"
    path.write_text(custom)
    policy = load_policy(path)
    assert sorted(template_kinds(policy)) == [
        "CronJob",
        "Deployment",
        "ReplicaSet",
        "ReplicationController",
    ]
    exported = export(policy)
    validating = next(o for o in exported.objects if o["kind"] == "ValidatingAdmissionPolicy")
    resources = {
        r
        for rule in validating["spec"]["matchConstraints"]["resourceRules"]
        for r in rule["resources"]
    }
    assert resources == {"pods", "deployments", "replicasets", "cronjobs", "replicationcontrollers"}
    webhook_only = next(n for n in exported.notes if "by the webhook only" in n)
    assert webhook_only.startswith("Templates of StatefulSet.apps, RayCluster.ray.io,")
    assert "Job.batch," not in webhook_only
    assert "'StatefulSet'" not in _variables(validating)["template"]


def test_templates_are_read_where_each_kind_keeps_them() -> None:
    assert template_of("object", template_kinds(builtin_policy())) == (
        "(object.kind == 'Pod' ? object : object.kind == 'CronJob' ? "
        "object.spec.jobTemplate.spec.template : object.spec.template)"
    )


def test_the_whitespace_python_strips_is_listed_whole() -> None:
    assert sorted(PY_SPACE) == [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


@given(
    st.text(alphabet="ab-*?[]!^\\", max_size=8),
    st.lists(st.text(alphabet="ab-[]!^\\\n", max_size=6), max_size=20),
)
def test_globs_match_what_fnmatch_matches(pattern: str, candidates: list[str]) -> None:
    regex = glob_regex(pattern)
    for name in candidates:
        expected = fnmatch.fnmatchcase(name, pattern)
        actual = name == pattern if regex is None else re.fullmatch(regex, name) is not None
        assert actual == expected, (pattern, name, regex)


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("plain", "'plain'"),
        ("it's", '"it\'s"'),
        ("both ' and \"", "'both \\' and \"'"),
        ("back\\slash\n", "'back\\\\slash\\n'"),
    ],
)
def test_string_literals(value: str, literal: str) -> None:
    assert lit(value) == literal
    assert literal_value(lit("plain")) == "plain"
    assert literal_value("variables.x") is None


# --- output ----------------------------------------------------------------------------------


def test_yaml_output_has_the_header_the_notes_and_is_deterministic() -> None:
    policy = load_policy(POLICY_DIR)
    text = render_yaml(export(policy), source="policies/default")
    assert text.startswith(HEADER + "\n")
    assert text == render_yaml(export(load_policy(POLICY_DIR)), source="policies/default")
    comments = " ".join(line[1:].strip() for line in text.splitlines() if line.startswith("#"))
    for note in NOT_EXPRESSED:
        assert " ".join(note.split()) in " ".join(comments.replace("- ", "").split())
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert docs == export(policy).objects
    listing = json.loads(render_json(export(policy)))
    assert listing["kind"] == "List"
    assert listing["items"] == docs


@pytest.mark.parametrize("only", sorted(GENERATED))
def test_the_generated_components_are_up_to_date(only: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "export", "--policies", "policies/default",
         "--only", only, "-o", "yaml"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    generated = GENERATED[only]
    assert generated.read_text() == proc.stdout, (
        f"{generated.relative_to(REPO)} is out of date: run hack/export-admission-policies.sh"
    )
    prefix = "Validating" if only == "validating" else "Mutating"
    kinds = [d["kind"] for d in yaml.safe_load_all(proc.stdout) if d]
    assert kinds == [k for k in KINDS if k.startswith(prefix)]


def test_the_regeneration_script_writes_what_export_prints() -> None:
    script = (REPO / "hack" / "export-admission-policies.sh").read_text()
    assert "export --policies policies/default --only" in script
    for generated in GENERATED.values():
        assert str(generated.relative_to(REPO)) in script


def _kustomize() -> str:
    """A kustomize v5 binary, as hack/kustomize.sh finds (or builds) it."""
    script = REPO / "hack" / "kustomize.sh"
    proc = subprocess.run([str(script)], capture_output=True, text=True, check=True, cwd=REPO)
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.tools
@pytest.mark.parametrize("version", ["1.36.0", kubernetes_validate.latest_version()])
def test_the_components_render_and_match_the_kubernetes_schema(version: str) -> None:
    docs = []
    for generated in GENERATED.values():
        proc = subprocess.run(
            [_kustomize(), "build", str(generated.parent)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        docs += [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert sorted(d["kind"] for d in docs) == sorted(KINDS)
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "preemptguard"
        kubernetes_validate.validate(doc, version, strict=True)


# --- the command -----------------------------------------------------------------------------


def test_export_command_prints_yaml_and_lists_what_cel_cannot_do() -> None:
    result = CliRunner().invoke(main, ["export", "--policies", str(POLICY_DIR)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(HEADER)
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout) if d] == KINDS
    for note in NOT_EXPRESSED:
        assert note in result.stderr


def test_export_command_prints_a_json_list() -> None:
    result = CliRunner().invoke(main, ["export", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [o["kind"] for o in json.loads(result.stdout)["items"]] == KINDS


def test_export_command_refuses_an_invalid_policy(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text(
        (POLICY_DIR / "policy.yaml").read_text().replace("mode: enforce", "mode: strict")
    )
    result = CliRunner().invoke(main, ["export", "--policies", str(bad)])
    assert result.exit_code == 2
    assert "invalid policy" in result.stderr
    assert "spec.mode" in result.stderr
    assert result.stdout == ""
