"""A placement policy compiled to ``admissionregistration.k8s.io/v1`` admission policies.

``export(policy)`` returns the objects (a ValidatingAdmissionPolicy and a
MutatingAdmissionPolicy, each with its binding) and the notes on what they do not do as the
webhook does. Pure: a policy in, plain dicts and strings out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.engine.evaluation import kinds_of
from webhook.engine.policy import Mode, Policy
from webhook.export.cel import bounded
from webhook.export.mutation import Mutation
from webhook.export.rules import TEMPLATE_RESOURCES, Rules, V, template_kinds

API_VERSION = "admissionregistration.k8s.io/v1"
NAME_LABEL = "kubernetes.io/metadata.name"
LABELS = {
    "app.kubernetes.io/name": "preemptguard",
    "app.kubernetes.io/component": "admission-policy",
}

# What the exported policies leave to the webhook, or do differently. Printed on stderr and
# written as comments into the YAML output.
NOT_EXPRESSED = (
    "Warnings are not given: grace periods lowered, classification sources that disagree, "
    "untrusted DaemonSet or mirror-pod claims, misspelt or misplaced annotations, and what a "
    "workload template's pods will get. Only the webhook gives them, with metrics, audit "
    "annotations and one log line per admission.",
    "The webhook's validating hook also refuses a classified pod that reaches validation "
    "without its placement (another mutating webhook undid it); the exported "
    "ValidatingAdmissionPolicy does not, so that it can be installed without the "
    "MutatingAdmissionPolicy.",
    "Refusal messages are the webhook's, but the API server puts its own prefix before them "
    "(ValidatingAdmissionPolicy '...' with binding '...' denied request:) and shows only the "
    "first failing validation: all refusals are therefore joined into one message.",
    "Quoted values are cut as the webhook cuts them, but a value holding backslashes or "
    "characters Python escapes is quoted as it is rather than escaped as Python's repr() does.",
    "A Gt/Lt bound on the compute-class label counts as a number when it is at most 18 "
    "digits with an optional sign; the webhook, as Kubernetes, also reads 19 digits.",
    "An expression that exceeds CEL's cost limits fails, and failurePolicy: Fail refuses the "
    "pod with the API server's message: a pod whose expressions on the compute-class label "
    "list some hundreds of values in all, repeats counted, or that has many hundreds of "
    "required terms (the webhook checks up to 100 distinct values and 1,000 terms).",
    "Large reviews are bounded by the API server's CEL cost limits, not by the webhook's "
    "gate; the webhook's busy refusals have no counterpart.",
    "A pod update that gives the pod a class that must run on standard nodes while its node "
    "constraints still admit preemptible nodes is refused as the webhook refuses it "
    "(class-changed), but its message names the classes without the source of each.",
    "A pod of a batch class (placed on preemptible nodes, with a priority class of its own) "
    "above the priority of a pod that names no class is refused: the webhook, when it answers, "
    "moves it to its class's priority class instead; CEL cannot read PriorityClasses.",
    "Jobs are not mutated: the podFailurePolicy rule that keeps reclaims from counting against "
    "a Job's backoffLimit (and podReplacementPolicy Failed) comes from the webhook only.",
)


@dataclass(frozen=True)
class Export:
    """The admission policies for one placement policy, and what they leave to the webhook."""

    objects: list[dict[str, Any]]
    notes: tuple[str, ...]


def names(policy: Policy) -> tuple[str, str]:
    """The names of the validating and the mutating policy (and of their bindings)."""
    return f"preemptguard-{policy.name}", f"preemptguard-{policy.name}-placement"


def export(policy: Policy) -> Export:
    rules = Rules(policy)
    validating, mutating = names(policy)
    objects = [
        _validating_policy(rules, validating),
        _binding(
            "ValidatingAdmissionPolicyBinding", validating, policy, warn=policy.mode is Mode.WARN
        ),
        _mutating_policy(rules, mutating),
        _binding("MutatingAdmissionPolicyBinding", mutating, policy),
    ]
    return Export(
        objects=objects,
        notes=NOT_EXPRESSED + _custom_kinds(policy) + _scheduling(policy),
    )


def _scheduling(policy: Policy) -> tuple[str, ...]:
    """Which classes' priority and scheduler the exported policies leave to the webhook."""
    named = [c.name for c in policy.classes.values() if c.priority_class_name or c.scheduler_name]
    if not named:
        return ()
    return (
        f"The priority class and scheduler of {', '.join(named)} are set by the webhook only: "
        "the API server resolves priorityClassName into spec.priority before admission "
        "policies run, and CEL cannot read PriorityClasses to set both consistently. Pods "
        "placed by the exported policies keep the priority they name (or the cluster's default).",
    )


