"""A pod updated after it was placed: what may change its class, and when that is refused.

A pod is placed when it is created, and its placement cannot follow it afterwards: the API
server forbids changing most of a pod's spec, and the webhook mutates pods only on CREATE.
Its labels, annotations and owner references stay writable, though, and they are what
classifies it. An update that makes a pod of a class that must run on standard nodes, while
the node constraints it was created with still admit preemptible nodes, would leave it
where its new class may not run (or let the scheduler put it there once its scheduling gates
are lifted). That update is refused; any other is left alone.
"""

from __future__ import annotations

from typing import NamedTuple

from webhook.engine import origins
from webhook.engine.classify import classify
from webhook.engine.constraints import read_constraints
from webhook.engine.decision import Classification, Context, Obj
from webhook.engine.findings import Code, Finding, finding
from webhook.engine.jsoncompare import same_json
from webhook.engine.podshape import shape_problem
from webhook.engine.policy import Placement, Policy
from webhook.engine.templates import facts_of
from webhook.engine.workloads import controller_owner, mapping_at

# What classifies a pod, besides its namespace: compared between the pod and its old self.
_CLASSIFIERS = (
    ("annotations", "metadata.annotations"),
    ("labels", "metadata.labels"),
    ("ownerReferences", "metadata.ownerReferences"),
)


class UpdateVerdict(NamedTuple):
    """The pod's class after the update, and why the update is refused (None: it is not)."""

    classification: Classification
    refusal: Finding | None


def update_skip(pod: Obj, old: Obj | None) -> Finding | None:
    """Why an update of ``pod`` (``old`` before it) is left alone without classifying it, if
    it is: it changes nothing that classifies the pod (a finalizer removed, say). A pod being
    deleted is judged all the same: its deletion may be given years of grace, and it runs
    until then."""
    if old is None or _changed(pod, old) is None:
        message = "pods are placed when created; this update changes nothing that classifies it"
        return finding(Code.POD_UPDATE, message)
    return None


def judge_update(
    pod: Obj, old: Obj, policy: Policy, ctx: Context, namespace: str | None
) -> UpdateVerdict:
    """The class the update gives ``pod``, refused when that class must run on standard
    nodes, the pod did not have it before, and its node constraints admit preemptible
    nodes."""
    problem = shape_problem(pod)
    if problem is not None:  # only offline: the API server refuses such a pod first
        return UpdateVerdict(Classification(name=None, source="invalid object"), problem)
    now = _classify(pod, policy, ctx, namespace)
    name = now.name
    wclass = policy.classes.get(name) if name is not None else None
    if wclass is None or wclass.placement is not Placement.STANDARD:
        return UpdateVerdict(now, None)
    before = _class_of(old, policy, ctx, namespace)
    spec = pod.get("spec")
    if before.name == name or not isinstance(spec, dict):
        return UpdateVerdict(now, None)
    label = policy.node_label
    node = read_constraints(spec, label.key)
    too_large = node.too_large()
    if too_large is not None:
        return UpdateVerdict(now, too_large)
    if not node.admits(label.preemptible):
        return UpdateVerdict(now, None)  # its constraints keep it off preemptible nodes
    was = f"{before.name} ({before.source})" if before.name else "unclassified"
    message = (
        f"this update makes the pod {name} ({now.source}), a class that must run on standard "
        f"nodes, but the pod was created {was} and its node constraints still admit "
        f"{label.key}={label.preemptible} nodes; a pod's placement cannot change after it is "
        f"created: leave its labels, annotations and owner as they were, or delete the pod "
        f"and create it again as {name} so that it is placed as such"
    )
    path = _changed(pod, old) or "metadata"
    return UpdateVerdict(now, finding(Code.CLASS_CHANGED, message, path))


def _class_of(pod: Obj, policy: Policy, ctx: Context, namespace: str | None) -> Classification:
    if shape_problem(pod) is not None:
        return Classification(name=None, source="invalid object")
    return _classify(pod, policy, ctx, namespace)


def _classify(pod: Obj, policy: Policy, ctx: Context, namespace: str | None) -> Classification:
    """The class of ``pod``, whose shape was checked."""
    owner = controller_owner(pod)
    facts = facts_of(
        pod,
        ctx,
        namespace,
        owner_kind=owner.kind if owner is not None else None,
        origins=origins.of_pod(pod, policy),
    )
    return classify(facts, policy).classification


def _changed(pod: Obj, old: Obj) -> str | None:
    """The first field that classifies a pod and differs between ``pod`` and ``old``."""
    meta, before = mapping_at(pod, "metadata"), mapping_at(old, "metadata")
    for key, path in _CLASSIFIERS:
        if not same_json(meta.get(key), before.get(key)):
            return path
    return None
