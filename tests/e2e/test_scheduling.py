"""Scheduling policy on the real control plane: the shipped packing scheduler
(``manifests/components/packing-scheduler``) bin-packs GPUs where the default scheduler spreads
them, and the batch priority class lets critical pods take standard capacity from batch work,
never the other way round, while batch work never preempts anything.

Every test brings its own fake nodes (a *pool*), with a label its pods select and a taint only
its pods tolerate: the session's nodes and every other test's pods stay out of the count, and
the pool's pods stay off the session's nodes. A pool is removed with its test.

No kubelet runs: a pod the scheduler preempts is deleted gracefully and would stay Terminating
for ever, holding its GPUs. ``_finish_terminating`` plays the kubelet, confirming such deletions
(grace 0) while a test waits, as a kubelet does once the container has stopped.

The packing scheduler runs as the component's ServiceAccount with the component's RBAC, on the
shipped configuration (``harness.scheduling`` says what a local run changes: the kubeconfig;
and on 1.20, which predates ``kubescheduler.config.k8s.io/v1``, the same scoring in ``v1beta1``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import REPO, cluster, scheduling
from harness.cluster import CLASS_LABEL, PREEMPTIBLE, STANDARD
from harness.controlplane import ControlPlane
from harness.kube import Kube
from harness.manifests import NAMESPACE, Tree
from harness.processes import wait_until
from harness.scheduling import PackingScheduler
from harness.webhook import (
    ServerError,
    WebhookServer,
    register,
    service_account_kubeconfig,
    start_server,
)

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]

POOL_KEY = "e2e.preemptguard.together.ai/pool"
BATCH = "preemptguard-batch"
PACKING = scheduling.SCHEDULER_NAME
GPU = "nvidia.com/gpu"
# A GPU pod asks for cpu and memory in proportion (a quarter of the node with two of its
# eight GPUs): the default scheduler then scores nodes by what is left, as it does in a real
# cluster, rather than choosing at random between nodes that all look empty.
POD_CPU, POD_MEMORY = "12", "128Gi"
PACKING_POLICY = REPO / "policies" / "packing" / "policy.yaml"


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def _pod_path(namespace: str, name: str) -> str:
    return f"{_pods(namespace)}/{name}"


# --- pools of nodes ----------------------------------------------------------------------------


@dataclass
class Pool:
    """Fake nodes of one test: only pods with ``place`` applied select and tolerate them."""

    name: str
    nodes: list[str] = field(default_factory=list)

    @property
    def taint(self) -> Obj:
        return {"key": POOL_KEY, "value": self.name, "effect": "NoSchedule"}

    @property
    def toleration(self) -> Obj:
        return {**self.taint, "operator": "Equal"}

    def place(self, spec: Obj) -> Obj:
        """``spec`` (a pod's) restricted to this pool."""
        spec.setdefault("nodeSelector", {})[POOL_KEY] = self.name
        spec.setdefault("tolerations", []).append(self.toleration)
        return spec


def gpu_pod(
    name: str,
    pool: Pool,
    *,
    gpus: int = 2,
    workload: str | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """A pod of ``pool`` asking for ``gpus`` GPUs and their share of cpu and memory."""
    body = cluster.pod(name, workload=workload, labels=labels, **spec)
    (container,) = body["spec"]["containers"]
    container["resources"] = {
        "requests": {"cpu": POD_CPU, "memory": POD_MEMORY, GPU: str(gpus)},
        "limits": {GPU: str(gpus)},
    }
    pool.place(body["spec"])
    return body


@pytest.fixture
def pools(kube: Kube, namespace: str) -> Iterator[Callable[..., Pool]]:
    """Makes pools for the test; removes the test's workloads, pods and nodes after it."""
    made: list[Pool] = []

    def make(compute_class: str | None, count: int, *, gpus: int = 8) -> Pool:
        pool = Pool(cluster.unique("pool"))
        for i in range(1, count + 1):
            name = f"{pool.name}-{i}"
            cluster.create_node(
                kube,
                name,
                compute_class,
                gpus=gpus,
                labels={POOL_KEY: pool.name},
                taints=[pool.taint],
            )
            pool.nodes.append(name)
        made.append(pool)
        return pool

    try:
        yield make
    finally:
        _empty_namespace(kube, namespace)
        for pool in made:
            for node in pool.nodes:
                kube.delete(f"/api/v1/nodes/{node}")


def _empty_namespace(kube: Kube, namespace: str) -> None:
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    for deployment in kube.get(deployments)["items"]:
        kube.delete(f"{deployments}/{deployment['metadata']['name']}")

    def empty() -> bool:
        replica_sets = kube.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
        pods = kube.get(_pods(namespace))["items"]
        cluster.delete_pods(kube, namespace, [p["metadata"]["name"] for p in pods])
        return not replica_sets and not pods

    wait_until(empty, timeout=60, what=f"namespace {namespace} to hold no pods")


# --- waiting ---------------------------------------------------------------------------------


def _finish_terminating(kube: Kube, namespace: str) -> list[str]:
    """What a kubelet does for a pod being deleted once its container stops: confirm the
    deletion (grace 0). Returns the names of the pods it removed."""
    gone = [
        p["metadata"]["name"]
        for p in kube.get(_pods(namespace))["items"]
        if "deletionTimestamp" in p["metadata"]
    ]
    cluster.delete_pods(kube, namespace, gone)
    return gone


def _wait_bound(
    kube: Kube, namespace: str, names: list[str], *, kubelet: list[str] | None = None
) -> dict[str, Obj]:
    """The pods ``names`` once all are bound; with ``kubelet`` (a list to collect the names
    into), deletions by preemption are confirmed meanwhile."""

    def bound() -> dict[str, Obj] | None:
        if kubelet is not None:
            kubelet.extend(_finish_terminating(kube, namespace))
        pods = {n: kube.get(_pod_path(namespace, n)) for n in names}
        return pods if all(p["spec"].get("nodeName") for p in pods.values()) else None

    try:
        return wait_until(bound, timeout=60, what=f"{len(names)} pods in {namespace} bound")
    except TimeoutError as exc:
        detail = {n: cluster.scheduling_events(kube, namespace, n) for n in names}
        raise AssertionError(f"{exc}: {detail}") from None


def _wait_unschedulable(kube: Kube, namespace: str, name: str) -> str:
    """The scheduler's message once it has tried ``name`` and found no node, after a few more
    seconds in which any preemption it started would show."""

    def failed() -> str | None:
        events = kube.get(
            f"/api/v1/namespaces/{namespace}/events",
            fieldSelector=f"involvedObject.name={name},reason=FailedScheduling",
        )["items"]
        return str(events[0].get("message", "")) if events else None

    message = wait_until(failed, timeout=60, what=f"the scheduler to try {namespace}/{name}")
    time.sleep(3)
    return message


def _assert_not_eligible(message: str) -> None:
    """Where the scheduler says why it did not preempt (1.37; 1.20 says nothing), the reason is
    the pod's preemptionPolicy."""
    if "preemption:" in message:
        assert "not eligible due to preemptionPolicy=Never" in message, message


def _bound_nodes(pods: dict[str, Obj]) -> Counter[str]:
    return Counter(str(p["spec"]["nodeName"]) for p in pods.values())


def _victims(kube: Kube, namespace: str) -> set[str]:
    """The pods the scheduler says it preempted (its ``Preempted`` Events on them)."""
    events = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector="reason=Preempted")
    return {str(e["involvedObject"]["name"]) for e in events["items"]}


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def priority_classes(kube: Kube, base_objects: list[Obj]) -> dict[str, Obj]:
    """The PriorityClasses the manifests ship, applied as an install applies them."""
    shipped = {o["metadata"]["name"]: o for o in base_objects if o["kind"] == "PriorityClass"}
    for name, obj in shipped.items():
        kube.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", obj)
    return shipped


@pytest.fixture(scope="session")
def packing_objects(manifests: Tree) -> list[Obj]:
    return scheduling.render_component(manifests)


@pytest.fixture(scope="session")
def packing_scheduler(
    kube: Kube,
    control_plane: ControlPlane,
    packing_objects: list[Obj],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PackingScheduler]:
    work = tmp_path_factory.mktemp(f"packing-{control_plane.release.id}")
    try:
        scheduler = scheduling.start_packing_scheduler(control_plane, kube, packing_objects, work)
    except scheduling.SchedulerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield scheduler
    finally:
        scheduler.stop()


@pytest.fixture(autouse=True)
def _packing_scheduler_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "packing_scheduler" in request.fixturenames:
        request.getfixturevalue("packing_scheduler").check_alive()


@pytest.fixture
def packing_policy_webhook(
    kube: Kube,
    control_plane: ControlPlane,
    priority_classes: dict[str, Obj],
    webhook: WebhookServer,
    base_objects: list[Obj],
    tmp_path: Path,
) -> Iterator[WebhookServer]:
    """A second ``preemptguard serve`` on the packing policy, with the shipped webhook
    configurations pointed at it for the test and back at the session's server after it."""
    if not PACKING_POLICY.exists():
        pytest.fail(f"{PACKING_POLICY.relative_to(REPO)} is missing", pytrace=False)
    policy_map = {"kind": "ConfigMap", "metadata": {"name": "packing"},
                  "data": {"policy.yaml": PACKING_POLICY.read_text()}}  # fmt: skip
    kubeconfig = service_account_kubeconfig(
        kube, control_plane, base_objects, tmp_path / "kubeconfig"
    )
    try:
        server = start_server(tmp_path, [policy_map], kubeconfig)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        register(kube, server, base_objects)
        yield server
    finally:
        try:
            register(kube, webhook, base_objects)
        finally:
            server.stop()


# --- the packing scheduler ----------------------------------------------------------------------


def _sweep(kube: Kube, namespace: str, pool: Pool, prefix: str, **spec: Any) -> dict[str, Obj]:
    """Eight interruptible pods of two GPUs each, created at once as a sweep creates them, once
    all are bound."""
    names = [f"{prefix}-{i}" for i in range(1, 9)]
    for name in names:
        kube.create(_pods(namespace), gpu_pod(name, pool, workload="interruptible", **spec))
    return _wait_bound(kube, namespace, names)


def test_the_packing_scheduler_fills_two_nodes_where_the_default_one_spreads_over_four(
    kube: Kube,
    namespace: str,
    priority_classes: dict[str, Obj],
    webhook: WebhookServer,
    packing_scheduler: PackingScheduler,
    pools: Callable[..., Pool],
) -> None:
    """Four preemptible nodes of 8 GPUs, eight 2-GPU interruptible pods: 2 nodes full and 2
    free with the packing profile; 2 pods on each of the 4 with the default scheduler."""
    packed_pool = pools(PREEMPTIBLE, 4)
    packed = _sweep(kube, namespace, packed_pool, "packed", schedulerName=PACKING)
    assert all(p["spec"]["schedulerName"] == PACKING for p in packed.values())
    used = _bound_nodes(packed)
    assert sorted(used.values()) == [4, 4], f"packed onto {dict(used)}"
    assert set(used) <= set(packed_pool.nodes)
    # The webhook placed them as ever: the packing scheduler honours what placement added.
    for pod in packed.values():
        assert pod["metadata"]["annotations"][cluster.PLACEMENT] == "interruptible"

    spread_pool = pools(PREEMPTIBLE, 4)
    spread = _sweep(kube, namespace, spread_pool, "spread")
    assert all(p["spec"]["schedulerName"] == "default-scheduler" for p in spread.values())
    used = _bound_nodes(spread)
    assert sorted(used.values()) == [2, 2, 2, 2], f"spread onto {dict(used)}"
    assert set(used) == set(spread_pool.nodes)


def test_the_packing_scheduler_runs_the_shipped_profile(
    control_plane: ControlPlane, packing_scheduler: PackingScheduler, packing_objects: list[Obj]
) -> None:
    """What the running scheduler reports as its effective configuration (its /configz), with
    the release's defaults filled in: the shipped scoring, on 1.37 as on 1.20 (in v1beta1)."""
    running = scheduling.scoring(scheduling.configz(packing_scheduler, control_plane.token))
    shipped = scheduling.scoring(scheduling.shipped_configuration(packing_objects))
    assert running.scheduler_name == shipped.scheduler_name == PACKING
    assert running.strategy == shipped.strategy == "MostAllocated"
    assert running.resource_weights == shipped.resource_weights
    assert max(running.resource_weights, key=running.resource_weights.__getitem__) == GPU
    assert running.spread_defaulting == "List"
    # Nothing that prefers emptier nodes scores; what the pod asks for still does.
    spreading = {"NodeResourcesBalancedAllocation", "ImageLocality", "NodeResourcesLeastAllocated"}
    assert not running.enabled & spreading, running.enabled
    assert running.disabled >= {"NodeResourcesBalancedAllocation", "ImageLocality"}
    kept = {"NodeAffinity", "TaintToleration", "PodTopologySpread", "InterPodAffinity"}
    assert not running.disabled & kept, running.disabled
    if running.merged:  # the release's defaults listed (1.37; 1.20 lists what was written)
        assert kept <= running.enabled, running.enabled


def test_the_packing_scheduler_runs_as_its_service_account_on_its_own_lease(
    kube: Kube, packing_scheduler: PackingScheduler, packing_objects: list[Obj]
) -> None:
    """The component's identity is enough: it holds its Lease (where its Role lets it write)
    and no other, and its RoleBinding lets it read the authentication ConfigMap a real
    cluster has (the local API server has none; see harness.scheduling)."""
    lease = kube.get(packing_scheduler.lease)
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert lease["spec"]["holderIdentity"]
    account = f"system:serviceaccount:{NAMESPACE}:{scheduling.ACCOUNT}"

    def can(verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> bool:
        attributes = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": account,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                "resourceAttributes": attributes,
            },
        }
        answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review).body
        return bool(answer["status"].get("allowed"))

    name = lease["metadata"]["name"]
    coordination = "coordination.k8s.io"
    assert can("update", "leases", coordination, NAMESPACE, name)
    # system:kube-scheduler also grants the `kube-scheduler` Lease (in any namespace): the
    # rights of a scheduler include the default one's; the configuration never names it.
    assert not can("update", "leases", coordination, NAMESPACE, "preemptguard-observer")
    assert can("get", "configmaps", "", "kube-system", "extension-apiserver-authentication")
    assert not can("get", "secrets", "", "kube-system")
    assert can("create", "bindings", "", "default")
    assert can("delete", "pods", "", "default")  # preemption


