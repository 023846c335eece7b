"""The placement policy: what a policy file declares, as frozen dataclasses."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Placement(enum.Enum):
    """Where pods of a class may run, from most to least protected."""

    STANDARD = "standard"
    PREFER_PREEMPTIBLE = "prefer-preemptible"
    PREEMPTIBLE = "preemptible"

    @property
    def strictness(self) -> int:
        """Higher is stricter: standard-only beats flexible beats preemptible-only."""
        return {"standard": 2, "prefer-preemptible": 1, "preemptible": 0}[self.value]

    @property
    def may_be_preempted(self) -> bool:
        return self is not Placement.STANDARD


class Mode(enum.Enum):
    ENFORCE = "enforce"
    WARN = "warn"


@dataclass(frozen=True, slots=True)
class NodeLabel:
    """The node label that tells the two kinds of capacity apart."""

    key: str = "together.ai/compute-class"
    preemptible: str = "preemptible"
    standard: str = "standard"


@dataclass(frozen=True, slots=True)
class Taint:
    """The taint preemptible nodes carry; pods that may run there must tolerate it."""

    key: str = "together.ai/compute-class"
    value: str = "preemptible"
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    name: str
    placement: Placement
    description: str = ""
    # What the scheduler is told (webhook.engine.scheduling); None leaves it as the pod says.
    priority_class_name: str | None = None
    scheduler_name: str | None = None


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One matchExpressions entry of a label selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True, slots=True)
class PodSelector:
    """The labels an operator gives every pod it makes from one template: how such a pod,
    created later, is known to come from it."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()

    def __post_init__(self) -> None:
        if not self.required_keys:
            # NotIn and DoesNotExist alone also match pods no operator made.
            raise ValueError("name a label its pods carry: matchLabels, or In or Exists")

    @property
    def required_keys(self) -> tuple[str, ...]:
        """The label keys a matching pod carries whatever their values."""
        positive = (r.key for r in self.match_expressions if r.operator in ("In", "Exists"))
        return (*self.match_labels, *positive)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        return ", ".join(parts + [str(r) for r in self.match_expressions])


@dataclass(frozen=True, slots=True)
class Match:
    """What a classification rule looks at; every given field must match."""

    namespaces: tuple[str, ...] = ()
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()
    owner_kinds: tuple[str, ...] = ()
    # Roles of pod templates (a RayCluster's head, a PyTorchJob's master), and of the pods
    # their podSelector knows.
    template_roles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    workload_class: str
    match: Match


# A path part standing for every item of a list, or every value of a mapping.
EVERY_ITEM = "[*]"
EVERY_VALUE = "*"


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateSpec:
    """Where one pod template lives in objects of a kind, and what it is.

    ``path`` holds keys, ``EVERY_ITEM`` and ``EVERY_VALUE``. ``role`` names what its pods do
    (rules can match it); ``default_class`` classifies them when nothing else does.
    ``optional`` templates may be absent; a missing one that is not is refused.
    ``embedded`` paths lead to whole objects (an AppWrapper's components) rather than pod
    templates: a Pod there is a template, any other object's templates are found by its kind.
    ``partial`` templates are patches merged into a template kept elsewhere (a TrainJob's
    runtimePatches): checked for what they ask, never given a placement. ``pods`` is how
    the pods its operator makes from it are known when they are created (the labels the
    operator sets): they get its role and default class too, which they do not carry.
    ``first_pod``: the first of its pods plays another role (see ``FirstPod``).
    ``pod_failure_policy``: the mapping holding the template (its path ends in ``template``)
    is a batch/v1 Job spec, given the rule that ignores reclaims (``webhook.engine.jobs``).
    """

    path: tuple[str, ...]
    role: str = ""
    default_class: str | None = None
    optional: bool = False
    embedded: bool = False
    partial: bool = False
    pods: PodSelector | None = None
    first_pod: FirstPod | None = None
    pod_failure_policy: bool = False

    @property
    def dotted(self) -> str:
        return dotted(self.path)


