"""Workload kinds as policy data: the GPU world's operators judged at apply time, template by
template, from real upstream manifests; kinds by API group and kind; a kind of one's own added
in a policy file alone."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Literal

import jsonpatch
import pytest
import yaml

from tests.conftest import REPO
from tests.test_cli import run
from webhook.engine import evaluate
from webhook.engine.decision import Context
from webhook.engine.findings import Code
from webhook.engine.workloads import find_pod_templates
from webhook.errors import PolicyError
from webhook.export.webhooks import WORKLOADS_WEBHOOK, workload_rules
from webhook.loading.policies import builtin_policy, load_policy

UPSTREAM = REPO / "tests" / "fixtures" / "upstream"
SAMPLE_DIRS = sorted(
    p.relative_to(REPO).as_posix()
    for p in UPSTREAM.iterdir()
    if p.is_dir() and p.name != "crds" and any(p.glob("*.yaml"))
)
POLICY = builtin_policy()
DEFAULT_POLICY_TEXT = (REPO / "policies" / "default" / "policy.yaml").read_text()


def check_json(*args: str, stdin: str = "") -> tuple[int, dict[str, Any]]:
    proc = run("check", "-o", "json", *args, stdin=stdin)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def objects_in(folder: str) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((REPO / folder).glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict)
    ]


# --- real upstream manifests ---------------------------------------------------------------


@pytest.mark.parametrize("folder", SAMPLE_DIRS)
def test_upstream_samples_are_judged_and_none_is_refused(folder: str) -> None:
    """Every object of the vendored samples that carries a pod template is judged template by
    template (none is skipped); no valid object is refused; each template is named."""
    files = [p.relative_to(REPO).as_posix() for p in sorted((REPO / folder).glob("*.yaml"))]
    code, out = check_json(*(a for f in files for a in ("-f", f)))
    assert out["inputErrors"] == []
    assert code == 0, [r["reasons"] for r in out["results"] if not r["allowed"]]
    carrying = [o for o in objects_in(folder) if find_pod_templates(o)]
    assert carrying, f"{folder} has no pod-carrying sample"
    judged = {(r["kind"], r["name"]) for r in out["results"] if not r["skipped"]}
    for obj in carrying:
        assert (obj["kind"], obj["metadata"]["name"]) in judged, obj["kind"]
    for r in out["results"]:
        assert isinstance(r["skipped"], bool)
        assert bool(r["skipReason"]) is r["skipped"], r


def test_every_template_of_kuberay_samples_gets_its_own_result() -> None:
    _, out = check_json(
        "-f",
        "tests/fixtures/upstream/kuberay/ray-cluster.sample.yaml",
        "-f",
        "tests/fixtures/upstream/kuberay/ray-service.sample.yaml",
    )
    ray = [r for r in out["results"] if r["kind"].startswith("Ray")]
    templates = {(r["name"], r["template"], r["role"]) for r in ray}
    assert ("raycluster-kuberay", "spec.headGroupSpec.template", "head") in templates
    assert ("raycluster-kuberay", "spec.workerGroupSpecs[0].template", "worker") in templates
    heads = [r for r in ray if r["role"] == "head"]
    assert heads
    assert all(r["class"] == "coordinator" for r in heads)
    assert all(r["source"] == "rule coordinator-templates" for r in heads)
    service_workers = [r for r in ray if r["kind"] == "RayService" and r["role"] == "worker"]
    assert service_workers
    assert all(r["class"] == "serving" for r in service_workers)
    # Each template's patch touches its own template only, and applies to the object.
    for r in ray:
        for op in r["patch"]:
            assert op["path"].startswith("/spec/"), op


def test_a_rayservice_whose_workers_require_preemptible_nodes_is_refused_at_apply_time() -> None:
    code, out = check_json("-f", "tests/fixtures/upstream/kuberay/modified")
    assert code == 1
    (refused,) = [r for r in out["results"] if not r["allowed"]]
    assert refused["kind"] == "RayService"
    assert refused["template"] == "spec.rayClusterConfig.workerGroupSpecs[0].template"
    (reason,) = refused["reasons"]
    assert reason.startswith("spec.rayClusterConfig.workerGroupSpecs[0].template: class serving")
    assert "together.ai/compute-class=preemptible" in reason
    head = next(r for r in out["results"] if r["role"] == "head")
    assert head["allowed"]
    assert head["class"] == "coordinator"


def test_text_output_names_each_template_and_role() -> None:
    proc = run("check", "-f", "tests/fixtures/upstream/kuberay/modified")
    assert proc.returncode == 1
    assert (
        "RayService default/rayservice-sample spec.rayClusterConfig.workerGroupSpecs[0].template "
        "(worker)  class=serving (template default)  REFUSED" in proc.stdout
    )
    assert "1 object (2 results, one per pod template)" in proc.stdout


def test_an_interruptible_rayjob_gets_placement_in_every_template() -> None:
    rayjob = next(yaml.safe_load_all((UPSTREAM / "kuberay" / "ray-job.sample.yaml").read_text()))
    for group in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        group["template"].setdefault("metadata", {}).setdefault("annotations", {})[
            "together.ai/workload"
        ] = "interruptible"
    d = evaluate(rayjob, POLICY, Context(namespace="sweeps"))
    assert d.allowed
    assert not d.refusals
    by_role = {p.role: p for p in d.parts}
    assert by_role["head"].classification.name == "coordinator"
    assert by_role["worker"].classification.name == "interruptible"
    worker = d.mutated["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert {"key": "together.ai/compute-class", "operator": "Equal", "value": "preemptible",
            "effect": "NoSchedule"} in worker["tolerations"]  # fmt: skip
    # Idempotent: placing the placed object again changes nothing.
    again = evaluate(d.mutated, POLICY, Context(namespace="sweeps"))
    assert again.mutated == d.mutated


# --- kinds by API group and kind -----------------------------------------------------------


def test_a_volcano_job_is_not_judged_as_a_batch_job() -> None:
    _, out = check_json("-f", "tests/fixtures/upstream/volcano")
    jobs = [r for r in out["results"] if r["kind"] == "Job"]
    assert jobs
    assert all(r["allowed"] for r in jobs)
    assert all(r["template"].startswith("spec.tasks[") for r in jobs)
    assert not any("has no spec.template" in reason for r in jobs for reason in r["reasons"])


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("example.com/v1", "Deployment"), ("v1", "Job"), ("apps.example.com/v1", "StatefulSet")],
)
def test_a_listed_kind_name_in_another_group_is_never_judged_as_the_listed_one(
    api_version: str, kind: str
) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
           "spec": {"template": {"metadata": {"annotations": {"together.ai/workload": "serving"}},
                                 "spec": {"nodeSelector": {"together.ai/compute-class": "preemptible"},
                                          "containers": [{"name": "c", "image": "i"}]}}}}  # fmt: skip
    d = evaluate(obj, POLICY, Context(namespace="team-a"))
    assert d.skip is not None
    assert d.skip.code in (Code.UNCHECKED_KIND, Code.NOT_A_WORKLOAD)
    assert not d.refusals


def test_a_replication_controller_is_judged() -> None:
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web"},
          "spec": {"template": {"metadata": {"annotations": {"together.ai/workload": "serving"}},
                                "spec": {"nodeSelector": {"together.ai/compute-class": "preemptible"},
                                         "containers": [{"name": "c", "image": "i"}]}}}}  # fmt: skip
    d = evaluate(rc, POLICY, Context(namespace="team-a"))
    assert not d.allowed
    assert d.refusals[0].code is Code.REQUIRES_PREEMPTIBLE


# --- template paths ------------------------------------------------------------------------


def _pod_template(annotation: str | None = None, **spec: Any) -> dict[str, Any]:
    meta = {"annotations": {"together.ai/workload": annotation}} if annotation else {}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


PREEMPTIBLE = {"nodeSelector": {"together.ai/compute-class": "preemptible"}}


def test_every_value_of_a_mapping_and_every_item_of_a_list_are_found() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t"},
           "spec": {"tfReplicaSpecs": {"Chief": {"template": _pod_template()},
                                       "Worker": {"template": _pod_template("interruptible")}}}}  # fmt: skip
    d = evaluate(job, POLICY, Context(namespace="ml"))
    assert [(p.path, p.role, p.classification.name) for p in d.parts] == [
        ("spec.tfReplicaSpecs.Chief.template", "chief", "coordinator"),
        ("spec.tfReplicaSpecs.Worker.template", "worker", "interruptible"),
    ]


def test_a_template_missing_where_the_kind_requires_one_is_refused_with_its_path() -> None:
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
               "spec": {"workerGroupSpecs": []}}  # fmt: skip
    d = evaluate(cluster, POLICY, Context(namespace="ml"))
    assert not d.allowed
    (refusal,) = d.refusals
    assert refusal.code is Code.NO_POD_SPEC
    assert "spec.headGroupSpec.template.spec" in refusal.message


def test_optional_and_wildcard_templates_may_be_absent() -> None:
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"},
              "spec": {"clusterSelector": {"ray.io/cluster": "existing"}, "entrypoint": "x"}}  # fmt: skip
    d = evaluate(rayjob, POLICY, Context(namespace="ml"))
    assert d.allowed
    assert not d.refusals
    assert d.skip is None
    assert d.parts == ()


def test_embedded_objects_are_judged_by_their_own_kinds() -> None:
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "w"},
        "spec": {"components": [
            {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
             "annotations": {"together.ai/workload": "serving"}}, "spec": {**_pod_template()["spec"], **PREEMPTIBLE}}},
            {"template": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                          "spec": {"template": _pod_template("interruptible")}}},
            {"template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}},
        ]},
    }  # fmt: skip
    d = evaluate(wrapper, POLICY, Context(namespace="ml"))
    paths = {p.path: p for p in d.parts}
    assert set(paths) == {
        "spec.components[0].template",
        "spec.components[1].template.spec.template",
    }
    assert paths["spec.components[0].template"].refusals
    assert paths["spec.components[1].template.spec.template"].classification.name == "interruptible"
    assert not d.allowed


def test_partial_templates_are_checked_but_never_placed() -> None:
    trainjob = yaml.safe_load(
        (UPSTREAM / "kubeflow-trainer" / "02-runtime-patches.yaml").read_text()
    )
    patch = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = patch["replicatedJobs"][0]["template"]["spec"]["template"]
    pod.setdefault("metadata", {})["annotations"] = {"together.ai/workload": "interruptible"}
    d = evaluate(trainjob, POLICY, Context(namespace="ml"))
    assert d.allowed
    assert d.mutated is trainjob
    assert not d.changes
    pod["metadata"]["annotations"]["together.ai/workload"] = "serving"
    pod["spec"]["nodeSelector"] = {"together.ai/compute-class": "preemptible"}
    d = evaluate(trainjob, POLICY, Context(namespace="ml"))
    assert not d.allowed
    assert d.refusals[0].code is Code.REQUIRES_PREEMPTIBLE


def _trainjob_patches(*pods: dict[str, Any]) -> dict[str, Any]:
    """A TrainJob whose runtime patches lay ``pods`` (partial pod templates) over its runtime's."""
    patches = [
        {"manager": "example.com/me", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}}}
        for pod in pods
    ]  # fmt: skip
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "runtimePatches": patches}}  # fmt: skip


