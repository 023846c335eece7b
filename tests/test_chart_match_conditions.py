"""The Helm chart's matchConditions follow the policy it installs: the pod hooks are skipped for a
pod created by exactly the DaemonSet controllers that policy trusts (its
``spec.trustedRequesters.daemonSetControllers``, or the engine's defaults when it names none),
so a policy of one's own (``--set-file policy.content=...``) never leaves the API server
skipping a pod that the policy would check. The kustomize base names the default policy's
(tests/test_manifests.py); tests/e2e/test_match_conditions.py shows the condition on 1.37.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.test_helm_chart import REPO, template
from webhook.loading.policies import load_policy

pytestmark = pytest.mark.tools

POLICY = REPO / "policies" / "default" / "policy.yaml"
POD_HOOKS = ("pods.mutate.preemptguard.together.ai", "pods.validate.preemptguard.together.ai")
LISTED = re.compile(r"request\.userInfo\.username in (\[[^\]]*\])")


def _conditions(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    return {
        hook["name"]: hook.get("matchConditions", [])
        for obj in objects
        if obj["kind"].endswith("WebhookConfiguration")
        for hook in obj["webhooks"]
    }


def _listed(expression: str) -> list[str]:
    found = LISTED.search(expression)
    assert found is not None, expression
    names: list[str] = json.loads(found.group(1))
    return names


TRUSTED = {
    "the policy's own": '    daemonSetControllers: ["system:serviceaccount:ds-system:ds", "ds-bot"]\n',
    # Written into the CEL as JSON strings: quotes and backslashes stay part of the name.
    "odd characters": '    daemonSetControllers: ["o\'brien", \'back\\slash "quoted"\']\n',
    "none trusted": "    daemonSetControllers: []\n",
    "nodes only (the default controllers)": "    nodes: {group: system:nodes}\n",
}


@pytest.mark.parametrize("case", list(TRUSTED))
def test_the_chart_skips_the_pod_hooks_for_the_controllers_its_policy_trusts(
    case: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text().rstrip("\n") + "\n  trustedRequesters:\n" + TRUSTED[case])
    trusted = list(load_policy(tmp_path).trusted.daemonset_controllers)
    conditions = _conditions(template("--set-file", f"policy.content={policy}"))
    for name, hook_conditions in conditions.items():
        if name not in POD_HOOKS:
            assert not hook_conditions, name
            continue
        (condition,) = hook_conditions
        assert _listed(condition["expression"]) == trusted, name
