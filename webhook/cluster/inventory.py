"""What the listed objects say: a node's class, a pod's grace period, checkpoint, owner and
class, and who must have created a pod.

The admission core trusts a DaemonSet or mirror pod only by the request's ``userInfo``. A pod
in the cluster has no request left to read, so the audit asks the cluster instead: a pod is a
DaemonSet's when its controlling owner reference names an ``apps/v1`` DaemonSet that exists
with that uid, and a mirror pod when it carries the mirror annotation and names its own Node,
with that Node's uid, as owner (as the kubelet writes it). An owner reference with a uid that
matches no object gets the pod deleted by the garbage collector, so a guess does not survive;
someone who copies a real uid can still pass, which admission would have caught.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.admission.core import Subject, judge
from webhook.engine.decision import NamespaceLookup, NamespaceMeta, Obj, Requester
from webhook.engine.evaluation import PLACEMENT_ANNOTATION
from webhook.engine.grace import API_DEFAULT_GRACE, CHECKPOINT_ANNOTATION
from webhook.engine.policy import Placement, Policy
from webhook.engine.workloads import MIRROR_ANNOTATION, mapping_at, string_map

PREEMPTIBLE, STANDARD, UNKNOWN = "preemptible", "standard", "unknown"
UNCLASSIFIED = "unclassified"


def node_class(node: Obj, policy: Policy) -> str:
    """``preemptible`` or ``standard`` (unlabelled nodes are standard), by the policy's label."""
    labels = string_map(mapping_at(node, "metadata").get("labels"))
    label = policy.node_label
    return PREEMPTIBLE if labels.get(label.key) == label.preemptible else STANDARD


@dataclass(frozen=True, kw_only=True)
class NodeFacts:
    name: str
    uid: str
    compute_class: str
    unschedulable: bool


def node_facts(node: Obj, policy: Policy) -> NodeFacts:
    meta = mapping_at(node, "metadata")
    return NodeFacts(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        compute_class=node_class(node, policy),
        unschedulable=mapping_at(node, "spec").get("unschedulable") is True,
    )


def lean(obj: Obj) -> Obj:
    """``obj`` without what nothing here reads and a large list makes heavy: the field
    managers' record (``metadata.managedFields``, half of a listed pod's memory) and a node's
    image list (``status.images``, up to fifty names and sizes). Changed in place, page by
    page as it is listed."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    status = obj.get("status")
    if isinstance(status, dict):
        status.pop("images", None)  # only a Node has it
    return obj


def identity(obj: Obj) -> Obj:
    """What names ``obj`` and its controller, as a report needs them once ``obj`` is judged:
    apiVersion, kind, name, namespace, uid and the controlling owner reference."""
    meta = meta_of(obj)
    kept: dict[str, Any] = {
        k: sys.intern(v) if k == "namespace" else v
        for k in ("name", "namespace", "uid")
        if isinstance(v := meta.get(k), str)
    }
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            kept["ownerReferences"] = [ref]
            break
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}


def meta_of(obj: Obj) -> dict[str, Any]:
    return mapping_at(obj, "metadata")


def name_of(obj: Obj) -> str:
    return str(meta_of(obj).get("name") or "")


def namespace_of(obj: Obj) -> str:
    return str(meta_of(obj).get("namespace") or "")


def uid_of(obj: Obj) -> str:
    return str(meta_of(obj).get("uid") or "")


def node_name_of(pod: Obj) -> str | None:
    name = mapping_at(pod, "spec").get("nodeName")
    return name if isinstance(name, str) and name else None


def phase_of(pod: Obj) -> str:
    phase = mapping_at(pod, "status").get("phase")
    return phase if isinstance(phase, str) else "Unknown"


def grace_seconds(pod: Obj) -> int:
    """The pod's own termination grace period (the API server's default when absent)."""
    value = mapping_at(pod, "spec").get("terminationGracePeriodSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) else API_DEFAULT_GRACE


def checkpoint_seconds(pod: Obj) -> int | None:
    """The declared checkpoint time (``together.ai/checkpoint-seconds``), when it is a number."""
    raw = string_map(meta_of(pod).get("annotations")).get(CHECKPOINT_ANNOTATION, "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else None


@dataclass(frozen=True, kw_only=True)
class OwnerRef:
    """An object a pod belongs to, as an Event's ``involvedObject`` names it."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str

    def as_reference(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "namespace": self.namespace,
        }


