"""Pods are left alone by who sends them, never by what they say of themselves."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine import evaluate
from webhook.engine.decision import Context, Decision, Requester
from webhook.engine.policy import Policy, TrustedRequesters
from webhook.loading.policies import builtin_policy, parse_policy

KEY = "together.ai/compute-class"
DS_CONTROLLER = Requester(
    username="system:serviceaccount:kube-system:daemon-set-controller",
    groups=("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
)
KCM = Requester(username="system:kube-controller-manager", groups=("system:authenticated",))
NODE = Requester(username="system:node:gpu-7", groups=("system:nodes", "system:authenticated"))
ALICE = Requester(username="alice", groups=("team-a", "system:authenticated"))


def serving_pod(**meta: Any) -> dict[str, Any]:
    """A serving pod that asks for preemptible capacity: refused unless left alone."""
    metadata: dict[str, Any] = {
        "name": "p",
        "namespace": "team-a",
        "annotations": {"together.ai/workload": "serving"},
    }
    for key, value in meta.items():
        if key == "annotations":
            metadata["annotations"] = {**metadata["annotations"], **value}
        else:
            metadata[key] = value
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeSelector": {KEY: "preemptible"}, "containers": [{"name": "c", "image": "x"}]},
    }


def owned_by(
    kind: str, api_version: str = "apps/v1", controller: bool = True
) -> list[dict[str, Any]]:
    ref = {
        "apiVersion": api_version,
        "kind": kind,
        "name": "o",
        "uid": "u-1",
        "controller": controller,
    }
    return [ref]


MIRROR = {"kubernetes.io/config.mirror": "3f1c2a"}


def decide(
    pod: dict[str, Any], requester: Requester | None, policy: Policy | None = None
) -> Decision:
    ctx = Context(namespace="team-a", requester=requester)
    return evaluate(pod, policy or builtin_policy(), ctx)


@pytest.mark.parametrize(
    "requester", [DS_CONTROLLER, KCM], ids=["service-account", "controller-manager"]
)
def test_the_daemonset_controller_creating_a_daemonset_pod_leaves_it_alone(
    requester: Requester,
) -> None:
    d = decide(serving_pod(ownerReferences=owned_by("DaemonSet")), requester)
    assert d.skipped == "DaemonSet pods run on every node, of both classes"
    assert d.allowed
    assert not d.warnings


@pytest.mark.parametrize(
    ("requester", "owner", "said"),
    [
        pytest.param(
            ALICE,
            owned_by("DaemonSet"),
            "alice created it, not the DaemonSet controller",
            id="a-user",
        ),
        pytest.param(
            NODE,
            owned_by("DaemonSet"),
            "system:node:gpu-7 created it, not the DaemonSet controller",
            id="a-node",
        ),
        pytest.param(
            DS_CONTROLLER,
            owned_by("DaemonSet", "example.com/v1"),
            "of apiVersion 'example.com/v1', not apps/v1",
            id="another-group",
        ),
        pytest.param(
            DS_CONTROLLER,
            owned_by("DaemonSet", "extensions/v1beta1"),
            "not apps/v1",
            id="an-old-group",
        ),
        pytest.param(
            Requester(username="", groups=()),
            owned_by("DaemonSet"),
            "an anonymous user created it",
            id="anonymous",
        ),
    ],
)
def test_a_daemonset_claim_from_anyone_else_is_judged_like_any_pod(
    requester: Requester, owner: list[dict[str, Any]], said: str
) -> None:
    d = decide(serving_pod(ownerReferences=owner), requester)
    assert d.skipped is None
    assert d.workload_class == "serving"
    assert not d.allowed
    assert "requires preemptible capacity" in d.violations[0]
    assert any(said in w and "the claim is not trusted" in w for w in d.warnings), d.warnings


def test_a_non_controller_daemonset_owner_is_no_claim_at_all() -> None:
    d = decide(serving_pod(ownerReferences=owned_by("DaemonSet", controller=False)), ALICE)
    assert not d.allowed
    assert not any("DaemonSet" in w for w in d.warnings)


def test_a_node_creating_a_mirror_pod_leaves_it_alone() -> None:
    d = decide(serving_pod(annotations=MIRROR), NODE)
    assert d.skipped == "mirror pods of static pods belong to their node"


@pytest.mark.parametrize(
    "requester",
    [
        ALICE,
        Requester(
            username="system:node:gpu-7", groups=("system:authenticated",)
        ),  # the name without the group
        Requester(username="node-gpu-7", groups=("system:nodes",)),  # the group without the name
        DS_CONTROLLER,
    ],
    ids=["a-user", "no-node-group", "no-node-name", "daemonset-controller"],
)
def test_a_mirror_claim_from_anything_but_a_node_is_not_trusted(requester: Requester) -> None:
    d = decide(serving_pod(annotations=MIRROR), requester)
    assert d.skipped is None
    assert not d.allowed
    assert any("not a node: the claim is not trusted" in w for w in d.warnings), d.warnings


def test_offline_the_answer_is_an_ordinary_users_with_a_note() -> None:
    d = decide(serving_pod(ownerReferences=owned_by("DaemonSet")), None)
    assert not d.allowed
    assert any("only when the DaemonSet controller creates it" in w for w in d.warnings)
    d = decide(serving_pod(annotations=MIRROR), None)
    assert not d.allowed
    assert any("only when a node creates it" in w for w in d.warnings)


def test_the_trusted_identities_are_policy_settings() -> None:
    text = builtin_policy_text().replace(
        "  defaultClass: null",
        "  defaultClass: null\n"
        "  trustedRequesters:\n"
        "    daemonSetControllers: [system:serviceaccount:platform:ds-operator]\n"
        "    nodes: {group: nodes.example.com, usernamePrefix: 'node:'}",
    )
    policy = parse_policy(text, source="policy.yaml")
    assert policy.trusted == TrustedRequesters(
        daemonset_controllers=("system:serviceaccount:platform:ds-operator",),
        node_group="nodes.example.com",
        node_username_prefix="node:",
    )
    operator = Requester(username="system:serviceaccount:platform:ds-operator", groups=())
    assert decide(serving_pod(ownerReferences=owned_by("DaemonSet")), operator, policy).skipped
    assert not decide(
        serving_pod(ownerReferences=owned_by("DaemonSet")), DS_CONTROLLER, policy
    ).allowed
    node = Requester(username="node:gpu-1", groups=("nodes.example.com",))
    assert decide(serving_pod(annotations=MIRROR), node, policy).skipped
    assert not decide(serving_pod(annotations=MIRROR), NODE, policy).allowed


def builtin_policy_text() -> str:
    from importlib import resources

    return resources.files("webhook").joinpath("data/default-policy.yaml").read_text()


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [(7, "Pod"), (None, "Pod"), ("apps/v1", "Pod"), ("v1", "Deployment"), ("v1", ["Pod"])],
)
def test_a_pod_is_judged_as_the_request_names_it_whatever_its_own_fields_say(
    api_version: Any, kind: Any
) -> None:
    """request.kind is the API server's; apiVersion and kind inside the object are not. A
    coordinator pod asking for preemptible nodes is refused whatever its own fields say it is,
    and an interruptible one placed."""
    import json
    from pathlib import Path

    from webhook.admission import review
    from webhook.admission.core import Hook, answer
    from webhook.admission.lookups import no_namespaces

    fixtures = Path(__file__).parent / "fixtures" / "admission-reviews"
    for name in ("create-pod-coordinator-0-mutate.json", "create-pod-sweep-mutate.json"):
        doc = json.loads((fixtures / name).read_text())
        expected = answer(Hook.MUTATE, review.parse_review(doc), builtin_policy(), no_namespaces)
        doc["request"]["object"]["apiVersion"] = api_version
        doc["request"]["object"]["kind"] = kind
        got = answer(Hook.MUTATE, review.parse_review(doc), builtin_policy(), no_namespaces)
        assert got.review["response"] == expected.review["response"], name
        assert got.outcome == expected.outcome, name
