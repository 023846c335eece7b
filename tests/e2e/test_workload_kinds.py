"""The GPU operators' kinds through the real API server with their upstream CRDs installed
(``tests/e2e/upstream.py``: KubeRay, JobSet, LeaderWorkerSet, the Kubeflow training operator,
Kubeflow Trainer and Volcano, fetched once by ``hack/upstream-crds.sh``), the real
``preemptguard serve`` and the shipped webhook configurations, whose workloads hook sends
every kind of the default policy's ``spec.workloadKinds``.

What the API server answers is what is asserted. A refusal by the validating webhook also
shows that the object passed the CRD's schema: the API server validates a custom object
against its schema before it calls validating webhooks (a schema error is a 422, never the
webhook's 403). Admitted objects are read back to show that the schema kept every field that
was sent (the placement annotations on the templates above all): the CRDs prune what they do
not declare.

1.37 only: the upstream CRDs need Kubernetes 1.25 or later. 1.20 refuses those of KubeRay,
JobSet, LeaderWorkerSet, Volcano and Trainer (it reads the ``default: ""`` of their name fields
as null: 422) and would keep those of the training operator only without their CEL rules
(``x-kubernetes-validations``, which it does not know), so none would be upstream's schema.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from harness import REPO
from harness.cluster import CLASS_LABEL, PREEMPTIBLE, WORKLOAD, refused
from harness.kube import Kube, KubeError
from harness.webhook import WebhookServer
from tests.e2e import upstream

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.releases(
        "1.37",
        reason='the upstream CRDs need 1.25+: 1.20 refuses most (default: "" read as null) '
        "and drops the CEL rules of the rest",
    ),
]

SAMPLES = REPO / "tests" / "fixtures" / "upstream"
WORKLOADS_HOOK = "workloads.validate.preemptguard.together.ai"
JSON_PATCH = "application/json-patch+json"

Obj = dict[str, Any]


def _sample(relative: str, kind: str) -> Obj:
    """The object of ``kind`` in a vendored upstream sample, as upstream wrote it."""
    docs = yaml.safe_load_all((SAMPLES / relative).read_text())
    found: Obj = next(d for d in docs if isinstance(d, dict) and d.get("kind") == kind)
    return found


def _collection(obj: Obj, namespace: str) -> str:
    group_version = obj["apiVersion"]
    plural = {
        "RayService": "rayservices",
        "RayJob": "rayjobs",
        "JobSet": "jobsets",
        "LeaderWorkerSet": "leaderworkersets",
    }[obj["kind"]]
    return f"/apis/{group_version}/namespaces/{namespace}/{plural}"


def _annotate(template: Obj, **annotations: str) -> None:
    template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)


def _missing(sent: Any, stored: Any, where: str = "") -> list[str]:
    """Where ``stored`` lacks or changed what ``sent`` holds (what it adds, such as schema
    defaults, is not counted)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [where or "."]
        return [m for k, v in sent.items() for m in _missing(v, stored.get(k), f"{where}.{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [where]
        pairs = enumerate(zip(sent, stored, strict=True))
        return [m for i, (a, b) in pairs for m in _missing(a, b, f"{where}[{i}]")]
    return [] if sent == stored else [where]


def _assert_refused_by_the_webhook(exc: KubeError, *fragments: str) -> None:
    assert exc.status == 403, exc.message
    assert refused(exc), exc.message
    assert f'admission webhook "{WORKLOADS_HOOK}" denied the request' in exc.message
    for fragment in fragments:
        assert fragment in exc.message, exc.message


@pytest.fixture
def upstream_crds(kube: Kube) -> list[Obj]:
    """Every upstream CRD installed (server-side apply) and established: once per session."""
    try:
        return upstream.installed(kube)
    except (upstream.UpstreamError, TimeoutError) as exc:
        pytest.fail(str(exc), pytrace=False)


def test_the_upstream_crds_are_stored_as_written_and_served(
    kube: Kube, upstream_crds: list[Obj]
) -> None:
    written = {c["metadata"]["name"]: c for c in upstream.crds()}
    assert {c["metadata"]["name"] for c in upstream_crds} == set(written)
    assert {"rayservices.ray.io", "rayjobs.ray.io", "jobsets.jobset.x-k8s.io",
            "leaderworkersets.leaderworkerset.x-k8s.io"} <= set(written)  # fmt: skip
    for stored in upstream_crds:
        name = stored["metadata"]["name"]
        sent_versions = written[name]["spec"]["versions"]
        assert [v["schema"] for v in stored["spec"]["versions"]] == [
            v["schema"] for v in sent_versions
        ], name
    # Discovery serves each kind at its storage version (what the audit reads).
    groups = {g["name"]: g for g in kube.get("/apis")["groups"]}
    assert groups["ray.io"]["preferredVersion"]["version"] == "v1"
    assert groups["jobset.x-k8s.io"]["preferredVersion"]["version"] == "v1alpha2"


def test_a_rayservice_whose_workers_require_preemptible_nodes_is_refused_at_its_template(
    kube: Kube, webhook: WebhookServer, upstream_crds: list[Obj], namespace: str
) -> None:
    rayservice = _sample("kuberay/modified/rayservice-workers-on-preemptible.yaml", "RayService")
    with pytest.raises(KubeError) as refusal:
        kube.create(_collection(rayservice, namespace), rayservice)
    _assert_refused_by_the_webhook(
        refusal.value,
        "spec.rayClusterConfig.workerGroupSpecs[0].template: class serving must run on "
        "standard nodes",
        f"nodeSelector {CLASS_LABEL}={PREEMPTIBLE}",
    )
    assert not kube.exists(f"{_collection(rayservice, namespace)}/rayservice-sample")
    # The same RayService without the node selector: its workers are serving, and admitted.
    del rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"][
        "nodeSelector"
    ]
    created = kube.create(_collection(rayservice, namespace), rayservice)
    assert created.status == 201
    assert not _missing(rayservice["spec"], created.body["spec"])


def test_a_serving_jobset_and_a_leaderworkerset_requiring_preemptible_nodes_are_refused(
    kube: Kube, webhook: WebhookServer, upstream_crds: list[Obj], namespace: str
) -> None:
    jobset = _sample("jobset/paralleljobs.yaml", "JobSet")
    driver = jobset["spec"]["replicatedJobs"][1]
    assert driver["name"] == "driver"
    _annotate(driver["template"]["spec"]["template"], **{WORKLOAD: "serving"})
    driver["template"]["spec"]["template"]["spec"]["nodeSelector"] = {CLASS_LABEL: PREEMPTIBLE}
    with pytest.raises(KubeError) as refusal:
        kube.create(_collection(jobset, namespace), jobset)
    _assert_refused_by_the_webhook(
        refusal.value,
        "spec.replicatedJobs[1].template.spec.template: class serving must run on standard nodes",
    )

    # A LeaderWorkerSet's templates are serving unless annotated (the policy's template
    # default): requiring preemptible nodes is enough to be refused.
    lws = _sample("lws/lws.yaml", "LeaderWorkerSet")
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    worker["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": CLASS_LABEL, "operator": "In", "values": [PREEMPTIBLE]}
                    ]}
                ]
            }
        }
    }  # fmt: skip
    with pytest.raises(KubeError) as refusal:
        kube.create(_collection(lws, namespace), lws)
    _assert_refused_by_the_webhook(
        refusal.value,
        "spec.leaderWorkerTemplate.workerTemplate: class serving must run on standard nodes",
    )
    for obj in (jobset, lws):
        assert not kube.exists(f"{_collection(obj, namespace)}/{obj['metadata']['name']}")


