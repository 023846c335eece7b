"""The exported admission policies (``preemptguard export``) against the webhook, on a real
Kubernetes 1.37 API server.

A differential test: every policy test case (``policies/default/tests``), every recorded
review (``tests/fixtures/admission-reviews``) and a matrix of pods crossing classes with node
constraints, tolerations, grace periods and checkpoints is sent twice through server-side dry
runs, once with only the exported ValidatingAdmissionPolicy and MutatingAdmissionPolicy
installed and once with only the webhook; the stored objects must agree in affinity,
tolerations, grace period and placement record, and the same ones must be refused with the
same message. Then, with the webhook stopped, the exported policies still refuse what asks
for capacity its class may not use.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import REPO, cluster
from harness.cluster import CLASS_LABEL, PLACEMENT, PREEMPTIBLE
from harness.controlplane import ControlPlane
from harness.kube import Kube, KubeError
from harness.processes import wait_until
from harness.webhook import (
    ServerError,
    WebhookServer,
    local_webhook_configurations,
    register,
    service_account_kubeconfig,
    start_server,
    unregister,
)
from webhook.cli.policy_tests import load_cases
from webhook.export import export
from webhook.loading.policies import load_policy

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.releases(
        "1.37", reason="admissionregistration.k8s.io/v1 admission policies need Kubernetes 1.36+"
    ),
]

POLICY_DIR = REPO / "policies" / "default"
FIXTURES = REPO / "tests" / "fixtures" / "admission-reviews"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
COLLECTIONS = {
    "Pod": "/api/v1/namespaces/{}/pods",
    "Deployment": "/apis/apps/v1/namespaces/{}/deployments",
    "StatefulSet": "/apis/apps/v1/namespaces/{}/statefulsets",
    "ReplicaSet": "/apis/apps/v1/namespaces/{}/replicasets",
    "Job": "/apis/batch/v1/namespaces/{}/jobs",
    "CronJob": "/apis/batch/v1/namespaces/{}/cronjobs",
}
# The built-in kinds the cases are created as; an object of another group (a Volcano Job, say)
# has no collection on a bare API server.
API_VERSIONS = {
    "Pod": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
MIRROR = "kubernetes.io/config.mirror"
CEILING = " runs below pods that name no priority class "
JOB_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/")


# --- the cases -------------------------------------------------------------------------------


@dataclass
class Case:
    """One request to send: a create, an update of ``old`` or a delete of ``old``."""

    name: str
    obj: dict[str, Any]
    operation: str = "CREATE"
    old: dict[str, Any] | None = None
    namespace_annotations: dict[str, str] = field(default_factory=dict)
    username: str | None = None
    groups: tuple[str, ...] = ()
    namespace: str = ""

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def collection(self) -> str:
        return COLLECTIONS[self.kind].format(self.namespace)

    @property
    def item(self) -> str:
        return f"{self.collection}/{self.obj['metadata']['name']}"


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a user would send it: without what the API server sets, in no namespace."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    for key in (*SERVER_FIELDS, "namespace"):
        meta.pop(key, None)
    obj.pop("status", None)
    if obj.get("kind") == "Job":
        # The selector and labels the API server generated for the recorded Job.
        obj["spec"].pop("selector", None)
        labels = obj["spec"]["template"].get("metadata", {}).get("labels", {})
        for label in [k for k in labels if k.startswith(JOB_LABELS)]:
            del labels[label]
    if obj.get("kind") == "Pod" and MIRROR in meta.get("annotations", {}):
        # The API server accepts a mirror pod only bound to its node.
        obj["spec"].setdefault("nodeName", "standard-1")
    return obj


def _without_class(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the class annotation dropped from its pod template: an older version of
    it, for UPDATE cases that name none, so that the update changes the template."""
    old = copy.deepcopy(obj)
    node: Any = old
    for part in (
        ("spec", "jobTemplate", "spec", "template")
        if old["kind"] == "CronJob"
        else (("spec", "template") if old["kind"] != "Pod" else ())
    ):
        node = node[part]
    node.setdefault("metadata", {}).setdefault("annotations", {}).pop(cluster.WORKLOAD, None)
    return old


