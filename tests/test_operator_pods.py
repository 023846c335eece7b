"""Pods as operators create them get the class their template got at apply time.

A template's role and default class live in its workload; the pods an operator makes from it
carry only the template's labels and annotations and the labels the operator adds over them.
The policy names those labels (``podSelector``), so that a LeaderWorkerSet's pods are serving
and a TFJob's parameter servers coordinators when they are created, whatever the template
asks for. Pods are built here from every template of the vendored upstream samples, with the
labels their operator sets.
"""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from webhook.engine import evaluate
from webhook.engine.decision import Context, Decision, Requester
from webhook.engine.findings import Code
from webhook.engine.patch import apply_patch, make_patch
from webhook.engine.policy import PodSelector, Policy
from webhook.engine.workloads import templates_of, value_at
from webhook.errors import PolicyError
from webhook.loading.policies import builtin_policy, load_policy

POLICY = builtin_policy()
UPSTREAM = REPO / "tests" / "fixtures" / "upstream"
KEY = "together.ai/compute-class"
OPERATOR = Requester(username="system:serviceaccount:operators:controller", groups=())
INSTANCE = "node.kubernetes.io/instance-type"
# What a template asks for to reach preemptible nodes without naming the class label: another
# label only preemptible nodes have, and a toleration of every taint.
ON_SPOT = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": INSTANCE, "operator": "In", "values": ["spot"]}]}
                ]
            }
        }
    },
    "tolerations": [{"operator": "Exists"}],
}


def labels_for(selector: PodSelector) -> dict[str, str]:
    """Labels as the operator sets them: what the selector requires."""
    labels = dict(selector.match_labels)
    for req in selector.match_expressions:
        if req.operator == "In":
            labels[req.key] = req.values[0]
        elif req.operator == "Exists":
            labels[req.key] = "set-by-operator"
        elif req.operator == "NotIn":
            labels[req.key] = "not-" + "-".join(req.values)
    return labels


