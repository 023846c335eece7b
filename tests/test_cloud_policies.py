"""The policies shipped for other clouds' spot capacity (``policies/gke-spot``,
``karpenter-spot``, ``eks-spot``, ``aks-spot``).

- Every policy folder under ``policies/`` loads, and its test cases pass through the runner
  ``preemptguard test`` uses.
- Each cloud policy is the default policy but for its node label, taint and grace period.
- Each one places pods by its cloud's label and taint, written out here rather than read back
  from the policy: an interruptible pod requires the cloud's spot nodes and tolerates their
  taint, a serving pod that selects them is refused, and grace periods fit the cloud's notice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import POLICIES
from webhook.admission.core import Judgement, Subject, judge
from webhook.cli.policy_tests import policy_dirs, run_policy_dir
from webhook.cluster.inventory import PREEMPTIBLE, STANDARD, node_class
from webhook.engine.decision import NamespaceMeta, Obj
from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy, load_policy

CHECKPOINT = "together.ai/checkpoint-seconds"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Cloud:
    """What a cloud's spot capacity looks like to Kubernetes, and the window it leaves."""

    policy: str  # the folder under policies/
    key: str  # the node label
    spot: str  # its value on spot nodes
    other: str  # a value it has on nodes that are not spot
    taint: dict[str, str]  # the toleration an interruptible pod gets
    max_grace: int
    margin: int

    @property
    def path(self) -> Path:
        return POLICIES / self.policy


def _toleration(key: str, value: str) -> dict[str, str]:
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


CLOUDS = [
    # GKE: Spot nodes are labelled cloud.google.com/gke-spot=true (Autopilot taints them with
    # the same pair); graceful node shutdown gives pods 15 s of the 30 s notice.
    Cloud(
        "gke-spot",
        "cloud.google.com/gke-spot",
        "true",
        "false",
        _toleration("cloud.google.com/gke-spot", "true"),
        15,
        5,
    ),
    # Karpenter: spot, on-demand or reserved; no taint of its own, the policy names
    # preemptguard's; EC2's 2-minute notice.
    Cloud(
        "karpenter-spot",
        "karpenter.sh/capacity-type",
        "spot",
        "on-demand",
        _toleration("together.ai/compute-class", "preemptible"),
        120,
        30,
    ),
    # EKS managed node groups: SPOT or ON_DEMAND; no taint of their own; 2-minute notice.
    Cloud(
        "eks-spot",
        "eks.amazonaws.com/capacityType",
        "SPOT",
        "ON_DEMAND",
        _toleration("together.ai/compute-class", "preemptible"),
        120,
        30,
    ),
    # AKS: spot node pools are labelled and tainted scalesetpriority=spot; 30 s notice.
    Cloud(
        "aks-spot",
        "kubernetes.azure.com/scalesetpriority",
        "spot",
        "regular",
        _toleration("kubernetes.azure.com/scalesetpriority", "spot"),
        30,
        10,
    ),
]
BY_CLOUD = [pytest.param(cloud, id=cloud.policy) for cloud in CLOUDS]


def _judge(policy: Policy, obj: Obj) -> Judgement:
    meta = obj["metadata"]
    subject = Subject(obj=obj, namespace=meta.get("namespace", "default"))
    return judge(subject, policy, lambda _: NamespaceMeta())


def _pod(
    workload: str, spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload}-0",
            "namespace": "team-a",
            "annotations": {"together.ai/workload": workload, **(annotations or {})},
        },
        "spec": {
            **(spec or {}),
            "containers": [{"name": "main", "image": "ghcr.io/example/app:1.0"}],
        },
    }


def _requires(cloud: Cloud, operator: str) -> dict[str, Any]:
    return {"key": cloud.key, "operator": operator, "values": [cloud.spot]}


# --- every policy folder ------------------------------------------------------------------------


@pytest.mark.parametrize("policy_dir", policy_dirs(POLICIES), ids=lambda p: p.name)
def test_every_policy_loads_and_passes_its_own_cases(policy_dir: Path) -> None:
    policy = load_policy(policy_dir)
    assert policy.name == policy_dir.name
    results = run_policy_dir(policy_dir)
    assert results, f"{policy_dir} has no test cases"
    failed = {result.case.name: result.failures for result in results if not result.passed}
    assert failed == {}


def test_every_cloud_policy_is_shipped_with_cases() -> None:
    shipped = {p.name for p in policy_dirs(POLICIES)}
    assert {cloud.policy for cloud in CLOUDS} <= shipped
    for cloud in CLOUDS:
        cases = sorted(p.name for p in (cloud.path / "tests").glob("*.yaml"))
        assert cases == ["grace.yaml", "placement.yaml", "refusals.yaml", "tolerations.yaml"]