@dataclass(frozen=True, slots=True)
class FirstPod:
    """The first pod an operator makes from a template plays another ``role`` (a TFJob's
    worker 0 is its master when it has no chief): the template is judged as that role too.
    Not when the object holds a value at one of the ``unless`` paths (the chief's template)."""

    role: str
    unless: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadKind:
    """A kind (API group and kind) whose objects hold pod templates.

    ``pod_owner_kind`` is the kind of its pods' controller, as ``ownerKinds`` rules see it;
    ``ignore`` says why its objects are left alone, if they are. ``resource`` (the plural the
    API serves it under) and ``cluster_scoped`` are what a webhook rule needs to match it.
    """

    group: str
    kind: str
    templates: tuple[TemplateSpec, ...]
    pod_owner_kind: str | None = None
    ignore: str | None = None
    resource: str = ""
    cluster_scoped: bool = False

    @property
    def plural(self) -> str:
        return self.resource or self.kind.lower() + "s"

    @property
    def name(self) -> str:
        """``Kind.group``, as kubectl names resources (just ``Kind`` in the core group)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


# Compared and hashed by identity: one per template of a loaded policy.
@dataclass(frozen=True, slots=True, eq=False)
class PodTemplate:
    """A template whose pods are known by their labels, with its kind."""

    kind: WorkloadKind
    spec: TemplateSpec
    selector: PodSelector


def dotted(path: tuple[str | int, ...]) -> str:
    """A path as users write it: ``spec.workerGroupSpecs[0].template``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == EVERY_ITEM:
            out += part
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True, slots=True)
class TrustedRequesters:
    """Who may create the pods the engine leaves alone: only the request says who that is.

    Object fields (``ownerReferences``, the mirror-pod annotation) are written by whoever
    creates the pod; they count only when the requester is the component that makes such
    pods. Distributions name their controllers differently, so these are policy settings.
    """

    daemonset_controllers: tuple[str, ...] = (
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:kube-controller-manager",
    )
    node_group: str = "system:nodes"
    node_username_prefix: str = "system:node:"


# Class names the output uses as words of its own (a missing class, a skipped object, YAML's
# null and booleans): a class called so would read as something else.
RESERVED_CLASS_NAMES = frozenset(
    {"none", "null", "nil", "unclassified", "unknown", "skipped", "untouched", "excluded"}
    | {"true", "false", "yes", "no", "on", "off", "y", "n"}
)


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    mode: Mode = Mode.ENFORCE
    node_label: NodeLabel = field(default_factory=NodeLabel)
    taint: Taint | None = field(default_factory=Taint)
    max_grace_seconds: int = 300
    checkpoint_margin_seconds: int = 30
    preferred_weight: int = 100
    classes: Mapping[str, WorkloadClass] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    excluded_namespaces: tuple[str, ...] = ("kube-system", "kube-node-lease")
    # PriorityClass name -> the namespaces whose pods may name it.
    reserved_priority_classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_class: str | None = None
    trusted: TrustedRequesters = field(default_factory=TrustedRequesters)
    # By (group, kind); the built-in kinds (webhook.engine.workloads.BUILTIN_KINDS) when a
    # policy lists none.
    workload_kinds: Mapping[tuple[str, str], WorkloadKind] = field(default_factory=dict)
    # Derived from workload_kinds: the templates whose pods are known by their labels, and
    # the same by a label key their pods must carry (a pod with none of them is from none).
    pod_templates: tuple[PodTemplate, ...] = field(init=False, repr=False, compare=False)
    pod_templates_by_key: Mapping[str, tuple[PodTemplate, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        found = tuple(
            PodTemplate(kind, spec, spec.pods)
            for kind in self.workload_kinds.values()
            if kind.ignore is None
            for spec in kind.templates
            if spec.pods is not None
        )
        by_key: dict[str, tuple[PodTemplate, ...]] = {}
        for t in found:
            key = t.selector.required_keys[0]
            by_key[key] = (*by_key.get(key, ()), t)
        object.__setattr__(self, "pod_templates", found)
        object.__setattr__(self, "pod_templates_by_key", by_key)

    def class_names(self) -> str:
        """The valid class names, for messages."""
        return ", ".join(sorted(self.classes))
