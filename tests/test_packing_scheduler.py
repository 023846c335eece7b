"""The packing scheduler component (manifests/components/packing-scheduler), rendered by
kustomize: schema-valid for current Kubernetes, its parts referring to each other (the
configuration it mounts, the Lease its Role names, the identity its bindings grant), the
scoring it configures, and the harness's translation of it for 1.20 (harness.scheduling).

The end-to-end suite runs it as a real kube-scheduler on 1.37 and 1.20, with the component's
RBAC applied, and shows it packing (tests/e2e/test_scheduling.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from harness import scheduling
from harness.manifests import NAMESPACE, Tree, find, prepare_tree
from harness.scheduling import SchedulerError

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[1]
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
ACCOUNT = scheduling.ACCOUNT
GPU = "nvidia.com/gpu"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return prepare_tree(tmp_path_factory.mktemp("manifests"))


@pytest.fixture(scope="module")
def install(tree: Tree) -> list[Obj]:
    """An install with the component added to an overlay, as its kustomization says."""
    return scheduling.render_component(tree)


@pytest.fixture(scope="module")
def objects(install: list[Obj]) -> list[Obj]:
    return scheduling.component_objects(install)


@pytest.fixture(scope="module")
def config(install: list[Obj]) -> Obj:
    return scheduling.shipped_configuration(install)


def _spec(objects: list[Obj]) -> Obj:
    spec: Obj = find(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def _container(objects: list[Obj]) -> Obj:
    container: Obj
    (container,) = _spec(objects)["containers"]
    return container


# --- the objects -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_matches_the_kubernetes_schema(objects: list[Obj], version: str) -> None:
    problems = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path) or "(root)"
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {where}: {exc.message}")
    assert not problems, "\n".join(problems)


def test_the_component_adds_exactly_its_own_objects(install: list[Obj], objects: list[Obj]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    config_map = next(n for k, n in kinds if k == "ConfigMap")
    assert config_map.startswith(scheduling.CONFIG_MAP_PREFIX)
    assert kinds == sorted(
        [
            ("ServiceAccount", ACCOUNT),
            ("ClusterRoleBinding", ACCOUNT),
            ("ClusterRoleBinding", f"{ACCOUNT}-volumes"),
            ("RoleBinding", f"{ACCOUNT}-authentication-reader"),
            ("Role", f"{ACCOUNT}-lease"),
            ("RoleBinding", f"{ACCOUNT}-lease"),
            ("ConfigMap", config_map),
            ("Deployment", ACCOUNT),
            ("PodDisruptionBudget", ACCOUNT),
        ]
    )
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] == "ClusterRoleBinding":
            assert namespace is None
        elif obj["metadata"]["name"] == f"{ACCOUNT}-authentication-reader":
            assert namespace == "kube-system"
        else:
            assert namespace == NAMESPACE, obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "preemptguard"
    # It adds to an install and changes none of it.
    assert len(install) == len({(o["kind"], o["metadata"]["name"]) for o in install})


def test_it_runs_with_the_rights_of_a_scheduler_and_its_own_lease(
    objects: list[Obj], config: Obj
) -> None:
    subject = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
    granted = {
        (o["kind"], o["metadata"].get("namespace"), o["roleRef"]["kind"], o["roleRef"]["name"])
        for o in objects
        if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}
    }
    assert granted == {
        ("ClusterRoleBinding", None, "ClusterRole", "system:kube-scheduler"),
        ("ClusterRoleBinding", None, "ClusterRole", "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "Role", "extension-apiserver-authentication-reader"),
        ("RoleBinding", NAMESPACE, "Role", f"{ACCOUNT}-lease"),
    }
    for obj in objects:
        if obj["kind"] in {"ClusterRoleBinding", "RoleBinding"}:
            assert obj["subjects"] == subject, obj["metadata"]["name"]
    assert _spec(objects)["serviceAccountName"] == ACCOUNT
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceLock"] == "leases"
    role = find(objects, "Role")
    assert role["metadata"]["namespace"] == election["resourceNamespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [election["resourceName"]],
            "verbs": ["get", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    # Not the default scheduler's Lease, nor the observer's.
    assert election["resourceName"] not in {"kube-scheduler", "preemptguard-observer"}


def test_it_reads_the_shipped_configuration_in_cluster(objects: list[Obj], config: Obj) -> None:
    container = _container(objects)
    (flag,) = [a for a in container["args"] if a.startswith("--config=")]
    path = Path(flag.removeprefix("--config="))
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    mount = mounts[str(path.parent)]
    assert mount["readOnly"] is True
    volume = {v["name"]: v for v in _spec(objects)["volumes"]}[mount["name"]]
    config_map = find(objects, "ConfigMap")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert yaml.safe_load(config_map["data"][path.name]) == config
    # In the pod: its ServiceAccount's in-cluster credentials.
    assert config["clientConnection"]["kubeconfig"] == ""
    assert container["command"] == ["kube-scheduler"]
    assert container["args"] == [flag]


def test_it_runs_restricted_on_standard_nodes_probed_on_its_secure_port(
    objects: list[Obj],
) -> None:
    spec = _spec(objects)
    container = _container(objects)
    image, tag = container["image"].rsplit(":", 1)
    assert image == "registry.k8s.io/kube-scheduler"
    assert tag.startswith("v1.")
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "together.ai/compute-class", "operator": "NotIn", "values": ["preemptible"]}
            ]
        }
    ]
    assert spec["priorityClassName"] == "preemptguard"
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"]) == ("https", 10259)
    for probe, path in (
        ("startupProbe", "/livez"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS"), probe
    deployment = find(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


# --- the configuration -----------------------------------------------------------------------


def test_the_profile_packs_by_gpus_and_turns_off_what_spreads(config: Obj) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    scoring = scheduling.scoring(config)
    assert scoring.scheduler_name == scheduling.SCHEDULER_NAME
    assert scoring.strategy == "MostAllocated"
    weights = scoring.resource_weights
    assert set(weights) == {GPU, "cpu", "memory"}
    assert weights[GPU] > max(weights["cpu"], weights["memory"])
    assert scoring.disabled == {"NodeResourcesBalancedAllocation", "ImageLocality"}
    assert scoring.spread_defaulting == "List"
    assert "defaultConstraints" not in config["profiles"][0]["pluginConfig"][1]["args"]
    assert config["percentageOfNodesToScore"] == 100


def test_the_packing_policy_names_this_profile() -> None:
    """policies/packing sends interruptible and flexible pods to the profile shipped here."""
    policy = yaml.safe_load((REPO / "policies/packing/policy.yaml").read_text())
    named = {c["name"]: c.get("schedulerName") for c in policy["spec"]["classes"]}
    assert named["interruptible"] == named["flexible"] == scheduling.SCHEDULER_NAME
    assert {n for c, n in named.items() if c not in {"interruptible", "flexible"}} == {None}


# --- what a local run changes ----------------------------------------------------------------


def test_a_local_run_of_1_37_changes_only_the_kubeconfig(config: Obj, tmp_path: Path) -> None:
    local = scheduling.local_configuration(config, kubeconfig=tmp_path / "kc", minor=37)
    assert local["clientConnection"] == {"kubeconfig": str(tmp_path / "kc")}
    assert {**local, "clientConnection": config["clientConnection"]} == config


def test_a_local_run_of_1_20_reads_the_same_scoring_in_v1beta1(config: Obj, tmp_path: Path) -> None:
    local = scheduling.local_configuration(
        config, kubeconfig=tmp_path / "kc", minor=20, insecure_port=1234
    )
    assert local == {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(tmp_path / "kc")},
        "leaderElection": config["leaderElection"],
        "percentageOfNodesToScore": 100,
        "healthzBindAddress": "127.0.0.1:1234",
        "metricsBindAddress": "127.0.0.1:1234",
        "profiles": [
            {
                "schedulerName": scheduling.SCHEDULER_NAME,
                "pluginConfig": [
                    {
                        "name": "NodeResourcesMostAllocated",
                        "args": {
                            "resources": config["profiles"][0]["pluginConfig"][0]["args"][
                                "scoringStrategy"
                            ]["resources"]
                        },
                    },
                    {"name": "PodTopologySpread", "args": {"defaultingType": "List"}},
                ],
                "plugins": {
                    "score": {
                        "enabled": [{"name": "NodeResourcesMostAllocated", "weight": 1}],
                        "disabled": [
                            {"name": "NodeResourcesBalancedAllocation"},
                            {"name": "ImageLocality"},
                            {"name": "NodeResourcesLeastAllocated"},
                        ],
                    }
                },
            }
        ],
    }
    ours, theirs = scheduling.scoring(config), scheduling.scoring(local)
    assert (theirs.strategy, theirs.resource_weights) == (ours.strategy, ours.resource_weights)
    assert theirs.spread_defaulting == ours.spread_defaulting


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(parallelism=8), "['parallelism']"),
        (lambda c: c["profiles"][0].update(percentageOfNodesToScore=50), "a profile"),
        (
            lambda c: c["profiles"][0]["plugins"].update(filter={"disabled": [{"name": "x"}]}),
            "plugins",
        ),
        (
            lambda c: c["profiles"][0]["plugins"]["multiPoint"]["disabled"].append(
                {"name": "NodeAffinity"}
            ),
            "disabling",
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"][0]["args"].update(ignoredResources=["x"]),
            "NodeResourcesFit args",
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"].update(
                type="RequestedToCapacityRatio"
            ),
            "RequestedToCapacityRatio",
        ),
        (
            lambda c: c["profiles"][0]["pluginConfig"].append({"name": "InterPodAffinity"}),
            "InterPodAffinity",
        ),
    ],
)
def test_the_1_20_translation_refuses_what_it_does_not_know(
    config: Obj, tmp_path: Path, change: Any, message: str
) -> None:
    """A change to the shipped file that the translation cannot carry fails the 1.20 run
    rather than running something else there."""
    changed = yaml.safe_load(yaml.safe_dump(config))
    change(changed)
    with pytest.raises(SchedulerError, match="cannot translate") as caught:
        scheduling.local_configuration(
            changed, kubeconfig=tmp_path / "kc", minor=20, insecure_port=1
        )
    assert message in str(caught.value)


def test_a_1_20_scheduler_reports_its_configuration_in_go_field_names() -> None:
    """What the 1.20 scheduler answers at /configz (its internal form), read as the same
    scoring (recorded from the end-to-end run)."""
    reported = {
        "Parallelism": 16,
        "PercentageOfNodesToScore": 100,
        "Profiles": [
            {
                "SchedulerName": "preemptguard-packing",
                "Plugins": {
                    "QueueSort": None,
                    "Score": {
                        "Enabled": [{"Name": "NodeResourcesMostAllocated", "Weight": 1}],
                        "Disabled": [
                            {"Name": "NodeResourcesBalancedAllocation", "Weight": 0},
                            {"Name": "ImageLocality", "Weight": 0},
                            {"Name": "NodeResourcesLeastAllocated", "Weight": 0},
                        ],
                    },
                },
                "PluginConfig": [
                    {
                        "Name": "NodeResourcesMostAllocated",
                        "Args": {"Resources": [{"Name": GPU, "Weight": 10}]},
                    },
                    {
                        "Name": "PodTopologySpread",
                        "Args": {"DefaultConstraints": None, "DefaultingType": "List"},
                    },
                ],
            }
        ],
    }
    scoring = scheduling.scoring(reported)
    assert scoring.scheduler_name == "preemptguard-packing"
    assert scoring.strategy == "MostAllocated"
    assert scoring.resource_weights == {GPU: 10}
    assert scoring.enabled == {"NodeResourcesMostAllocated"}
    assert not scoring.merged
    assert scoring.spread_defaulting == "List"