def policy_cases() -> list[Case]:
    cases = []
    for raw in load_cases(POLICY_DIR):
        subject = raw.subject
        kind = subject.obj.get("kind")
        if kind not in COLLECTIONS or subject.obj.get("apiVersion") != API_VERSIONS[kind]:
            continue
        obj = _clean(subject.obj)
        old = None
        if subject.operation != "CREATE":
            old = _clean(subject.old_object) if subject.old_object else _without_class(obj)
        requester = subject.requester
        cases.append(
            Case(
                name=f"policy case {raw.name}",
                obj=obj,
                operation=subject.operation,
                old=old,
                namespace_annotations=dict(raw.namespace.annotations),
                username=requester.username if requester else None,
                groups=requester.groups if requester else (),
            )
        )
    return cases


def fixture_cases() -> list[Case]:
    cases, seen = [], set()
    for path in sorted(FIXTURES.glob("*.json")):
        request = json.loads(path.read_text())["request"]
        obj = request.get("object") or request.get("oldObject")
        key = json.dumps([request["operation"], _clean(obj)], sort_keys=True)
        if key in seen:
            continue  # the same request recorded by the other hook
        seen.add(key)
        old = _clean(request["oldObject"]) if request.get("oldObject") else None
        cases.append(
            Case(
                name=f"fixture {path.name}",
                obj=_clean(obj),
                operation=request["operation"],
                old=old,
            )
        )
    return cases


def _pod(
    name: str, workload: str | None, spec: dict[str, Any], **annotations: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    found = {**({cluster.WORKLOAD: workload} if workload else {}), **annotations}
    if found:
        meta["annotations"] = found
    container = {"name": "c", "image": "registry.invalid/e2e:1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container], **spec},
    }


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }


def _term(*exprs: tuple[str, ...]) -> dict[str, Any]:
    out = []
    for key, operator, *values in exprs:
        expr: dict[str, Any] = {"key": key, "operator": operator}
        if values:
            expr["values"] = list(values)
        out.append(expr)
    return {"matchExpressions": out}


