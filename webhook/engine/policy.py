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


@dataclass(frozen=True)
class NodeLabel:
    """The node label that tells the two kinds of capacity apart."""

    key: str = "together.ai/compute-class"
    preemptible: str = "preemptible"
    standard: str = "standard"


@dataclass(frozen=True)
class Taint:
    """The taint preemptible nodes carry; pods that may run there must tolerate it."""

    key: str = "together.ai/compute-class"
    value: str = "preemptible"
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    placement: Placement
    description: str = ""


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Match:
    """What a classification rule looks at; every given field must match."""

    namespaces: tuple[str, ...] = ()
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()
    owner_kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    name: str
    workload_class: str
    match: Match


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    default_class: str | None = None
    trusted: TrustedRequesters = field(default_factory=TrustedRequesters)

    def class_names(self) -> str:
        """The valid class names, for messages."""
        return ", ".join(sorted(self.classes))
