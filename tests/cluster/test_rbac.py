"""The RBAC of ``manifests/components/observer/`` against the API calls the code makes, both
ways: the shipped rules are exactly the permissions ``webhook.cluster.access`` declares (the
audit role's are generated from the default policy's workload kinds), and the calls each part
makes through the fake API server are exactly those it declares (nothing undeclared, nothing
declared and never used). Plus the component's objects themselves."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from harness import REPO
from harness.manifests import Tree, find, prepare_tree
from tests.cluster import test_drill, test_observer
from tests.cluster.conftest import FakeClock
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.test_audit import _cluster_of
from webhook.cli.observe import observe_command
from webhook.cluster import audit as auditing
from webhook.cluster import drill, reports
from webhook.cluster.access import (
    AUDIT_BASE,
    AUDIT_REPORTS,
    DISCOVERY,
    DRILL,
    LEASE_ROLE,
    OBSERVER,
    OBSERVER_LEASE,
    audit_access,
    audit_rules,
    cluster_roles,
)
from webhook.engine.policy import Policy
from webhook.kube.access import Access, access_of
from webhook.kube.client import Cluster
from webhook.loading.policies import builtin_policy, load_policy

pytestmark = pytest.mark.tools

COMPONENT_EXAMPLE = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../self-managed
components:
  - ../../components/observer
"""
OBSERVER_ACCOUNT = ("preemptguard-observer", "preemptguard-system")

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return prepare_tree(tmp_path_factory.mktemp("manifests"))