def _custom_kinds(policy: Policy) -> tuple[str, ...]:
    """Which listed workload kinds the exported policies leave to the webhook."""
    checked = {(k.group, k.kind) for k in template_kinds(policy).values()}
    custom = [
        k.name
        for k in kinds_of(policy).values()
        if k.ignore is None and (k.group, k.kind) not in checked
    ]
    if not custom:
        return ()
    return (
        f"Templates of {', '.join(custom)} are checked at apply time by the webhook only; "
        "their pods are checked by the exported policies when they are created. Rules that "
        "match template roles (templateRoles), and template defaults, reach those pods only "
        "through the labels in the template's podSelector.",
    )


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": dict(LABELS)}


def _namespace_selector(policy: Policy) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": list(policy.excluded_namespaces)}
        ]
    }


def _variables(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "expression": expression} for name, expression in pairs]


def _validating_policy(rules: Rules, name: str) -> dict[str, Any]:
    policy = rules.policy
    workload_rules: dict[str, list[str]] = {}
    for kind in template_kinds(policy):
        group, resource = TEMPLATE_RESOURCES[kind]
        workload_rules.setdefault(group, []).append(resource)
    resource_rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        },
        *(
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "resources": resources,
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
            for group, resources in workload_rules.items()
        ),
    ]
    message = f"{V}refusals.join('; ')"
    if policy.mode is Mode.WARN:
        message = f"'would be refused in enforce mode: ' + {message}"
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(name),
        "spec": {
            # An expression that cannot be evaluated refuses: the webhook, too, refuses what it
            # cannot check in time.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": resource_rules,
                "namespaceSelector": _namespace_selector(policy),
                "matchPolicy": "Equivalent",
            },
            "matchConditions": [
                {"name": "not-an-excluded-namespace", "expression": rules.not_excluded()},
                {"name": "not-a-trusted-daemonset-or-mirror-pod", "expression": rules.not_exempt()},
                {"name": "template-changed-on-update", "expression": rules.template_changed()},
            ],
            "variables": _variables(rules.validating_variables()),
            "validations": [
                {
                    "expression": f"size({V}refusals) == 0",
                    "messageExpression": bounded(message),
                    "reason": "Forbidden",
                }
            ],
        },
    }


def _mutating_policy(rules: Rules, name: str) -> dict[str, Any]:
    policy = rules.policy
    return {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": _meta(name),
        "spec": {
            "failurePolicy": "Fail",
            # Another mutation may add tolerations or affinity after this one; the patch is
            # idempotent, so running again narrows what they added.
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": _namespace_selector(policy),
                "matchPolicy": "Equivalent",
            },
            "matchConditions": [
                {"name": "not-an-excluded-namespace", "expression": rules.not_excluded()},
                {"name": "not-a-trusted-daemonset-or-mirror-pod", "expression": rules.not_exempt()},
            ],
            "variables": _variables(rules.variables(pods_only=True)),
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {"expression": Mutation(rules).expression()},
                }
            ],
        },
    }


def _binding(kind: str, name: str, policy: Policy, *, warn: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "policyName": name,
        "matchResources": {"namespaceSelector": _namespace_selector(policy)},
    }
    if kind == "ValidatingAdmissionPolicyBinding":
        spec["validationActions"] = ["Warn"] if warn else ["Deny"]
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": _meta(name), "spec": spec}