def test_the_rest_of_the_component_passes_a_server_side_dry_run(
    kube: Kube, packing_scheduler: PackingScheduler, packing_objects: list[Obj]
) -> None:
    """Its RBAC is applied for real (the scheduler runs with it); its ConfigMap, Deployment and
    PodDisruptionBudget are accepted as written. 1.20 serves no policy/v1 (from 1.21): the
    PodDisruptionBudget is left to the schema tests there (tests/test_packing_scheduler.py)."""
    minor = int(kube.get("/version")["minor"].rstrip("+"))
    paths = {
        "ConfigMap": "/api/v1/namespaces/{}/configmaps/{}",
        "Deployment": "/apis/apps/v1/namespaces/{}/deployments/{}",
        "PodDisruptionBudget": "/apis/policy/v1/namespaces/{}/poddisruptionbudgets/{}",
    }
    checked = []
    for obj in scheduling.component_objects(packing_objects):
        if obj["kind"] not in paths or (obj["kind"] == "PodDisruptionBudget" and minor < 21):
            continue
        path = paths[obj["kind"]].format(NAMESPACE, obj["metadata"]["name"])
        stored = kube.apply(path, obj, dry_run=True)
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
        checked.append(obj["kind"])
    expected = {"ConfigMap", "Deployment"} | ({"PodDisruptionBudget"} if minor >= 21 else set())
    assert sorted(checked) == sorted(expected)


