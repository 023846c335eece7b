"""One object judged as an admission request: the one path the server, ``check``, ``explain``,
``test`` and everything after them take.

A ``Subject`` is what a request asks about: the object, the operation, the namespace, who asks.
``judge`` applies the rules that need only the request, looks the namespace up if the engine
needs it, runs the engine and computes the patch. The hooks (``hooks.answer``) turn a judgement
into a review; the CLI prints it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook import engine
from webhook.admission import priorities
from webhook.admission.namespaces import NamespaceLookup, NamespaceMeta
from webhook.engine.decision import AdmissionOperation, Context, Decision, Obj, Requester
from webhook.engine.evaluation import judges_templates, kinds_of, namespace_of, untouched
from webhook.engine.patch import PatchOp, make_patch
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.engine.workloads import api_group, mapping_at

Evaluator = Callable[[Obj, Policy, Context], Decision]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What one request asks about."""

    obj: Obj
    operation: AdmissionOperation = "CREATE"
    # The request's namespace; None for cluster-scoped objects and where the caller has none
    # (the object's own is used then).
    namespace: str | None = None
    old_object: Obj | None = None
    # None offline: the answer an ordinary user gets.
    requester: Requester | None = None

    @classmethod
    def of_manifest(cls, obj: Obj, policy: Policy, *, default_namespace: str) -> Subject:
        """An object as ``kubectl apply`` would send it: created, in its namespace or the
        default one (cluster-scoped kinds in none)."""
        if cluster_scoped(obj, policy):
            return cls(obj=obj)
        own = mapping_at(obj, "metadata").get("namespace")
        return cls(obj=obj, namespace=own if isinstance(own, str) and own else default_namespace)


# Kubernetes' own cluster-scoped kinds a manifest may hold, by API group and kind.
CLUSTER_SCOPED = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("node.k8s.io", "RuntimeClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "ResourceSlice"),
        ("cert-manager.io", "ClusterIssuer"),
    }
)


def cluster_scoped(obj: Obj, policy: Policy) -> bool:
    """Whether ``obj`` has no namespace: one of Kubernetes' cluster-scoped kinds, or a workload
    kind the policy lists with ``scope: Cluster``."""
    kind, group = obj.get("kind"), api_group(obj)
    if not isinstance(kind, str) or group is None:
        return False
    listed = kinds_of(policy).get((group, kind))
    return (group, kind) in CLUSTER_SCOPED or (listed is not None and listed.cluster_scoped)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """The engine's decision and the JSON Patch turning the object into the decided one."""

    subject: Subject
    decision: Decision
    patch: list[PatchOp]


def judge(
    subject: Subject,
    policy: Policy,
    namespaces: NamespaceLookup,
    evaluate: Evaluator = engine.evaluate,
    *,
    priority_classes: PriorityLookup | None = None,
) -> Judgement:
    """Decide ``subject``. Exceptions from ``evaluate``, from ``namespaces``
    (``NamespaceUnknown``) and from ``priority_classes`` (``PriorityClassUnknown``; without
    one, the system and shipped classes) reach the caller."""
    bare = Context(
        operation=subject.operation,
        namespace=subject.namespace,
        old_object=subject.old_object,
        requester=subject.requester,
        priority_classes=priority_classes or priorities.offline(),
    )
    meta = _namespace(subject, policy, bare, namespaces)
    context = bare if meta is _NONE else _with_namespace(bare, meta)
    decision = evaluate(subject.obj, policy, context)
    return Judgement(
        subject=subject, decision=decision, patch=make_patch(subject.obj, decision.mutated)
    )


_NONE = NamespaceMeta()


def _namespace(
    subject: Subject, policy: Policy, context: Context, namespaces: NamespaceLookup
) -> NamespaceMeta:
    # Whatever the engine leaves alone on the request alone (a DELETE, an excluded namespace,
    # a kind it does not know) needs no namespace: do not make the server read one, unless
    # the engine still judges its templates (a DaemonSet's, see judges_templates).
    namespace = namespace_of(subject.obj, context)
    if namespace is None:
        return _NONE
    skip = untouched(subject.obj, policy, context)
    if skip is not None and not judges_templates(skip, context.operation):
        return _NONE
    meta = namespaces(namespace)
    return meta if meta.annotations or meta.labels else _NONE


def _with_namespace(context: Context, meta: NamespaceMeta) -> Context:
    return Context(
        operation=context.operation,
        namespace=context.namespace,
        namespace_annotations=meta.annotations,
        namespace_labels=meta.labels,
        old_object=context.old_object,
        requester=context.requester,
        priority_classes=context.priority_classes,
    )