@pytest.fixture(scope="module")
def rendered(tree: Tree) -> list[Obj]:
    """The self-managed overlay with the observer component, through a real kustomize."""
    example = tree.root / "overlays" / "with-observer"
    example.mkdir()
    (example / "kustomization.yaml").write_text(COMPONENT_EXAMPLE)
    import subprocess

    from harness.manifests import kustomize

    proc = subprocess.run([kustomize(), "build", str(example)], capture_output=True, text=True,
                          check=True)  # fmt: skip
    import yaml

    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _granted(rules: list[Obj]) -> set[Access]:
    return {
        Access(group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


CLUSTER_ROLES = cluster_roles(builtin_policy())


def test_each_shipped_cluster_role_grants_exactly_what_its_part_declares(
    rendered: list[Obj], tree: Tree
) -> None:
    roles = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "ClusterRole"}
    for name, declared in CLUSTER_ROLES.items():
        assert _granted(roles[name]["rules"]) == declared, name
        assert all("resourceNames" not in r for r in roles[name]["rules"]), name
    # The webhook's own role is untouched by the component.
    without = find(tree.render("self-managed"), "ClusterRole", "preemptguard")
    assert roles["preemptguard"]["rules"] == without["rules"]
    assert Access("", "namespaces", "get") in _granted(without["rules"])
    assert set(roles) == {"preemptguard", *CLUSTER_ROLES}


def test_the_audit_role_is_the_one_generated_from_the_default_policy(
    rendered: list[Obj],
) -> None:
    """The shipped rules, rule by rule, are ``audit_rules`` of policies/default (the policy the
    base ships): a kind added to the policy fails here until the role lists it too."""
    shipped_policy = load_policy(REPO / "policies" / "default")
    expected = audit_rules(shipped_policy)
    assert find(rendered, "ClusterRole", "preemptguard-audit")["rules"] == expected
    granted = _granted(expected)
    # Every kind the policy judges, at every version, and nothing of the kinds it leaves alone
    # but the DaemonSets the audit reads to trust DaemonSet pods.
    assert Access("ray.io", "rayservices", "list") in granted
    assert Access("trainer.kubeflow.org", "clustertrainingruntimes", "list") in granted
    assert Access("batch.volcano.sh", "jobs", "list") in granted
    assert Access("", "replicationcontrollers", "list") in granted
    assert Access("apps", "daemonsets", "list") in granted
    assert {a.verb for a in granted} == {"list"}
    assert granted == audit_access(shipped_policy) >= AUDIT_BASE


def test_a_policy_with_kinds_of_its_own_needs_a_role_that_lists_them(tmp_path: Path) -> None:
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(
        """\
apiVersion: preemptguard.together.ai/v1alpha1
kind: PlacementPolicy
metadata: {name: own}
spec:
  classes: [{name: interruptible, placement: preemptible}]
  workloadKinds:
    - group: example.com
      kind: Trainer
      templates: [{path: spec.template}]
    - group: apps
      kind: Deployment
      templates: [{path: spec.template}]
    - group: apps
      kind: StatefulSet
      ignore: not ours
      templates: [{path: spec.template}]
"""
    )
    rules = audit_rules(load_policy(policy_dir))
    assert rules == [
        {"apiGroups": [""], "resources": ["namespaces", "nodes", "pods"], "verbs": ["list"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments"], "verbs": ["list"]},
        {"apiGroups": ["example.com"], "resources": ["trainers"], "verbs": ["list"]},
    ]


def test_the_lease_role_is_one_lease_in_the_webhooks_namespace(rendered: list[Obj]) -> None:
    role = find(rendered, "Role", LEASE_ROLE)
    assert role["metadata"]["namespace"] == "preemptguard-system"
    assert _granted(role["rules"]) == OBSERVER_LEASE
    for rule in role["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == ["preemptguard-observer"]


def test_the_observer_account_is_bound_to_its_roles_and_nothing_else(rendered: list[Obj]) -> None:
    bound: set[tuple[str, str]] = set()
    for binding in rendered:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        for subject in binding["subjects"]:
            if (subject["name"], subject.get("namespace")) == OBSERVER_ACCOUNT:
                bound.add((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
    assert bound == {
        ("ClusterRole", "preemptguard-observer"),
        ("ClusterRole", "preemptguard-audit"),
        ("ClusterRole", "preemptguard-audit-reports"),
        ("Role", LEASE_ROLE),
    }
    # The drill deletes pods anywhere: bound to nobody until someone binds it.
    assert not [b for b in rendered if b.get("roleRef", {}).get("name") == "preemptguard-drill"]
    deployment = find(rendered, "Deployment", "preemptguard-observer")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == OBSERVER_ACCOUNT[0]


def test_the_observer_deployment_runs_flags_that_exist_on_standard_nodes(
    rendered: list[Obj],
) -> None:
    deployment = find(rendered, "Deployment", "preemptguard-observer")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["args"][0] == "observe"
    known = {opt for param in observe_command.params for opt in param.opts}
    flags = {a.split("=", 1)[0] for a in container["args"][1:]}
    assert flags <= known
    policies = find(rendered, "ConfigMap")["metadata"]["name"]
    assert spec["volumes"][0]["configMap"]["name"] == policies  # the hashed name, rewritten
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "together.ai/compute-class", "operator": "NotIn", "values": ["preemptible"]}
    ]
    assert deployment["spec"]["replicas"] == 2


@pytest.mark.parametrize("version", ["1.30", kubernetes_validate.latest_version()])
def test_the_component_objects_match_the_kubernetes_schema(
    rendered: list[Obj], version: str
) -> None:
    component = [o for o in rendered if "observer" in o["metadata"]["name"]
                 or o["metadata"]["name"] in CLUSTER_ROLES]  # fmt: skip
    assert len(component) == 13
    for obj in component:
        kubernetes_validate.validate(obj, version, strict=True)


# --- the calls the code makes ----------------------------------------------------------------


def test_access_of_derives_the_verbs_the_rbac_authorizer_checks() -> None:
    assert access_of("GET", "/api/v1/pods", "limit=500") == Access("", "pods", "list")
    assert access_of("GET", "/api/v1/pods", "watch=true") == Access("", "pods", "watch")
    assert access_of("GET", "/api/v1/namespaces/x") == Access("", "namespaces", "get")
    assert access_of("GET", "/api/v1/namespaces/x/pods") == Access("", "pods", "list")
    assert access_of("DELETE", "/api/v1/namespaces/x/pods/p") == Access("", "pods", "delete")
    assert access_of("PATCH", "/apis/apps/v1/namespaces/x/deployments/d/scale") == Access(
        "apps", "deployments/scale", "patch"
    )
    assert access_of("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l") == Access(
        "coordination.k8s.io", "leases", "update"
    )
    # Discovery is a non-resource URL (system:discovery grants it to everyone authenticated).
    assert access_of("GET", "/apis") == Access("", "/apis", "get")
    assert access_of("GET", "/apis/ray.io/v1") == Access("", "/apis/ray.io/v1", "get")
    assert access_of("GET", "/api/v1") == Access("", "/api/v1", "get")
    assert access_of("GET", "/apis/ray.io/v1/rayjobs") == Access("ray.io", "rayjobs", "list")
    assert str(access_of("GET", "/apis")) == "get /apis"


def test_the_calls_each_part_makes_are_exactly_the_declared_ones(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy, tmp_path: Path
) -> None:
    # audit, then its reports
    _cluster_of(fake, policy)
    cluster = connect()
    result = auditing.audit_cluster(cluster, auditing.Scope(), policy)
    # The fake serves every kind of the default policy: each is listed, once.
    assert cluster.calls == audit_access(policy) | DISCOVERY
    reports.write(cluster, result, policy, now=0)
    assert cluster.calls - audit_access(policy) - DISCOVERY == AUDIT_REPORTS

    # the drill, through to the uncordon, on a clock of its own
    clock = FakeClock()
    timed = FakeApiServer(now=clock.now)
    try:
        test_drill._node_with_pods(timed, policy)
        drilling = Cluster.connect(str(timed.kubeconfig(tmp_path / "drill-kubeconfig")))
        the_plan = drill.plan(drilling, "pre-1", policy, wait_seconds=5)
        drill.execute(drilling, the_plan, clock, uncordon=True)
        assert drilling.calls == DRILL
        drilling.close()
    finally:
        timed.close()


def test_the_observer_makes_exactly_the_calls_it_declares(
    fake: FakeApiServer, connect: Callable[[], Cluster], policy: Policy
) -> None:
    test_observer._cluster(fake, policy)
    observers = test_observer.Observers(connect, policy)
    run = observers.start("observer-a", audit_interval=600, audit_reports=True)
    try:
        test_observer._wait(run.observer.leading.is_set, what="leadership")
        test_observer._reclaim(fake, connect(), "sweep", "web-7d9-x", "eval", "stuck")
        fake.remove("Pod", "web-7d9-x", "team")
        fake.remove("Pod", "stuck", "research")
        test_observer._wait(lambda: run.displaced() == 2, what="two outcomes")
        time.sleep(FAST_RENEWAL)  # at least one renewal of the Lease
        run.observer.audit_once()
    finally:
        run.halt()
    # The periodic audit and its reports run with the audit roles bound to the observer.
    assert run.cluster.calls == (
        OBSERVER | OBSERVER_LEASE | audit_access(policy) | DISCOVERY | AUDIT_REPORTS
    )


FAST_RENEWAL = 3 * test_observer.FAST_LEASE.retry