# --- what each cloud policy is ------------------------------------------------------------------


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_a_cloud_policy_is_the_default_one_but_for_its_capacity(cloud: Cloud) -> None:
    default = builtin_policy()
    policy = load_policy(cloud.path)
    assert (policy.node_label.key, policy.node_label.preemptible) == (cloud.key, cloud.spot)
    assert policy.node_label.standard == cloud.other
    assert (policy.max_grace_seconds, policy.checkpoint_margin_seconds) == (
        cloud.max_grace,
        cloud.margin,
    )
    same = dataclasses.replace(
        policy,
        name=default.name,
        node_label=default.node_label,
        taint=default.taint,
        max_grace_seconds=default.max_grace_seconds,
        checkpoint_margin_seconds=default.checkpoint_margin_seconds,
    )
    assert same == default


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_the_clouds_spot_nodes_are_the_policys_preemptible_nodes(cloud: Cloud) -> None:
    policy = load_policy(cloud.path)

    def node(labels: dict[str, str]) -> Obj:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels}}

    assert node_class(node({cloud.key: cloud.spot}), policy) == PREEMPTIBLE
    assert node_class(node({cloud.key: cloud.other}), policy) == STANDARD
    assert node_class(node({}), policy) == STANDARD
    assert node_class(node({"together.ai/compute-class": "preemptible"}), policy) == STANDARD


# --- placement ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_an_interruptible_pod_requires_the_clouds_spot_nodes_and_tolerates_them(
    cloud: Cloud,
) -> None:
    judged = _judge(load_policy(cloud.path), _pod("interruptible"))
    assert judged.decision.allowed
    spec = judged.decision.mutated["spec"]
    terms = spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [_requires(cloud, "In")]}]
    assert spec["tolerations"] == [cloud.taint]


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_a_flexible_pod_prefers_the_clouds_spot_nodes_and_tolerates_them(cloud: Cloud) -> None:
    judged = _judge(load_policy(cloud.path), _pod("flexible"))
    spec = judged.decision.mutated["spec"]
    assert REQUIRED not in spec["affinity"]["nodeAffinity"]
    preferred = spec["affinity"]["nodeAffinity"][PREFERRED]
    assert preferred == [
        {"weight": 100, "preference": {"matchExpressions": [_requires(cloud, "In")]}}
    ]
    assert spec["tolerations"] == [cloud.taint]


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_a_serving_pod_is_kept_off_the_clouds_spot_nodes_without_a_toleration(
    cloud: Cloud,
) -> None:
    judged = _judge(load_policy(cloud.path), _pod("serving"))
    assert judged.decision.allowed
    spec = judged.decision.mutated["spec"]
    terms = spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [_requires(cloud, "NotIn")]}]
    assert "tolerations" not in spec


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_a_serving_pod_selecting_the_clouds_spot_label_is_refused(cloud: Cloud) -> None:
    pod = _pod("serving", {"nodeSelector": {cloud.key: cloud.spot}})
    judged = _judge(load_policy(cloud.path), pod)
    assert not judged.decision.allowed
    assert judged.patch == []
    (reason,) = judged.decision.violations
    assert reason.startswith(
        "class serving must run on standard nodes, but the pod requires preemptible capacity "
        f"through its nodeSelector {cloud.key}={cloud.spot}"
    )
    # The same pod is no concern of the default policy: its label is another one.
    assert _judge(builtin_policy(), pod).decision.allowed


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_a_serving_pod_requiring_the_clouds_spot_label_by_affinity_is_refused(
    cloud: Cloud,
) -> None:
    terms = [{"matchExpressions": [_requires(cloud, "In")]}]
    pod = _pod("serving", {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}})
    judged = _judge(load_policy(cloud.path), pod)
    assert not judged.decision.allowed
    assert any("required node affinity terms" in v for v in judged.decision.violations)


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_an_interruptible_pod_selecting_other_capacity_is_refused(cloud: Cloud) -> None:
    pod = _pod("interruptible", {"nodeSelector": {cloud.key: cloud.other}})
    judged = _judge(load_policy(cloud.path), pod)
    assert not judged.decision.allowed
    (reason,) = judged.decision.violations
    assert reason.startswith(
        f"class interruptible runs only on preemptible nodes ({cloud.key}={cloud.spot}), but "
        f"they are excluded by the pod's nodeSelector {cloud.key}={cloud.other}"
    )


# --- grace period -------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_the_grace_period_fits_the_clouds_notice(cloud: Cloud) -> None:
    policy = load_policy(cloud.path)
    long = _judge(policy, _pod("interruptible", {"terminationGracePeriodSeconds": 3600}))
    assert long.decision.mutated["spec"]["terminationGracePeriodSeconds"] == cloud.max_grace
    # The API server's default (30 s) is lowered only where the cloud gives less.
    default = _judge(policy, _pod("interruptible", {"terminationGracePeriodSeconds": 30}))
    grace = default.decision.mutated["spec"]["terminationGracePeriodSeconds"]
    assert grace == min(30, cloud.max_grace)


@pytest.mark.parametrize("cloud", BY_CLOUD)
def test_a_checkpoint_fits_the_clouds_notice_or_is_refused(cloud: Cloud) -> None:
    policy = load_policy(cloud.path)
    longest = cloud.max_grace - cloud.margin
    short = {"terminationGracePeriodSeconds": 5}
    fits = _judge(policy, _pod("interruptible", short, {CHECKPOINT: f"{longest}"}))
    assert fits.decision.allowed
    assert fits.decision.mutated["spec"]["terminationGracePeriodSeconds"] == cloud.max_grace
    over = _pod("interruptible", None, {CHECKPOINT: f"{longest + 1}"})
    refused = _judge(policy, over)
    assert not refused.decision.allowed
    (reason,) = refused.decision.violations
    assert f"needs {cloud.max_grace + 1} s, more than the {cloud.max_grace} s" in reason
    assert f"checkpoint in pieces that take at most {longest} s" in reason
