"""The webhook rules that send every workload kind of a policy to the validating hook.

A kind the policy lists is checked at apply time only if the API server sends it: the
``workloads.validate`` webhook of the ValidatingWebhookConfiguration must name its group and
resource. ``workload_rules`` derives those rules from the policy, so the shipped manifests,
the Helm chart and a user's own kinds stay in step with what the engine judges.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.engine.evaluation import kinds_of
from webhook.engine.policy import Policy, WorkloadKind

CONFIGURATION = "preemptguard"
WORKLOADS_WEBHOOK = "workloads.validate.preemptguard.together.ai"
OPERATIONS = ["CREATE", "UPDATE"]


def workload_rules(policy: Policy) -> list[dict[str, Any]]:
    """One rule per API group and scope, its resources in the order the policy lists them.

    Every version is matched: a kind served at several versions (``kubeflow.org`` MPIJob at
    v1 and v2beta1) keeps its templates at the paths the policy names. Kinds left alone
    (``ignore``) are not sent.
    """
    return [
        {
            "operations": list(OPERATIONS),
            "apiGroups": [group],
            "apiVersions": ["*"],
            "resources": resources,
            "scope": scope,
        }
        for (group, scope), resources in _grouped(
            k for k in kinds_of(policy).values() if k.ignore is None
        ).items()
    ]


def _grouped(kinds: Iterable[WorkloadKind]) -> dict[tuple[str, str], list[str]]:
    grouped: dict[tuple[str, str], list[str]] = {}
    for kind in kinds:
        scope = "Cluster" if kind.cluster_scoped else "Namespaced"
        resources = grouped.setdefault((kind.group, scope), [])
        if kind.plural not in resources:
            resources.append(kind.plural)
    return grouped


def webhook_rules_patch(policy: Policy) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration patch (strategic merge: webhooks merge by name)
    that sets the workloads webhook's rules to ``workload_rules(policy)``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION},
        "webhooks": [{"name": WORKLOADS_WEBHOOK, "rules": workload_rules(policy)}],
    }