def controller_ref(obj: Obj) -> OwnerRef | None:
    """The controlling owner reference of ``obj``, in ``obj``'s namespace."""
    refs = meta_of(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return OwnerRef(
                api_version=str(ref.get("apiVersion") or ""),
                kind=str(ref.get("kind") or ""),
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
                namespace=namespace_of(obj),
            )
    return None


def pod_ref(pod: Obj) -> OwnerRef:
    return OwnerRef(
        api_version="v1",
        kind="Pod",
        name=name_of(pod),
        uid=uid_of(pod),
        namespace=namespace_of(pod),
    )


def is_daemonset_pod(pod: Obj) -> bool:
    """Owned by a DaemonSet by its own word: enough for a drill to leave it alone (as
    ``kubectl drain --ignore-daemonsets`` does), never enough to skip judging it."""
    owner = controller_ref(pod)
    return owner is not None and owner.kind == "DaemonSet"


def is_mirror_pod(pod: Obj) -> bool:
    return MIRROR_ANNOTATION in string_map(meta_of(pod).get("annotations"))


@dataclass(frozen=True)
class Creators:
    """What the cluster shows about who created pods: the DaemonSets and Nodes that exist."""

    daemonset_uids: frozenset[str] = frozenset()
    node_uids: Mapping[str, str] | None = None  # node name -> uid

    def requester(self, pod: Obj, policy: Policy) -> Requester | None:
        """The component that must have created ``pod``, when the cluster confirms its claim
        (see the module); None for anyone else (judged as an ordinary user's)."""
        owner = controller_ref(pod)
        trusted = policy.trusted
        if (
            owner is not None
            and owner.kind == "DaemonSet"
            and owner.api_version == "apps/v1"
            and owner.uid in self.daemonset_uids
            and trusted.daemonset_controllers
        ):
            return Requester(username=trusted.daemonset_controllers[0])
        node = node_name_of(pod)
        if is_mirror_pod(pod) and node is not None and self.node_uids is not None:
            refs = meta_of(pod).get("ownerReferences")
            for ref in refs if isinstance(refs, list) else []:
                if (
                    isinstance(ref, dict)
                    and ref.get("kind") == "Node"
                    and ref.get("name") == node
                    and ref.get("uid") == self.node_uids.get(node)
                ):
                    username = f"{trusted.node_username_prefix}{node}"
                    return Requester(username=username, groups=(trusted.node_group,))
        return None


def creators(daemonsets: Iterable[Obj], nodes: Iterable[Obj]) -> Creators:
    return Creators(
        daemonset_uids=frozenset(uid_of(d) for d in daemonsets if uid_of(d)),
        node_uids={name_of(n): uid_of(n) for n in nodes},
    )


def pod_class(pod: Obj, policy: Policy, namespaces: NamespaceLookup) -> str:
    """The class a running pod is reported as.

    Its ``together.ai/placement`` record names the class it was placed as, and is taken while
    the policy still knows that class; the class the policy gives the pod now stands in when
    there is none. Annotations and labels, the record among them, can be changed after the
    pod was admitted (the webhook does not check pod updates), so the record never makes a
    pod less critical than the policy finds it: a pod the policy now keeps on standard
    capacity is reported as that class, whatever its record says.
    """
    recorded = string_map(meta_of(pod).get("annotations")).get(PLACEMENT_ANNOTATION)
    now = _class_now(pod, policy, namespaces)
    if recorded is None or recorded not in policy.classes:
        return now or UNCLASSIFIED
    if now is not None and is_critical(now, policy) and not is_critical(recorded, policy):
        return now
    return recorded


def _class_now(pod: Obj, policy: Policy, namespaces: NamespaceLookup) -> str | None:
    """The class the policy gives ``pod`` as it is now, if any."""
    if pod.get("kind") != "Pod":  # an item of a list carries no kind
        pod = {**pod, "apiVersion": "v1", "kind": "Pod"}
    judged = judge(Subject(obj=pod, namespace=namespace_of(pod) or None), policy, namespaces)
    return judged.decision.workload_class


def placement_of(class_name: str, policy: Policy) -> Placement | None:
    wclass = policy.classes.get(class_name)
    return wclass.placement if wclass is not None else None


def is_critical(class_name: str, policy: Policy) -> bool:
    """A class that must never run on preemptible capacity (coordinator, login, serving)."""
    return placement_of(class_name, policy) is Placement.STANDARD


def namespace_lookup(namespaces: Iterable[Obj]) -> NamespaceLookup:
    """The namespaces listed, by name, as the engine reads them (an unlisted one: empty)."""
    known = {
        name_of(ns): NamespaceMeta(
            annotations=string_map(meta_of(ns).get("annotations")),
            labels=string_map(meta_of(ns).get("labels")),
        )
        for ns in namespaces
    }
    return lambda name: known.get(name, NamespaceMeta())


def cached(lookup: NamespaceLookup) -> NamespaceLookup:
    """``lookup`` asked at most once per namespace."""
    seen: dict[str, NamespaceMeta] = {}

    def once(namespace: str) -> NamespaceMeta:
        if namespace not in seen:
            seen[namespace] = lookup(namespace)
        return seen[namespace]

    return once
