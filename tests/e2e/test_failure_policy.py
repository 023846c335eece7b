"""What pod creation does while the webhook cannot be reached, with the shipped failure policies
(every hook Ignore) and with the fail-closed component (pod validation Fail).

The configurations registered by the session are pointed at a closed port for the duration of
each test and restored afterwards.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness import cluster
from harness.cluster import CLASS_LABEL, PLACEMENT, PREEMPTIBLE, STANDARD
from harness.kube import Kube, KubeError
from harness.manifests import Tree
from harness.processes import free_port, wait_until
from harness.webhook import Replace, WebhookServer, local_webhook_configurations

pytestmark = pytest.mark.e2e


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def _unreachable(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    dead = f"https://127.0.0.1:{free_port()}"
    configs = copy.deepcopy(configs)
    for config in configs:
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["url"].split("/", 3)[3]
            hook["clientConfig"]["url"] = f"{dead}/{path}"
    return configs


def _wait_unplaced(kube: Kube, namespace: str) -> None:
    """Until the API server uses the new configurations: mutation no longer happens."""

    def unplaced() -> bool:
        try:
            body = kube.create(
                _pods(namespace), cluster.pod("probe", workload="interruptible"), dry_run=True
            ).body
        except KubeError:
            return True  # refused for the call error: the new configuration is in use
        return PLACEMENT not in body["metadata"].get("annotations", {})

    wait_until(unplaced, timeout=30, what="the unreachable configuration to take effect")


def test_while_the_webhook_is_unreachable_pods_are_admitted_but_not_placed(
    kube: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    base_objects: list[dict[str, Any]],
    namespace: str,
    replace_configurations: Replace,
) -> None:
    shipped = local_webhook_configurations(base_objects, webhook.url, webhook.ca_file.read_bytes())
    replace_configurations(_unreachable(shipped))
    _wait_unplaced(kube, namespace)

    # Interruptible work is created without toleration or affinity: the taint keeps it on
    # standard nodes, and the missing placement annotation tells which pods to recreate.
    kube.create(_pods(namespace), cluster.pod("sweep", workload="interruptible"))
    sweep = cluster.wait_scheduled(kube, namespace, "sweep")
    assert PLACEMENT not in sweep["metadata"]["annotations"]
    assert nodes[sweep["spec"]["nodeName"]] == STANDARD

    # Refusals are not enforced: a serving pod that asks for preemptible nodes gets them.
    kube.create(
        _pods(namespace),
        cluster.pod(
            "web",
            workload="serving",
            nodeSelector={CLASS_LABEL: PREEMPTIBLE},
            tolerations=[
                {"key": CLASS_LABEL, "operator": "Exists", "effect": "NoSchedule"},
            ],
        ),
    )
    web = cluster.wait_scheduled(kube, namespace, "web")
    assert nodes[web["spec"]["nodeName"]] == PREEMPTIBLE


def test_with_the_fail_closed_component_pod_creates_wait_for_the_webhook(
    kube: Kube,
    webhook: WebhookServer,
    manifests: Tree,
    namespace: str,
    replace_configurations: Replace,
) -> None:
    strict = local_webhook_configurations(
        manifests.render("self-managed+fail-closed"), webhook.url, webhook.ca_file.read_bytes()
    )
    replace_configurations(_unreachable(strict))
    _wait_unplaced(kube, namespace)

    with pytest.raises(KubeError) as failure:
        kube.create(_pods(namespace), cluster.pod("sweep", workload="interruptible"))
    assert (
        'failed calling webhook "pods.validate.preemptguard.together.ai"' in failure.value.message
    )
    assert not kube.exists(f"{_pods(namespace)}/sweep")
    # Workload templates still fail open: their pods are what the strict hook guards.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "api"}},
            "template": cluster.pod_template({"app": "api"}, workload="serving"),
        },
    }
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)
    assert kube.exists(f"/apis/apps/v1/namespaces/{namespace}/deployments/api")