SERVING = {"annotations": {"together.ai/workload": "serving"}}


@pytest.mark.parametrize("spec", ["left out", None], ids=["no-spec", "null-spec"])
def test_a_partial_template_may_leave_its_spec_out(spec: str | None) -> None:
    pod: dict[str, Any] = {"metadata": SERVING}
    if spec != "left out":
        pod["spec"] = spec
    d = evaluate(_trainjob_patches(pod), POLICY, Context(namespace="ml"))
    assert d.allowed, d.refusals
    assert [p.classification.name for p in d.parts] == ["serving"]
    assert not d.changes


def test_a_partial_template_without_a_spec_does_not_hide_another_ones_refusal() -> None:
    pinned = {
        "metadata": SERVING,
        "spec": {"nodeSelector": {"together.ai/compute-class": "preemptible"}},
    }
    for pods in ([pinned, {"metadata": SERVING}], [{"metadata": SERVING}, pinned]):
        d = evaluate(_trainjob_patches(*pods), POLICY, Context(namespace="ml"))
        assert not d.allowed
        assert [r.code for r in d.refusals] == [Code.REQUIRES_PREEMPTIBLE]


# --- template defaults and roles -------------------------------------------------------------


def _lws(annotation: str | None) -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": _pod_template(annotation)}}}  # fmt: skip