K, ZONE = CLASS_LABEL, "topology.kubernetes.io/zone"
FIELDS = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["standard-1"]}]}
SHAPES: dict[str, dict[str, Any]] = {
    "none": {},
    "selector-preemptible": {"nodeSelector": {K: PREEMPTIBLE}},
    "selector-standard": {"nodeSelector": {K: "standard"}},
    "selector-other": {"nodeSelector": {K: "gpu-x"}},
    "in-preemptible": _required(_term((K, "In", PREEMPTIBLE))),
    "in-preemptible-or-absent": _required(
        _term((K, "In", PREEMPTIBLE)), _term((K, "DoesNotExist"))
    ),
    "exists-notin-standard": _required(_term((K, "Exists"), (K, "NotIn", "standard"))),
    "notin-preemptible": _required(_term((K, "NotIn", PREEMPTIBLE))),
    "fields-only": _required(FIELDS),
    "zone-or-fields": _required(_term((ZONE, "In", "a")), FIELDS),
    "gt-5": _required(_term((K, "Gt", "5"))),
    "lt-3": _required(_term((K, "Lt", "3"))),
    "gt-not-a-number": _required(_term((K, "Gt", "x"))),
    "gt-not-a-number-or-zone": _required(_term((K, "Gt", "x")), _term((ZONE, "In", "a"))),
    "in-both": _required(_term((K, "In", PREEMPTIBLE, "standard"))),
    "in-other": _required(_term((K, "In", "foo"))),
    "notin-standard": _required(_term((K, "NotIn", "standard"))),
    "does-not-exist": _required(_term((K, "DoesNotExist"))),
    "exists": _required(_term((K, "Exists"))),
    "standard-or-preemptible": _required(
        _term((K, "In", "standard")), _term((K, "In", PREEMPTIBLE))
    ),
    "contradiction-or-preemptible": _required(
        _term((K, "Exists"), (K, "DoesNotExist")), _term((K, "In", PREEMPTIBLE))
    ),
    "selector-preemptible-affinity-notin": {
        "nodeSelector": {K: PREEMPTIBLE},
        **_required(_term((K, "NotIn", PREEMPTIBLE))),
    },
    "in-and-notin-preemptible": _required(_term((K, "In", PREEMPTIBLE), (K, "NotIn", PREEMPTIBLE))),
    "other-key-only": _required(_term(("gpu", "Exists"))),
    "preemptible-zone-or-zone": _required(
        _term((K, "In", PREEMPTIBLE), (ZONE, "In", "a")), _term((ZONE, "In", "b"))
    ),
}
TOLERATIONS: dict[str, list[dict[str, Any]]] = {
    "all": [{"operator": "Exists"}],
    "key-exists": [{"key": K, "operator": "Exists"}],
    "equal": [{"key": K, "operator": "Equal", "value": PREEMPTIBLE, "effect": "NoSchedule"}],
    "other-effect": [{"key": K, "operator": "Equal", "value": PREEMPTIBLE, "effect": "NoExecute"}],
    "other-value": [{"key": K, "value": "standard"}],
    "any-effect": [{"key": K, "value": PREEMPTIBLE}],
}
CHECKPOINT = "together.ai/checkpoint-seconds"
GRACE: dict[str, tuple[dict[str, str], int | None]] = {
    "grace-600": ({}, 600),
    "grace-10": ({}, 10),
    "grace-0": ({}, 0),
    "checkpoint-120": ({CHECKPOINT: "120"}, None),
    "checkpoint-120-grace-200": ({CHECKPOINT: "120"}, 200),
    "checkpoint-270-grace-900": ({CHECKPOINT: "270"}, 900),
    "checkpoint-spaces": ({CHECKPOINT: "\t60\u3000"}, None),
    "checkpoint-2m": ({CHECKPOINT: "2m"}, None),
    "checkpoint-271": ({CHECKPOINT: "271"}, None),
    "checkpoint-quote": ({CHECKPOINT: "it's"}, None),
    "checkpoint-long": ({CHECKPOINT: "9" * 80}, None),
}
CLASSES = ("interruptible", "flexible", "serving", None, "interuptible")


def matrix_cases() -> list[Case]:
    """Classes crossed with node constraints, tolerations, grace periods and checkpoints."""
    cases = []
    for workload in CLASSES:
        label = workload or "unclassified"
        for shape, spec in SHAPES.items():
            cases.append(
                Case(name=f"{label} {shape}", obj=_pod(f"{label}-{shape}", workload, spec))
            )
        for name, tolerations in TOLERATIONS.items():
            obj = _pod(f"{label}-tolerates-{name}", workload, {"tolerations": tolerations})
            cases.append(Case(name=f"{label} tolerates {name}", obj=obj))
        for name, (checkpoint, grace) in GRACE.items():
            spec = {"terminationGracePeriodSeconds": grace} if grace is not None else {}
            obj = _pod(f"{label}-{name}", workload, spec, **checkpoint)
            cases.append(Case(name=f"{label} {name}", obj=obj))
    head = {"ray.io/node-type": "head"}
    extra = [
        _pod("head-annotated-interruptible", "interruptible", {}),
        _pod("head-flexible-on-preemptible", "flexible", {"nodeSelector": {K: PREEMPTIBLE}}),
        _pod("unknown-long", "x" * 70, {}),
        _pod("unknown-quote", "it's", {}),
    ]
    extra[0]["metadata"]["labels"] = head
    extra[1]["metadata"]["labels"] = head
    cases += [Case(name=f"extra {p['metadata']['name']}", obj=p) for p in extra]
    return cases + operator_pod_cases()