def pod_from(template: dict[str, Any], labels: dict[str, str], owner: str) -> dict[str, Any]:
    meta = copy.deepcopy(template.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["name"] = "made-by-operator"
    meta["ownerReferences"] = [
        {"apiVersion": "example/v1", "kind": owner, "name": "o", "uid": "u", "controller": True}
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def pod_decision(pod: dict[str, Any], policy: Policy = POLICY, **ctx: Any) -> Decision:
    return evaluate(pod, policy, Context(namespace="inference", requester=OPERATOR, **ctx))


def samples() -> list[tuple[str, dict[str, Any]]]:
    """The samples with a template whose pods the policy knows by their labels."""
    found = []
    for path in sorted(UPSTREAM.glob("*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            group = (
                str(doc.get("apiVersion", "")).partition("/")[0] if isinstance(doc, dict) else ""
            )
            kind = POLICY.workload_kinds.get((group, doc.get("kind"))) if group else None
            if kind is not None and any(
                t.spec.pods for t in templates_of(doc, kind, POLICY.workload_kinds)[0]
            ):
                found.append((f"{path.parent.name}/{path.name} {doc['kind']}", doc))
    return found


SAMPLES = samples()


def test_the_samples_cover_every_operator() -> None:
    kinds = {obj["kind"] for _, obj in SAMPLES}
    assert kinds >= {"RayCluster", "RayJob", "RayService", "PyTorchJob", "TFJob", "MPIJob",
                     "XGBoostJob", "LeaderWorkerSet", "DisaggregatedSet"}  # fmt: skip


@pytest.mark.parametrize(("name", "obj"), SAMPLES, ids=[n for n, _ in SAMPLES])
def test_a_pod_made_from_a_template_gets_the_templates_class(
    name: str, obj: dict[str, Any]
) -> None:
    group = obj["apiVersion"].partition("/")[0]
    kind = POLICY.workload_kinds[(group, obj["kind"])]
    applied = evaluate(obj, POLICY, Context(namespace="inference"))
    by_path = {p.path: p for p in applied.parts}
    found, _ = templates_of(obj, kind, POLICY.workload_kinds)
    recognised = [t for t in found if t.spec.pods is not None]
    assert recognised
    for t in recognised:
        assert t.spec.pods is not None
        pod = pod_from(t.template, labels_for(t.spec.pods), kind.pod_owner_kind or kind.kind)
        made = pod_decision(pod)
        assert made.classification.name == by_path[t.where].classification.name, t.where


def test_every_template_whose_class_pods_cannot_carry_names_its_pods() -> None:
    """A template default or a role a rule matches never reaches the pods by itself."""
    roles = {role for rule in POLICY.rules for role in rule.match.template_roles}
    missing = [
        f"{kind.name} {spec.dotted}"
        for kind in POLICY.workload_kinds.values()
        if kind.ignore is None
        for spec in kind.templates
        if (spec.default_class is not None or spec.role in roles) and spec.pods is None
    ]
    assert missing == []


def _lws_worker(annotation: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "vllm-0-1",
        "labels": {
            "leaderworkerset.sigs.k8s.io/name": "vllm",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            **labels,
        },
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": "vllm-0",
                "uid": "u",
                "controller": True,
            }
        ],
    }
    if annotation:
        meta["annotations"] = {"together.ai/workload": annotation}
    spec = {"containers": [{"name": "vllm", "image": "vllm"}], **copy.deepcopy(ON_SPOT)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def test_a_leaderworkerset_pod_on_spot_capacity_is_kept_on_standard_nodes() -> None:
    pod = _lws_worker()
    d = pod_decision(pod)
    assert d.allowed
    assert d.classification.name == "serving"
    assert d.classification.source == "template default"
    assert "LeaderWorkerSet.leaderworkerset.x-k8s.io worker templates" in d.classification.detail
    placed = apply_patch(pod, make_patch(pod, d.mutated))
    term = placed["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    assert {"key": KEY, "operator": "NotIn", "values": ["preemptible"]} in term["matchExpressions"]
    assert {"key": INSTANCE, "operator": "In", "values": ["spot"]} in term["matchExpressions"]
    # What the validating hook sees after the patch: placed, nothing left to change.
    again = pod_decision(placed)
    assert again.allowed
    assert make_patch(placed, again.mutated) == []


def test_a_leaderworkerset_pod_annotated_interruptible_runs_on_preemptible_nodes() -> None:
    d = pod_decision(_lws_worker("interruptible"))
    assert d.classification.name == "interruptible"


def test_a_leaderworkerset_pod_asking_for_preemptible_nodes_is_refused() -> None:
    pod = _lws_worker()
    pod["spec"]["nodeSelector"] = {KEY: "preemptible"}
    d = pod_decision(pod)
    assert not d.allowed
    assert d.refusals[0].code is Code.REQUIRES_PREEMPTIBLE


def test_a_namespace_default_cannot_loosen_a_template_default() -> None:
    d = pod_decision(
        _lws_worker(), namespace_annotations={"together.ai/default-workload": "interruptible"}
    )
    assert d.classification.name == "serving"
    assert any(f.code is Code.SOURCES_DISAGREE for f in d.notes)


def test_a_tfjob_parameter_server_is_a_coordinator_by_its_role() -> None:
    labels = {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": "ps",
        "training.kubeflow.org/job-name": "mnist",
    }
    pod = _lws_worker(**labels)
    for key in ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index"):
        del pod["metadata"]["labels"][key]
    d = pod_decision(pod)
    assert d.classification.name == "coordinator"
    assert d.classification.source == "rule coordinator-templates"
    # Annotated interruptible, it stays a coordinator: the role's rule is the stricter source.
    pod["metadata"]["annotations"] = {"together.ai/workload": "interruptible"}
    assert pod_decision(pod).classification.name == "coordinator"


def test_ray_workers_are_serving_only_in_a_rayservice() -> None:
    pod = _lws_worker()
    pod["metadata"]["labels"] = {"ray.io/node-type": "worker", "ray.io/cluster": "llm"}
    assert pod_decision(pod).classification.name is None
    pod["metadata"]["labels"]["ray.io/serve"] = "true"
    assert pod_decision(pod).classification.name == "serving"


def test_a_pod_of_no_template_is_left_as_written() -> None:
    pod = _lws_worker()
    pod["metadata"]["labels"] = {"app": "web", "leaderworkerset.sigs.k8s.io/worker-index": "3"}
    d = pod_decision(pod)
    assert d.classification.name is None
    assert d.mutated is pod or make_patch(pod, d.mutated) == []


# --- the policy file ---------------------------------------------------------------------

DEFAULT_TEXT = (REPO / "policies" / "default" / "policy.yaml").read_text()
LWS_SELECTOR = """\
          podSelector:
            matchExpressions:
              - {key: leaderworkerset.sigs.k8s.io/name, operator: Exists}
              - {key: leaderworkerset.sigs.k8s.io/worker-index, operator: NotIn, values: ["0"]}
"""


def _with_selector(tmp_path: Path, selector: str) -> Path:
    assert LWS_SELECTOR in DEFAULT_TEXT
    path = tmp_path / "policy.yaml"
    path.write_text(DEFAULT_TEXT.replace(LWS_SELECTOR, textwrap.indent(selector, " " * 10), 1))
    return path


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        (
            "podSelector:\n  matchExpressions:\n    - {key: a, operator: NotIn, values: [b]}\n",
            "name a label its pods carry: matchLabels, or In or Exists",
        ),
        (
            "podSelector:\n  matchExpressions:\n    - {key: a, operator: DoesNotExist}\n",
            "name a label its pods carry",
        ),
        (
            "podSelector:\n  matchExpressions:\n    - {key: a, operator: In}\n",
            "needs at least one value",
        ),
        ("podSelector: {}\n", "should be non-empty"),
    ],
)
def test_a_selector_that_names_no_label_of_the_pods_is_refused(
    tmp_path: Path, selector: str, says: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        load_policy(_with_selector(tmp_path, selector))
    assert says in str(refused.value)
    assert "podSelector" in str(refused.value)


def test_a_selector_on_an_embedded_path_is_refused(tmp_path: Path) -> None:
    text = DEFAULT_TEXT.replace(
        "          embedded: true\n",
        "          embedded: true\n          podSelector:\n            matchLabels: {a: b}\n",
        1,
    )
    assert text != DEFAULT_TEXT
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match="drop podSelector"):
        load_policy(path)


def test_the_selectors_reach_the_pods_exactly_as_written() -> None:
    spec = POLICY.workload_kinds[("leaderworkerset.x-k8s.io", "LeaderWorkerSet")].templates[1]
    assert spec.pods is not None
    assert str(spec.pods) == (
        "leaderworkerset.sigs.k8s.io/name Exists, leaderworkerset.sigs.k8s.io/worker-index NotIn [0]"
    )
    assert value_at(_lws_worker(), ("metadata", "labels"))


def test_a_template_whose_pods_would_not_get_its_class_is_warned_about(tmp_path: Path) -> None:
    """A kind of one's own with a default class and no podSelector: the template is judged
    serving, its pods would be unclassified; the warning says both ways to fix it."""
    entry = (
        "    - group: fleet.example.com\n      kind: Fleet\n      templates:\n"
        "        - path: spec.router.template\n          role: router\n"
        "          defaultClass: serving\n"
    )
    path = tmp_path / "policy.yaml"
    path.write_text(DEFAULT_TEXT.replace("  workloadKinds:\n", "  workloadKinds:\n" + entry, 1))
    policy = load_policy(path)
    fleet: dict[str, Any] = {"apiVersion": "fleet.example.com/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"router": {"template": {"spec": {"containers": [{"name": "r"}]}}}}}  # fmt: skip
    (part,) = evaluate(fleet, policy, Context(namespace="inference")).parts
    assert part.classification.name == "serving"
    (warned,) = [f for f in part.notes if f.code is Code.CLASS_NOT_INHERITED]
    assert "created, they will be unclassified" in warned.message
    assert "together.ai/workload: serving" in warned.message
    assert "Fleet.fleet.example.com entry of the policy a podSelector" in warned.message
    # Annotated, the class reaches the pods: nothing to warn about.
    fleet["spec"]["router"]["template"]["metadata"] = {
        "annotations": {"together.ai/workload": "serving"}
    }
    (part,) = evaluate(fleet, policy, Context(namespace="inference")).parts
    assert all(f.code is not Code.CLASS_NOT_INHERITED for f in part.notes)
    # The shipped kinds name their pods: none of their templates is warned about.
    for _, obj in SAMPLES:
        d = evaluate(obj, POLICY, Context(namespace="inference"))
        assert all(f.code is not Code.CLASS_NOT_INHERITED for p in d.parts for f in p.notes)


# --- the first pod of a template, which its operator makes the job's master ------------------

TF_LABELS = {"training.kubeflow.org/operator-name": "tfjob-controller",
             "training.kubeflow.org/replica-type": "worker"}  # fmt: skip
MASTER = {"training.kubeflow.org/job-role": "master"}


def _tfjob(worker_spec: dict[str, Any], *, chief: bool) -> dict[str, Any]:
    worker = {"metadata": {"annotations": {"together.ai/workload": "interruptible"}},
              "spec": {"containers": [{"name": "tf", "image": "tf:2"}], **worker_spec}}  # fmt: skip
    replicas: dict[str, Any] = {"Worker": {"replicas": 4, "template": worker}}
    if chief:
        replicas["Chief"] = {
            "template": {"spec": {"containers": [{"name": "tf", "image": "tf:2"}]}}
        }
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist"},
            "spec": {"tfReplicaSpecs": replicas}}  # fmt: skip


def _worker_part(d: Decision) -> Any:
    (part,) = [p for p in d.parts if p.path == "spec.tfReplicaSpecs.Worker.template"]
    return part


def test_worker_0_of_a_tfjob_without_a_chief_is_judged_at_apply_time_as_it_is_created() -> None:
    """The training operator labels worker 0 the job's master when there is no chief or
    master: it is a coordinator when created, and its template says so when applied."""
    job = _tfjob({}, chief=False)
    applied = evaluate(job, POLICY, Context(namespace="ml"))
    assert applied.allowed
    part = _worker_part(applied)
    assert part.classification.name == "interruptible"
    (note,) = [n for n in part.notes if n.code is Code.FIRST_POD_CLASS]
    assert "the master" in note.message
    assert "will be coordinator" in note.message
    template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    worker_0 = pod_decision(pod_from(template, {**TF_LABELS, **MASTER}, "TFJob"))
    assert worker_0.classification.name == "coordinator"
    worker_1 = pod_decision(pod_from(template, TF_LABELS, "TFJob"))
    assert worker_1.classification.name == "interruptible"


def test_worker_0_pinned_to_preemptible_nodes_is_refused_at_apply_time_as_when_created() -> None:
    pinned = {"nodeSelector": {KEY: "preemptible"}}
    job = _tfjob(pinned, chief=False)
    applied = evaluate(job, POLICY, Context(namespace="ml"))
    assert not applied.allowed
    (refusal,) = applied.refusals
    assert refusal.code is Code.REQUIRES_PREEMPTIBLE
    assert "the master (the TFJob has no spec.tfReplicaSpecs.Chief or" in refusal.message
    template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert not pod_decision(pod_from(template, {**TF_LABELS, **MASTER}, "TFJob")).allowed
    # With a chief, worker 0 is a worker like the others (the operator labels it so); a
    # chief named without a spec counts too, as the operator looks for the key.
    with_chief = evaluate(_tfjob(pinned, chief=True), POLICY, Context(namespace="ml"))
    assert with_chief.allowed
    assert not [n for n in _worker_part(with_chief).notes if n.code is Code.FIRST_POD_CLASS]
    named = _tfjob(pinned, chief=False)
    named["spec"]["tfReplicaSpecs"]["Chief"] = None
    assert evaluate(named, POLICY, Context(namespace="ml")).allowed
    assert pod_decision(pod_from(template, TF_LABELS, "TFJob")).allowed


def test_process_0_of_a_jaxjob_is_judged_as_its_master() -> None:
    worker = {"metadata": {"annotations": {"together.ai/workload": "interruptible"}},
              "spec": {"nodeSelector": {KEY: "preemptible"},
                       "containers": [{"name": "jax", "image": "jax:1"}]}}  # fmt: skip
    job = {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": "j"},
           "spec": {"jaxReplicaSpecs": {"Worker": {"replicas": 2, "template": worker}}}}  # fmt: skip
    applied = evaluate(job, POLICY, Context(namespace="ml"))
    assert [r.code for r in applied.refusals] == [Code.REQUIRES_PREEMPTIBLE]
    labels = {"training.kubeflow.org/operator-name": "jaxjob-controller",
              "training.kubeflow.org/replica-type": "worker", **MASTER}  # fmt: skip
    assert not pod_decision(pod_from(worker, labels, "JAXJob")).allowed
