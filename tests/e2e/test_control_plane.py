"""The harness itself: nodes the scheduler accepts, pods bound to them, workloads expanded by the
controller-manager. Nothing here involves the webhook."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import REPO, cluster
from harness.cluster import PREEMPTIBLE, STANDARD
from harness.controlplane import CONTROLLERS, ControlPlane
from harness.kube import Kube

pytestmark = pytest.mark.e2e


def test_fake_nodes_are_ready_schedulable_and_classed(kube: Kube, nodes: dict[str, str]) -> None:
    for name, compute_class in nodes.items():
        node = kube.get(f"/api/v1/nodes/{name}")
        taints = {(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints", [])}
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert not any(key == cluster.NOT_READY_TAINT_KEY for key, _, _ in taints)
        if compute_class == PREEMPTIBLE:
            assert taints == {(cluster.CLASS_LABEL, PREEMPTIBLE, "NoSchedule")}
        else:
            assert not taints
    assert cluster.node_classes(kube) == nodes


def test_a_plain_pod_is_bound_to_a_standard_node(
    kube: Kube, nodes: dict[str, str], namespace: str
) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/pods", cluster.pod("plain", gpus=1))
    bound = cluster.wait_scheduled(kube, namespace, "plain")
    # The taint alone keeps pods that do not tolerate it off preemptible nodes.
    assert nodes[bound["spec"]["nodeName"]] == STANDARD
    assert bound["status"]["phase"] == "Pending"


def test_the_controller_manager_turns_a_deployment_into_bound_pods(
    kube: Kube, nodes: dict[str, str], namespace: str
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "plain"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "plain"}},
            "template": cluster.pod_template({"app": "plain"}),
        },
    }
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=plain", 2)
    assert {nodes[p["spec"]["nodeName"]] for p in pods} == {STANDARD}


def test_the_controller_manager_runs_a_daemonset_pod_on_every_node_it_tolerates(
    kube: Kube, nodes: dict[str, str], namespace: str
) -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": cluster.pod_template({"app": "agent"}),
        },
    }
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", daemonset)
    standard = sorted(n for n, c in nodes.items() if c == STANDARD)
    pods = cluster.wait_pods_scheduled(kube, namespace, "app=agent", len(standard))
    # Without a toleration of the preemptible taint: one pod on each standard node only.
    assert sorted(p["spec"]["nodeName"] for p in pods) == standard
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"DaemonSet"}


def test_the_kubeconfig_reaches_the_cluster(control_plane: ControlPlane) -> None:
    text = control_plane.kubeconfig.read_text()
    assert control_plane.server in text
    assert str(control_plane.ca_file) in text
    with Kube.from_kubeconfig(control_plane.kubeconfig) as kube:
        assert kube.get("/version")["gitVersion"].startswith(f"v{control_plane.release.name}.")


def test_each_controller_acts_as_its_own_service_account(kube: Kube) -> None:
    """As in a kubeadm cluster (--use-service-account-credentials): what a controller creates
    is created by system:serviceaccount:kube-system:<controller>, which the webhook relies on
    to tell genuine DaemonSet pods from pods that only claim a DaemonSet owner."""
    accounts = {
        a["metadata"]["name"]
        for a in kube.get("/api/v1/namespaces/kube-system/serviceaccounts")["items"]
    }
    assert {c.account for c in CONTROLLERS} <= accounts
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:serviceaccount:kube-system:daemon-set-controller",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
            "resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "any"},
        },
    }
    answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review).body
    assert answer["status"]["allowed"] is True


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_the_user_script_prints_a_kubeconfig_and_leaves_nothing_behind_on_ctrl_c(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # The binaries are already there (the session's control plane found them). Run from
    # elsewhere than the repository, as a user may.
    script = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "hack" / "control-plane.py"),
            "--release",
            control_plane.release.name,
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert script.stdout is not None
        lines = [script.stdout.readline() for _ in range(3)]
        exports = [line for line in lines if line.startswith("export KUBECONFIG=")]
        assert exports, lines
        kubeconfig = Path(exports[0].strip().split("=", 1)[1])
        config = yaml.safe_load(kubeconfig.read_text())
        cluster_ = config["clusters"][0]["cluster"]
        kube = Kube(
            cluster_["server"],
            config["users"][0]["user"]["token"],
            Path(cluster_["certificate-authority"]),
        )
        assert kube.exists("/api/v1/namespaces/kube-system")
        assert kube.get("/version")["minor"].rstrip("+") == control_plane.release.name.split(".")[1]
        kube.close()
        children = _children(script.pid)
        assert len(children) == 4
    finally:
        script.send_signal(signal.SIGINT)
        script.wait(30)
        if script.stdout is not None:
            script.stdout.close()
    assert script.returncode == 0
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
    assert not kubeconfig.parent.exists()