# Labels operators set on the pods they make from a template (the default policy's
# podSelectors): such pods get the template's role and default class.
OPERATOR_LABELS: dict[str, dict[str, str]] = {
    "lws-leader": {
        "leaderworkerset.sigs.k8s.io/name": "llm",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    },
    "lws-worker": {
        "leaderworkerset.sigs.k8s.io/name": "llm",
        "leaderworkerset.sigs.k8s.io/worker-index": "2",
    },
    "rayservice-worker": {"ray.io/node-type": "worker", "ray.io/serve": "true"},
    "raycluster-worker": {"ray.io/node-type": "worker"},
    "tfjob-ps": {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": "ps",
    },
}


def operator_pod_cases() -> list[Case]:
    """Pods as operators create them, asking for preemptible nodes or not, annotated or not."""
    cases = []
    for name, labels in OPERATOR_LABELS.items():
        for workload in ("interruptible", None):
            for shape in ("none", "selector-preemptible", "other-key-only"):
                label = f"{name}-{workload or 'unannotated'}-{shape}"
                spec = {**SHAPES[shape], "tolerations": TOLERATIONS["all"]}
                obj = _pod(label, workload, spec)
                obj["metadata"]["labels"] = dict(labels)
                cases.append(Case(name=f"operator {label}", obj=obj))
    return cases


# What an update of a pod may give it, from an unclassified pod of each shape: an annotated
# class, a rule's class (a Ray head is a coordinator), a label nothing reads.
RELABELS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "annotated-serving": ({cluster.WORKLOAD: "serving"}, {}),
    "annotated-interruptible": ({cluster.WORKLOAD: "interruptible"}, {}),
    "labelled-head": ({}, {"ray.io/node-type": "head"}),
    "labelled-harmless": ({}, {"team": "a"}),
}
UPDATED_SHAPES = ("none", "selector-preemptible", "selector-standard", "in-preemptible-or-absent")


def update_cases() -> list[Case]:
    """Pods created unclassified, before any admission was installed, then given a class by
    an update of their labels or annotations (class-changed); and batch pods asking for a
    priority above an ordinary pod's."""
    cases = []
    tolerate = [{"key": K, "operator": "Exists"}]
    for shape in UPDATED_SHAPES:
        for name, (annotated, labels) in RELABELS.items():
            old = _pod(f"upd-{shape}-{name}", None, {**SHAPES[shape], "tolerations": tolerate})
            new = copy.deepcopy(old)
            new["metadata"].setdefault("annotations", {}).update(annotated)
            new["metadata"].setdefault("labels", {}).update(labels)
            cases.append(Case(name=f"update {shape} {name}", obj=new, operation="UPDATE", old=old))
    for workload in ("interruptible", "flexible", "serving"):
        obj = _pod(f"high-{workload}", workload, {"priorityClassName": "system-cluster-critical"})
        cases.append(Case(name=f"priority {workload} system-cluster-critical", obj=obj))
    reserved = _pod("reserved-unclassified", None, {"priorityClassName": "preemptguard"})
    cases.append(Case(name="priority unclassified preemptguard", obj=reserved))
    return cases


_SOURCE = re.compile(r"^(this update makes the pod [^ ]+) \([^)]*\)")


def _without_sources(outcome: Outcome) -> Outcome:
    """The webhook's outcome with the source of a class left out of a class-changed refusal,
    which the policies cannot name (their notes say so)."""
    if outcome.refused is None:
        return outcome
    return replace(outcome, refused=_SOURCE.sub(r"\1", outcome.refused))


def all_cases() -> list[Case]:
    return [*policy_cases(), *fixture_cases(), *matrix_cases(), *update_cases()]


