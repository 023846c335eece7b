"""What must never happen does not, with the default install, whether the webhook is attacked
from the pod network or not answering at all.

A user allowed only pods in one namespace tries, through the real API server: a serving pod
pinned to preemptible nodes, a class given to a placed pod by an update, the webhook's own
PriorityClass, a batch pod above an ordinary pod's priority; an interruptible pod must still be
placed. First while another pod floods the webhook's port (the costliest TLS hellos it takes,
connections held idle, headers sent a byte at a time), then with the webhook unreachable.

The default install differs by release: on 1.37 the webhook and the ValidatingAdmissionPolicy
every overlay ships (components/admission-policies); on 1.20, which serves none, the webhook
with pod validation failing closed (components/before-1.30).
"""

from __future__ import annotations

import copy
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from harness import cluster
from harness.binaries import Release
from harness.cluster import CLASS_LABEL, PLACEMENT, PREEMPTIBLE, WORKLOAD
from harness.kube import Kube, KubeError
from harness.manifests import Tree
from harness.processes import free_port, wait_until
from harness.webhook import WebhookServer, config_path, local_webhook_configurations
from tests.attacks import floods
from tests.attacks.floods import Attack, Target

pytestmark = pytest.mark.e2e

USER = "tenant"
USER_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "delete", "patch", "update"],
    }
]
TOLERATE = [{"key": CLASS_LABEL, "operator": "Exists", "effect": "NoSchedule"}]
# A PriorityClass above ordinary pods, as a cluster has for its own critical work.
HIGH = "e2e-high"
ATTACKS = ["hello:secp384r1", "idle:1000", "slowloris:300"]
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
POLICY_PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def _refused(exc: KubeError) -> bool:
    """A refusal by the webhook or by the admission policy (not an error calling either)."""
    return cluster.refused(exc) or (
        "ValidatingAdmissionPolicy 'preemptguard-" in exc.message
        and "denied request" in exc.message
    )


def _kept_out(outcome: dict[str, Any] | KubeError, *, webhook_up: bool) -> KubeError:
    """The error that kept the object out: a refusal, or, with the webhook down, pod
    validation failing closed (the install for clusters without admission policies)."""
    assert isinstance(outcome, KubeError), f"stored: {outcome}"
    failed_closed = (
        not webhook_up
        and 'failed calling webhook "pods.validate.preemptguard.together.ai"' in outcome.message
    )
    assert _refused(outcome) or failed_closed, outcome
    return outcome


def _install_variant(release: Release) -> str:
    return "cert-manager" if release.name == "1.37" else "self-managed+before-1.30"


@pytest.fixture
def default_install(
    kube: Kube,
    release: Release,
    manifests: Tree,
    webhook: WebhookServer,
    base_objects: list[dict[str, Any]],
    namespace: str,
) -> Iterator[Callable[[bool], None]]:
    """The release's default install, its webhook configurations pointed at the local server;
    the callable points them at a closed port (False) or back (True). The session's own
    configurations come back afterwards."""
    objects = manifests.render(_install_variant(release))
    policies = [o for o in objects if o["kind"] in POLICY_PLURALS]
    for obj in policies:
        kube.apply(_policy_path(obj), obj)
    for obj in objects:
        if obj["kind"] == "PriorityClass":
            name = obj["metadata"]["name"]
            kube.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", obj)
    installed = local_webhook_configurations(objects, webhook.url, webhook.ca_file.read_bytes())
    dead = _pointed_at(installed, f"https://127.0.0.1:{free_port()}")

    def reachable(up: bool) -> None:
        for config in installed if up else dead:
            kube.apply(config_path(config, item=True), config)
        _wait_in_force(kube, namespace, placed=up)

    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": HIGH},
        "value": 1000,
    }
    kube.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{HIGH}", high)
    reachable(True)
    try:
        yield reachable
    finally:
        for obj in reversed(policies):
            kube.delete(_policy_path(obj), grace_seconds=None)
        cluster.wait_admission_policies_gone(kube, namespace)
        shipped = local_webhook_configurations(
            base_objects, webhook.url, webhook.ca_file.read_bytes()
        )
        for config in shipped:
            kube.apply(config_path(config, item=True), config)
        _wait_in_force(kube, namespace, placed=True)


def _policy_path(obj: dict[str, Any]) -> str:
    return f"{ADMISSION}/{POLICY_PLURALS[obj['kind']]}/{obj['metadata']['name']}"


def _pointed_at(configs: list[dict[str, Any]], url: str) -> list[dict[str, Any]]:
    configs = copy.deepcopy(configs)
    for config in configs:
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["url"].split("/", 3)[3]
            hook["clientConfig"]["url"] = f"{url}/{path}"
    return configs


def _wait_in_force(kube: Kube, namespace: str, *, placed: bool) -> None:
    """Until an interruptible pod is placed (webhook reachable) or no longer is, and a
    serving pod pinned to preemptible nodes is refused or fails (the admission policy, or pod
    validation failing closed)."""

    def now() -> bool:
        try:
            body = kube.create(
                _pods(namespace), cluster.pod("probe", workload="interruptible"), dry_run=True
            ).body
            mutated = PLACEMENT in body["metadata"].get("annotations", {})
        except KubeError:
            mutated = False  # pod validation failing closed
        try:
            kube.create(_pods(namespace), _serving_pinned("probe"), dry_run=True)
        except KubeError:
            return mutated == placed
        return False

    wait_until(now, timeout=60, what="the install in force", interval=0.3)