def test_a_template_default_gives_way_to_the_templates_annotation() -> None:
    annotated = evaluate(_lws("interruptible"), POLICY, Context(namespace="inference"))
    assert annotated.parts[0].classification.name == "interruptible"
    plain = evaluate(_lws(None), POLICY, Context(namespace="inference"))
    assert plain.parts[0].classification.name == "serving"
    assert plain.parts[0].classification.source == "template default"


def test_a_template_default_competes_with_the_namespace_default_the_strictest_winning() -> None:
    ctx = Context(namespace="sweeps",
                  namespace_annotations={"together.ai/default-workload": "interruptible"})  # fmt: skip
    d = evaluate(_lws(None), POLICY, ctx)
    assert d.parts[0].classification.name == "serving"
    assert any(f.code is Code.SOURCES_DISAGREE for f in d.notes)


def test_a_role_rule_keeps_a_ray_head_on_standard_nodes_whatever_its_namespace_says() -> None:
    cluster = yaml.safe_load((UPSTREAM / "kuberay" / "ray-cluster.sample.yaml").read_text())
    ctx = Context(namespace="sweeps",
                  namespace_annotations={"together.ai/default-workload": "interruptible"})  # fmt: skip
    d = evaluate(cluster, POLICY, ctx)
    classes = {p.role: p.classification.name for p in d.parts}
    assert classes == {"head": "coordinator", "worker": "interruptible"}