# --- sending them ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    refused: str | None  # the refusal message without the API server's prefix
    placement: dict[str, Any] | None  # what the stored object has, for the fields compared
    stored: dict[str, Any] | None = field(default=None, compare=False, repr=False)


_DENIED = re.compile(r"denied (?:the )?request: (.*)$", re.S)


def _compared(obj: dict[str, Any]) -> dict[str, Any]:
    node: Any = obj
    kind = obj.get("kind")
    path = {"Pod": (), "CronJob": ("spec", "jobTemplate", "spec", "template")}.get(
        str(kind), ("spec", "template")
    )
    for part in path:
        node = node.get(part, {})
    spec = node.get("spec", {})
    return {
        "affinity": spec.get("affinity"),
        "tolerations": spec.get("tolerations"),
        "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds"),
        "placement": node.get("metadata", {}).get("annotations", {}).get(PLACEMENT),
    }


def _client(kube: Kube, case: Case) -> Kube:
    if case.username is None:
        return kube
    client = kube.with_token(kube.token)
    client.session.headers["Impersonate-User"] = case.username
    # One group header is all this client can send; the node group is the one trust reads.
    if "system:nodes" in case.groups:
        client.session.headers["Impersonate-Group"] = "system:nodes"
    return client


def send(kube: Kube, case: Case) -> Outcome:
    client = _client(kube, case)
    try:
        return _send(kube, client, case)
    finally:
        if client is not kube:
            client.close()


def _send(kube: Kube, client: Kube, case: Case) -> Outcome:
    body = copy.deepcopy(case.obj)
    try:
        if case.operation == "CREATE":
            stored = client.create(case.collection, body, dry_run=True).body
        elif case.operation == "UPDATE":
            current = kube.get(case.item)
            if case.kind == "Pod":
                # What a pod may change: its labels and annotations.
                stored_body = copy.deepcopy(current)
                stored_body["metadata"]["labels"] = body["metadata"].get("labels", {})
                stored_body["metadata"].setdefault("labels", {})["e2e-updated"] = "true"
                if "annotations" in body["metadata"]:
                    stored_body["metadata"]["annotations"] = body["metadata"]["annotations"]
                body = stored_body
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored = client.call("PUT", case.item, body, params={"dryRun": "All"}).body
        else:
            stored = client.call("DELETE", case.item, params={"dryRun": "All"}).body
    except KubeError as exc:
        match = _DENIED.search(exc.message)
        if match is None:
            raise
        return Outcome(refused=match.group(1), placement=None)
    if case.operation == "DELETE":
        return Outcome(refused=None, placement=None)
    return Outcome(refused=None, placement=_compared(stored), stored=stored)


# --- installing either side ----------------------------------------------------------------


def _path(obj: dict[str, Any]) -> str:
    return f"{ADMISSION}/{PLURALS[obj['kind']]}/{obj['metadata']['name']}"