def _serving_pinned(name: str) -> dict[str, Any]:
    return cluster.pod(
        name, workload="serving", nodeSelector={CLASS_LABEL: PREEMPTIBLE}, tolerations=TOLERATE
    )


@pytest.fixture
def user(kube: Kube, namespace: str) -> Iterator[Kube]:
    token = cluster.namespace_user(kube, namespace, USER, USER_RULES)
    with kube.with_token(token) as client:
        yield client


def _creates(user: Kube, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | KubeError:
    try:
        return user.create(_pods(namespace), pod).body
    except KubeError as exc:
        return exc


def placed_quietly(kube: Kube, namespace: str) -> str:
    """An unclassified pod asking for preemptible nodes, created as written (the admin, before
    anything else): what an update then tries to make serving."""
    quiet = cluster.pod("relabel", nodeSelector={CLASS_LABEL: PREEMPTIBLE}, tolerations=TOLERATE)
    kube.create(_pods(namespace), quiet)
    return f"{_pods(namespace)}/relabel"


def assert_what_must_never_happen_does_not(
    kube: Kube, user: Kube, namespace: str, nodes: dict[str, str], quiet: str, *, webhook_up: bool
) -> None:
    """The four tries each kept out (or, for priority, moved down); an interruptible pod placed
    on a preemptible node while the webhook answers."""
    _kept_out(_creates(user, namespace, _serving_pinned("web")), webhook_up=webhook_up)

    reserved = cluster.pod("greedy", workload="interruptible", priorityClassName="preemptguard")
    outcome = _kept_out(_creates(user, namespace, reserved), webhook_up=webhook_up)
    if _refused(outcome):
        assert "is reserved for pods in preemptguard-system" in outcome.message

    eager = cluster.pod("eager", workload="interruptible", priorityClassName=HIGH)
    batch = _creates(user, namespace, eager)
    if webhook_up and not isinstance(batch, KubeError):
        assert batch["spec"]["priority"] < 0  # moved to its class's own
        cluster.delete_pods(kube, namespace, ["eager"])
    else:
        refused = _kept_out(batch, webhook_up=webhook_up)
        if not webhook_up and _refused(refused):
            assert "runs below pods that name no priority class" in refused.message

    with pytest.raises(KubeError) as relabelled:
        user.merge_patch(quiet, {"metadata": {"annotations": {WORKLOAD: "serving"}}})
    _kept_out(relabelled.value, webhook_up=webhook_up)
    assert WORKLOAD not in kube.get(quiet)["metadata"].get("annotations", {})

    if webhook_up:
        sweep = user.create(_pods(namespace), cluster.pod("sweep", workload="interruptible")).body
        assert sweep["metadata"]["annotations"][PLACEMENT] == "interruptible"
        scheduled = cluster.wait_scheduled(kube, namespace, "sweep", timeout=60)
        assert nodes[scheduled["spec"]["nodeName"]] == PREEMPTIBLE
        cluster.delete_pods(kube, namespace, ["sweep"])


def _flood(attack: Attack, target: Target, seconds: float) -> None:  # pragma: no cover
    floods.run(attack, target, seconds, seed=20261205)


@pytest.mark.parametrize("spec", ATTACKS)
def test_under_attack_from_the_pod_network_the_guarantees_hold(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    webhook: WebhookServer,
    namespace: str,
    default_install: Callable[[bool], None],
    spec: str,
) -> None:
    url = urlsplit(webhook.url)
    assert url.hostname is not None
    assert url.port is not None
    attacker = multiprocessing.get_context("spawn").Process(
        target=_flood,
        args=(Attack.parse(spec), Target(url.hostname, url.port), 90.0),
        daemon=True,
    )
    quiet = placed_quietly(kube, namespace)
    attacker.start()
    try:
        wait_until(
            lambda: attacker.is_alive(), timeout=10, what="the attacker running", interval=0.2
        )
        assert_what_must_never_happen_does_not(kube, user, namespace, nodes, quiet, webhook_up=True)
        assert attacker.is_alive(), "the attack ended before the checks did"
    finally:
        attacker.kill()
        attacker.join(10)
        cluster.delete_pods(kube, namespace, ["relabel"])
    # Every review of the tries was answered, in time.
    late = [r for r in webhook.admissions(namespace) if r.get("duration_ms", 0) >= 3000]
    assert not late, late


def test_with_the_webhook_unreachable_the_default_install_still_refuses(
    kube: Kube,
    user: Kube,
    nodes: dict[str, str],
    namespace: str,
    default_install: Callable[[bool], None],
) -> None:
    quiet = placed_quietly(kube, namespace)
    default_install(False)
    try:
        assert_what_must_never_happen_does_not(
            kube, user, namespace, nodes, quiet, webhook_up=False
        )
    finally:
        cluster.delete_pods(kube, namespace, ["relabel"])