def test_the_packing_policy_sends_batch_pods_to_the_packing_scheduler(
    kube: Kube,
    namespace: str,
    packing_policy_webhook: WebhookServer,
    packing_scheduler: PackingScheduler,
    pools: Callable[..., Pool],
) -> None:
    """With the webhook on policies/packing, pods name no scheduler and still pack."""
    pool = pools(PREEMPTIBLE, 4)
    packed = _sweep(kube, namespace, pool, "packed")
    assert all(p["spec"]["schedulerName"] == PACKING for p in packed.values())
    assert sorted(_bound_nodes(packed).values()) == [4, 4]
    # Flexible pods too; standard-only classes stay with the default scheduler, and a pod that
    # chose a scheduler of its own keeps it.
    probes: dict[str, tuple[str, dict[str, Any], str]] = {
        "flexible": ("flexible", {}, PACKING),
        "serving": ("serving", {}, "default-scheduler"),
        "own-scheduler": ("interruptible", {"schedulerName": "gang"}, "gang"),
    }
    for name, (workload, spec, expected) in probes.items():
        answer = kube.create(
            _pods(namespace), cluster.pod(name, workload=workload, **spec), dry_run=True
        ).body
        assert answer["spec"]["schedulerName"] == expected, name
    assert packing_policy_webhook.admissions(namespace)