def _probe(kube: Kube, namespace: str) -> tuple[bool, bool]:
    """(placed, refused): whether an interruptible pod is placed and a serving pod that asks
    for preemptible nodes is refused, by whatever admission is installed."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    body = kube.create(pods, cluster.pod("probe", workload="interruptible"), dry_run=True).body
    placed = PLACEMENT in body["metadata"].get("annotations", {})
    serving = cluster.pod("probe", workload="serving", nodeSelector={CLASS_LABEL: PREEMPTIBLE})
    try:
        kube.create(pods, serving, dry_run=True)
    except KubeError as exc:
        if _DENIED.search(exc.message) is None:
            raise
        return placed, True
    return placed, False


def wait_for(kube: Kube, namespace: str, *, placed: bool, refused: bool, what: str) -> None:
    wait_until(
        lambda: _probe(kube, namespace) == (placed, refused), timeout=30, what=what, interval=0.2
    )


@pytest.fixture(scope="module")
def exported() -> list[dict[str, Any]]:
    return export(load_policy(POLICY_DIR)).objects


def install(kube: Kube, objects: list[dict[str, Any]], probe_ns: str) -> None:
    for obj in objects:
        kube.apply(_path(obj), obj)
    # A new policy takes about a second to be enforced.
    wait_for(kube, probe_ns, placed=True, refused=True, what="the exported policies in force")


def uninstall(kube: Kube, objects: list[dict[str, Any]], probe_ns: str) -> None:
    for obj in reversed(objects):
        kube.delete(_path(obj), grace_seconds=None)
    wait_for(kube, probe_ns, placed=False, refused=False, what="no admission in force")


@pytest.fixture
def probe_namespace(kube: Kube) -> str:
    name = cluster.unique("probe-policies")
    cluster.create_namespace(kube, name)
    return name


# --- the tests -------------------------------------------------------------------------------


def _case_priority_classes() -> list[dict[str, Any]]:
    """The PriorityClasses the policy cases say the cluster holds (spec.priorityClasses)."""
    found = {}
    for path in sorted((POLICY_DIR / "tests").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for obj in (doc or {}).get("spec", {}).get("priorityClasses") or ():
                found[obj["metadata"]["name"]] = obj
    return list(found.values())


def _prepare(kube: Kube, cases: list[Case]) -> None:
    """A namespace per case, and the objects UPDATE and DELETE cases change, created while no
    admission is installed (as if before enforcement began); the PriorityClasses the cases
    name."""
    for priority_class in _case_priority_classes():
        name = priority_class["metadata"]["name"]
        kube.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", priority_class)
    for case in cases:
        case.namespace = cluster.unique("diff")
        cluster.create_namespace(
            kube, case.namespace, annotations=case.namespace_annotations or None
        )
        if case.username is not None:
            cluster.grant_admin(kube, case.namespace, [case.username])
        if case.old is not None:
            kube.create(case.collection, case.old)


@pytest.fixture
def webhook_configurations(
    kube: Kube, webhook: WebhookServer, base_objects: list[dict[str, Any]]
) -> Iterator[list[dict[str, Any]]]:
    """The session's webhook configurations, which a test may remove: they are back after it."""
    configs = local_webhook_configurations(base_objects, webhook.url, webhook.ca_file.read_bytes())
    try:
        yield configs
    finally:
        register(kube, webhook, base_objects)