def test_an_interruptible_rayjob_is_admitted_and_scaled_but_not_moved_onto_preemptible_nodes(
    kube: Kube, webhook: WebhookServer, upstream_crds: list[Obj], namespace: str
) -> None:
    rayjob = _sample("kuberay/ray-job.sample.yaml", "RayJob")
    workers = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    _annotate(workers["template"], **{WORKLOAD: "interruptible"})
    collection = _collection(rayjob, namespace)
    item = f"{collection}/{rayjob['metadata']['name']}"

    created = kube.create(collection, rayjob)
    assert created.status == 201
    # The webhook's warnings come back through the API server: what the pods will get.
    assert any(
        "pods of spec.rayClusterSpec.workerGroupSpecs[0].template will get: requires "
        f"{CLASS_LABEL} In [{PREEMPTIBLE}]" in w
        for w in created.warnings
    ), created.warnings
    assert any(
        "pods of spec.rayClusterSpec.headGroupSpec.template will get: requires "
        f"{CLASS_LABEL} NotIn [{PREEMPTIBLE}]" in w
        for w in created.warnings
    ), created.warnings
    # The schema kept everything sent, the class annotation on the worker template included.
    stored = kube.get(item)
    assert not _missing(rayjob["spec"], stored["spec"])
    assert stored["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["metadata"][
        "annotations"
    ] == {WORKLOAD: "interruptible"}

    # Scaling the workers changes no template: admitted.
    scaled = kube.call(
        "PATCH",
        item,
        [{"op": "replace", "path": "/spec/rayClusterSpec/workerGroupSpecs/0/replicas",
          "value": 3}],
        content_type=JSON_PATCH,
    )  # fmt: skip
    assert scaled.status == 200
    assert kube.get(item)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 3
    updates = [r for r in webhook.admissions(namespace, rayjob["metadata"]["name"])
               if r["hook"] == "validate" and r["operation"] == "UPDATE"]  # fmt: skip
    assert updates
    assert updates[-1]["allowed"] is True, updates

    # An UPDATE that pins the head (a coordinator) to preemptible nodes reaches the webhook
    # and is refused; the stored RayJob keeps its head where it was.
    with pytest.raises(KubeError) as refusal:
        kube.call(
            "PATCH",
            item,
            [{"op": "add", "path": "/spec/rayClusterSpec/headGroupSpec/template/spec/nodeSelector",
              "value": {CLASS_LABEL: PREEMPTIBLE}}],
            content_type=JSON_PATCH,
        )  # fmt: skip
    _assert_refused_by_the_webhook(
        refusal.value,
        "spec.rayClusterSpec.headGroupSpec.template: class coordinator must run on standard nodes",
    )
    head = kube.get(item)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in head


def test_the_schemas_are_upstreams_not_stand_ins(
    kube: Kube, webhook: WebhookServer, upstream_crds: list[Obj], namespace: str
) -> None:
    """A field the upstream schema lacks is refused under strict field validation (the
    stand-in CRDs of tests/fixtures/upstream/crds keep any field), and a value of the wrong
    type is refused by the schema before any webhook is asked."""
    rayjob = _sample("kuberay/ray-job.sample.yaml", "RayJob")
    collection = _collection(rayjob, namespace)
    unknown = copy.deepcopy(rayjob)
    unknown["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["bogus"] = 1
    with pytest.raises(KubeError) as strict:
        kube.call("POST", collection, unknown,
                  params={"dryRun": "All", "fieldValidation": "Strict"})  # fmt: skip
    assert strict.value.status == 400, strict.value.message
    assert (
        'strict decoding error: unknown field "spec.rayClusterSpec.workerGroupSpecs[0]'
        '.template.spec.bogus"' in strict.value.message
    )
    wrong = copy.deepcopy(rayjob)
    wrong["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "three"
    with pytest.raises(KubeError) as invalid:
        kube.create(collection, wrong, dry_run=True)
    assert invalid.value.status == 422, invalid.value.message
    assert not refused(invalid.value)