# --- priority and preemption -----------------------------------------------------------------


def _priority_class(kube: Kube, name: str, value: int, policy: str) -> None:
    kube.apply(
        f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": policy,
            "globalDefault": False,
        },
    )


def _deployment(name: str, template: Obj) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def test_serving_takes_standard_capacity_from_flexible_pods_never_the_other_way_round(
    kube: Kube,
    namespace: str,
    priority_classes: dict[str, Obj],
    webhook: WebhookServer,
    pools: Callable[..., Pool],
) -> None:
    """No preemptible capacity: flexible pods fill two standard nodes; a serving Deployment's
    pod is then scheduled by preempting one of them; a flexible pod created after it waits
    and preempts nothing."""
    batch = priority_classes[BATCH]
    assert batch["value"] < 0
    assert batch["preemptionPolicy"] == "Never"
    pool = pools(STANDARD, 2)
    names = [f"flexible-{i}" for i in range(1, 9)]
    for name in names:
        kube.create(_pods(namespace), gpu_pod(name, pool, workload="flexible"))
    flexible = _wait_bound(kube, namespace, names)
    assert sorted(_bound_nodes(flexible).values()) == [4, 4]
    for pod in flexible.values():
        assert pod["spec"]["priorityClassName"] == BATCH
        assert pod["spec"]["priority"] == batch["value"]
        assert pod["spec"]["preemptionPolicy"] == "Never"

    template = gpu_pod("x", pool, workload="serving", labels={"app": "api"})
    del template["metadata"]["name"]
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("api", template))

    def serving_pod() -> str | None:
        pods = cluster.pods_with_labels(kube, namespace, "app=api")
        return str(pods[0]["metadata"]["name"]) if pods else None

    serving_name = wait_until(serving_pod, timeout=30, what="the Deployment's pod")
    preempted: list[str] = []
    serving = _wait_bound(kube, namespace, [serving_name], kubelet=preempted)[serving_name]
    assert serving["spec"].get("priority", 0) == 0
    assert "priorityClassName" not in serving["spec"]
    assert serving["spec"]["nodeName"] in pool.nodes
    # One flexible pod made room (two GPUs), chosen and deleted by the scheduler.
    assert len(preempted) == 1, preempted
    assert preempted[0] in names
    # The scheduler's own record of it, an Event on the victim (written asynchronously).
    wait_until(
        lambda: _victims(kube, namespace) == set(preempted),
        timeout=10,
        what=f"a Preempted event on {preempted}",
    )

    late = gpu_pod("flexible-late", pool, workload="flexible")
    stored = kube.create(_pods(namespace), late).body
    assert stored["spec"]["priority"] == batch["value"]
    message = _wait_unschedulable(kube, namespace, "flexible-late")
    _assert_not_eligible(message)
    assert _finish_terminating(kube, namespace) == [], message
    late_now = kube.get(_pod_path(namespace, "flexible-late"))
    assert not late_now["spec"].get("nodeName"), message
    assert not late_now.get("status", {}).get("nominatedNodeName"), message
    still = kube.get(_pod_path(namespace, serving_name))
    assert still["spec"]["nodeName"] == serving["spec"]["nodeName"]
    assert "deletionTimestamp" not in still["metadata"]
    assert _victims(kube, namespace) == set(preempted)