def test_the_exported_policies_decide_as_the_webhook_does(
    kube: Kube,
    webhook: WebhookServer,
    base_objects: list[dict[str, Any]],
    webhook_configurations: list[dict[str, Any]],
    exported: list[dict[str, Any]],
    probe_namespace: str,
) -> None:
    cases = all_cases()
    unregister(kube, webhook_configurations)
    wait_for(kube, probe_namespace, placed=False, refused=False, what="the webhook out of use")
    _prepare(kube, cases)

    install(kube, exported, probe_namespace)
    try:
        by_policies = [send(kube, case) for case in cases]
        # Reinvocation-safe: the policies' output sent again comes back unchanged.
        again = [
            (case, outcome, send(kube, replace(case, obj=_clean(outcome.stored))))
            for case, outcome in zip(cases, by_policies, strict=True)
            if case.operation == "CREATE" and case.kind == "Pod" and outcome.stored is not None
        ]
    finally:
        uninstall(kube, exported, probe_namespace)
    register(kube, webhook, base_objects)
    by_webhook = [send(kube, case) for case in cases]

    # The one difference by design: a batch pod above an ordinary pod's priority, which the
    # webhook moves to its class's priority class and the policies (no PriorityClasses in CEL)
    # refuse.
    ceiling = [
        case.name
        for case, p, w in zip(cases, by_policies, by_webhook, strict=True)
        if w.refused is None and p.refused is not None and CEILING in p.refused
    ]
    differences = [
        f"{case.name}:\n  policies: {p}\n  webhook:  {w}"
        for case, p, w in zip(cases, by_policies, by_webhook, strict=True)
        if p != _without_sources(w) and case.name not in ceiling
    ]
    changed_class = [
        case.name
        for case, w in zip(cases, by_webhook, strict=True)
        if case.operation == "UPDATE" and w.refused and "this update makes the pod" in w.refused
    ]
    refused = sum(w.refused is not None for w in by_webhook)
    placed = sum(bool(w.placement and w.placement["placement"]) for w in by_webhook)
    sources = {
        "policy cases": len(policy_cases()),
        "recorded reviews": len(fixture_cases()),
        "matrix": len(matrix_cases()),
    }
    print(
        f"\ncompared {len(cases)} cases ({', '.join(f'{n} {s}' for s, n in sources.items())}): "
        f"{refused} refused, {placed} placed, {len(cases) - refused - placed} left as written; "
        f"{len(differences)} differences; {len(again)} pods sent again as the policies stored "
        "them"
    )
    assert not differences, "\n".join(differences)
    assert sorted(ceiling) == [
        "policy case a-flexible-pod-naming-a-higher-class-is-moved-to-the-batch-class",
        "priority flexible system-cluster-critical",
        "priority interruptible system-cluster-critical",
    ]
    # Relabelled to serving or as a Ray head, where their constraints admit preemptible nodes.
    assert sorted(changed_class) == sorted(
        ["policy case pods-are-not-changed-on-update"]
        + [
            f"update {shape} {name}"
            for shape in ("none", "selector-preemptible", "in-preemptible-or-absent")
            for name in ("annotated-serving", "labelled-head")
        ]
    )
    changed = [case.name for case, first, second in again if first != second]
    assert not changed, f"placed again, these changed: {changed}"
    assert len(again) >= 100
    assert refused >= 40
    assert placed >= 40


CRITICAL_ON_PREEMPTIBLE = {
    "serving": {"nodeSelector": {CLASS_LABEL: PREEMPTIBLE}},
    "coordinator": _required(_term((K, "In", PREEMPTIBLE))),
    "login": _required(_term((K, "Exists"), (K, "NotIn", "standard"))),
}


def test_with_the_webhook_stopped_the_exported_policies_still_refuse_and_place(
    kube: Kube,
    control_plane: ControlPlane,
    base_objects: list[dict[str, Any]],
    webhook_configurations: list[dict[str, Any]],
    exported: list[dict[str, Any]],
    probe_namespace: str,
    tmp_path: Path,
    namespace: str,
) -> None:
    # A webhook of its own, registered with the shipped (fail-open) configurations, then stopped.
    kubeconfig = service_account_kubeconfig(
        kube, control_plane, base_objects, tmp_path / "kubeconfig"
    )
    try:
        server = start_server(tmp_path, base_objects, kubeconfig)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        configs = register(kube, server, base_objects)
    finally:
        server.stop()
    install(kube, exported, probe_namespace)
    try:
        pods = f"/api/v1/namespaces/{namespace}/pods"
        for workload, spec in CRITICAL_ON_PREEMPTIBLE.items():
            with pytest.raises(KubeError) as refused:
                kube.create(pods, cluster.pod(f"{workload}-0", workload=workload, **spec))
            assert "ValidatingAdmissionPolicy 'preemptguard-default'" in refused.value.message
            assert f"class {workload} must run on standard nodes" in refused.value.message
            assert not kube.exists(f"{pods}/{workload}-0")
        # Placement, too, is done without the webhook.
        placed = kube.create(pods, cluster.pod("sweep", workload="interruptible")).body
        assert placed["metadata"]["annotations"][PLACEMENT] == "interruptible"
        assert {
            "key": CLASS_LABEL,
            "operator": "Equal",
            "value": PREEMPTIBLE,
            "effect": "NoSchedule",
        } in placed["spec"]["tolerations"]
        kube.delete(f"{pods}/sweep")
    finally:
        uninstall(kube, exported, probe_namespace)
        unregister(kube, configs)