# --- a kind of one's own, in the policy file alone -------------------------------------------

FLEET_ENTRY = """\
    # Our own CRD: a fleet of inference replicas behind a router.
    - group: fleet.example.com
      kind: Fleet
      podOwnerKind: ReplicaSet
      templates:
        - path: spec.router.template
          role: router
          defaultClass: serving
        - path: spec.pools.*.template
          role: pool
"""

FLEET = """\
apiVersion: fleet.example.com/v1beta1
kind: Fleet
metadata: {name: chat, namespace: inference}
spec:
  router:
    template:
      spec:
        nodeSelector: {together.ai/compute-class: preemptible}
        containers: [{name: router, image: example/router:1}]
  pools:
    spot:
      template:
        metadata: {annotations: {together.ai/workload: interruptible}}
        spec:
          containers: [{name: model, image: example/model:1}]
"""


@pytest.fixture
def fleet_policy(tmp_path: Path) -> Path:
    text = DEFAULT_POLICY_TEXT.replace("  workloadKinds:\n", "  workloadKinds:\n" + FLEET_ENTRY, 1)
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_a_kind_of_ones_own_is_judged_once_listed_in_the_policy(
    fleet_policy: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "fleet.yaml"
    manifest.write_text(FLEET)
    before = run("check", "-o", "json", "-f", str(manifest))
    assert before.returncode == 0
    (unlisted,) = json.loads(before.stdout)["results"]
    assert unlisted["skipped"] is True
    assert any('group: "fleet.example.com", kind: Fleet' in w for w in unlisted["warnings"])

    proc = run("check", "-o", "json", "--policies", str(fleet_policy), "-f", str(manifest))
    assert proc.returncode == 1, proc.stderr
    router, pool = json.loads(proc.stdout)["results"]
    assert (router["template"], router["role"], router["class"], router["allowed"]) == (
        "spec.router.template", "router", "serving", False)  # fmt: skip
    assert router["reasons"][0].startswith("spec.router.template: class serving")
    assert (pool["template"], pool["role"], pool["class"], pool["allowed"]) == (
        "spec.pools.spot.template", "pool", "interruptible", True)  # fmt: skip


def test_the_patch_of_each_template_applies_to_the_object(
    fleet_policy: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "fleet.yaml"
    manifest.write_text(FLEET.replace("nodeSelector: {together.ai/compute-class: preemptible}",
                                      "nodeSelector: {}"))  # fmt: skip
    proc = run("check", "-o", "json", "--policies", str(fleet_policy), "-f", str(manifest))
    assert proc.returncode == 0, proc.stdout
    results = json.loads(proc.stdout)["results"]
    obj = yaml.safe_load(manifest.read_text())
    for r in results:
        obj = jsonpatch.apply_patch(obj, r["patch"])
    pool = obj["spec"]["pools"]["spot"]["template"]["spec"]
    router = obj["spec"]["router"]["template"]["spec"]
    assert pool["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert router["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_the_webhook_rules_for_a_policy_name_its_own_kinds(fleet_policy: Path) -> None:
    proc = run("export", "--webhook-rules", "-o", "json", "--policies", str(fleet_policy))
    assert proc.returncode == 0, proc.stderr
    patch = json.loads(proc.stdout)
    (hook,) = patch["webhooks"]
    assert hook["name"] == WORKLOADS_WEBHOOK
    assert {"operations": ["CREATE", "UPDATE"], "apiGroups": ["fleet.example.com"],
            "apiVersions": ["*"], "resources": ["fleets"], "scope": "Namespaced"} in hook["rules"]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("    - {group: fleet.example.com, kind: Fleet, templates: [{path: 'spec..template'}]}\n",
         "not a template path"),
        ("    - {group: fleet.example.com, kind: Fleet, templates: [{path: spec.t, defaultClass: gold}]}\n",
         "gold"),
        ("    - {group: fleet.example.com, kind: Fleet}\n", "list the paths of its pod templates"),
        ("    - {group: '', kind: Pod, templates: [{path: spec}]}\n", "Pods are built in"),
        ("    - {group: apps, kind: Deployment, templates: [{path: spec.template}]}\n", "listed twice"),
        ("    - {group: Fleet.Example, kind: Fleet, templates: [{path: spec.t}]}\n", "group"),
        ("    - {group: fleet.example.com, kind: Fleet, templates: [{path: spec.t, firstPod: {unless: [spec.c]}}]}\n",
         "role"),
        ("    - {group: fleet.example.com, kind: Fleet, templates: [{path: spec.t, firstPod: {role: lead, unless: ['spec.c[*]']}}]}\n",
         "name one field"),
        ("    - {group: fleet.example.com, kind: Fleet, templates: [{path: spec.t, firstPod: {role: lead, unless: ['spec..c']}}]}\n",
         "not a template path"),
    ],
)  # fmt: skip
def test_a_wrong_entry_is_refused_saying_what_to_change(
    tmp_path: Path, entry: str, words: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        DEFAULT_POLICY_TEXT.replace("  workloadKinds:\n", "  workloadKinds:\n" + entry, 1)
    )
    with pytest.raises(PolicyError, match="workloadKinds") as err:
        load_policy(path)
    assert words in str(err.value)


# --- output details ------------------------------------------------------------------------


def test_cluster_scoped_objects_have_no_namespace() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: batch-low}
        value: 100
        ---
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: ClusterTrainingRuntime
        metadata: {name: torch}
        spec:
          template:
            spec:
              replicatedJobs:
                - name: node
                  template:
                    spec:
                      template:
                        spec:
                          containers: [{name: node, image: pytorch/pytorch}]
        """
    )
    _, out = check_json("-f", "-", stdin=text)
    assert [r["namespace"] for r in out["results"]] == [None, None]
    proc = run("check", "-f", "-", stdin=text)
    assert "PriorityClass batch-low  UNTOUCHED" in proc.stdout
    assert "ClusterTrainingRuntime torch spec.template.spec.replicatedJobs[0]" in proc.stdout


def test_the_text_summary_mentions_input_errors() -> None:
    proc = run("check", "-f", "-", stdin="apiVersion: v1\nkind: Pod\nmetadata: [\n")
    assert proc.returncode == 2
    assert "1 input error (see above)" in proc.stdout


def test_skipped_is_a_boolean_beside_its_reason() -> None:
    _, out = check_json("-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    (r,) = out["results"]
    assert r["skipped"] is True
    assert r["skipReason"] == "kind 'ConfigMap' holds no pods"


# --- the shipped webhook configuration -----------------------------------------------------


def test_the_shipped_webhook_sends_every_listed_kind() -> None:
    docs = list(yaml.safe_load_all((REPO / "manifests" / "base" / "webhooks.yaml").read_text()))
    validating = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    hook = next(w for w in validating["webhooks"] if w["name"] == WORKLOADS_WEBHOOK)
    assert hook["rules"] == workload_rules(POLICY), (
        "manifests/base/webhooks.yaml is out of step with the default policy's workloadKinds: "
        "copy the rules `preemptguard export --webhook-rules` prints"
    )


def test_the_charts_default_workload_rules_are_the_default_policys() -> None:
    values = yaml.safe_load((REPO / "charts" / "preemptguard" / "values.yaml").read_text())
    assert values["webhooks"]["workloadRules"] == workload_rules(POLICY)


def _daemonset(annotation: str | None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "team-a"},
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": _pod_template(annotation, **spec),
        },
    }


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_daemonset_that_puts_standard_only_pods_on_preemptible_nodes_is_warned_about(
    operation: Literal["CREATE", "UPDATE"],
) -> None:
    """DaemonSets stay untouched, and so do their pods: nothing else keeps such pods off
    preemptible nodes, so the allowed DaemonSet says so."""
    obj = _daemonset("serving", **PREEMPTIBLE)
    old = _daemonset(None) if operation == "UPDATE" else None
    d = evaluate(obj, POLICY, Context(operation=operation, namespace="team-a", old_object=old))
    assert d.allowed
    assert d.skip is not None
    assert d.skip.code is Code.DAEMONSET
    assert d.mutated is obj
    [note] = d.notes
    assert note.code is Code.LEFT_ALONE_ON_PREEMPTIBLE
    assert note.path == "spec.template"
    assert note.message.startswith("DaemonSet pods are left alone (")
    assert "class serving must run on standard nodes" in note.message


@pytest.mark.parametrize(
    ("annotation", "spec"),
    [
        (None, {}),
        (None, PREEMPTIBLE),  # unclassified: no class to keep off
        ("serving", {}),
        ("interruptible", PREEMPTIBLE),
        ("interruptible", {"nodeSelector": {"together.ai/compute-class": "standard"}}),
    ],
)
def test_other_daemonsets_are_left_alone_without_a_word(
    annotation: str | None, spec: dict[str, Any]
) -> None:
    d = evaluate(_daemonset(annotation, **spec), POLICY, Context(namespace="team-a"))
    assert d.skip is not None
    assert d.skip.code is Code.DAEMONSET
    assert d.notes == ()


def test_a_daemonset_in_an_excluded_namespace_is_left_alone_without_a_word() -> None:
    obj = _daemonset("serving", **PREEMPTIBLE)
    obj["metadata"]["namespace"] = "kube-system"
    d = evaluate(obj, POLICY, Context(namespace="kube-system"))
    assert d.skip is not None
    assert d.skip.code is Code.EXCLUDED_NAMESPACE
    assert d.notes == ()


def test_a_deleted_daemonset_is_not_judged() -> None:
    obj = _daemonset("serving", **PREEMPTIBLE)
    d = evaluate(obj, POLICY, Context(operation="DELETE", namespace="team-a"))
    assert d.skip is not None
    assert d.notes == ()