def test_an_interruptible_pod_never_preempts_even_pods_of_lower_priority(
    kube: Kube,
    namespace: str,
    priority_classes: dict[str, Obj],
    webhook: WebhookServer,
    pools: Callable[..., Pool],
) -> None:
    """A preemptible node full of pods below the batch class: an interruptible pod waits and
    the node stays untouched; a pod of the batch class's priority that may preempt (the
    control) takes a place there at once."""
    batch = priority_classes[BATCH]
    lowest, preempting = cluster.unique("e2e-lowest"), cluster.unique("e2e-preempting")
    _priority_class(kube, lowest, batch["value"] - 900, "PreemptLowerPriority")
    _priority_class(kube, preempting, batch["value"], "PreemptLowerPriority")
    try:
        pool = pools(PREEMPTIBLE, 1)
        tolerate = [{"key": CLASS_LABEL, "operator": "Exists"}]
        # Unclassified pods: the webhook leaves them (and their priority class) alone.
        names = [f"low-{i}" for i in range(1, 5)]
        for name in names:
            body = gpu_pod(name, pool, priorityClassName=lowest, tolerations=list(tolerate))
            kube.create(_pods(namespace), body)
        low = _wait_bound(kube, namespace, names)
        assert all(p["spec"]["priority"] == batch["value"] - 900 for p in low.values())

        stored = kube.create(
            _pods(namespace), gpu_pod("sweep", pool, workload="interruptible")
        ).body
        assert (stored["spec"]["priority"], stored["spec"]["preemptionPolicy"]) == (
            batch["value"],
            "Never",
        )
        message = _wait_unschedulable(kube, namespace, "sweep")
        _assert_not_eligible(message)
        assert _finish_terminating(kube, namespace) == [], message
        assert not kube.get(_pod_path(namespace, "sweep"))["spec"].get("nodeName"), message
        for name in names:
            pod = kube.get(_pod_path(namespace, name))
            assert "deletionTimestamp" not in pod["metadata"], name
        assert not _victims(kube, namespace)

        # The control: the same priority, allowed to preempt, does.
        cluster.delete_pods(kube, namespace, ["sweep"])
        body = gpu_pod("control", pool, priorityClassName=preempting, tolerations=list(tolerate))
        kube.create(_pods(namespace), body)
        preempted: list[str] = []
        _wait_bound(kube, namespace, ["control"], kubelet=preempted)
        assert len(preempted) == 1, preempted
        assert preempted[0] in names
    finally:
        for name in (lowest, preempting):
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
