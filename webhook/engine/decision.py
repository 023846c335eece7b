"""What the engine is given besides the object, and what it answers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from webhook.engine.findings import MAX_MESSAGE_CHARS, Finding, bounded, shorten
from webhook.engine.jobs import JobAPI
from webhook.engine.scheduling import PriorityLookup

__all__ = ["MAX_MESSAGE_CHARS", "bounded", "shorten"]

Obj = dict[str, Any]
AdmissionOperation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceMeta:
    """What the engine reads of the request's namespace."""

    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


# Looks a namespace up by name. Whatever it raises (webhook.errors.NamespaceUnknown when the
# namespace cannot be known) reaches the engine's caller.
NamespaceLookup = Callable[[str], NamespaceMeta]


@dataclass(frozen=True, slots=True, kw_only=True)
class Requester:
    """Who sent the request, as the API server authenticated them (``request.userInfo``)."""

    username: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """Facts about the request that are not in the object itself."""

    operation: AdmissionOperation = "CREATE"
    namespace: str | None = None
    # What the namespace says, where the caller knows it; else ``evaluate`` asks
    # ``namespaces``, once, and only for an object it judges.
    namespace_annotations: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    namespaces: NamespaceLookup | None = None
    # On UPDATE, the object as it was: only a changed pod template is judged again.
    old_object: Obj | None = None
    # None offline (check, explain, test): the answer is the one an ordinary user gets.
    requester: Requester | None = None
    # The cluster's PriorityClasses, for classes that name one (webhook.engine.scheduling);
    # None when the caller has no view of them: priorities are then left as the pod says
    # (the admission core always gives one).
    priority_classes: PriorityLookup | None = None
    # What the API server knows of a Job's podFailurePolicy (webhook.engine.jobs): offline,
    # a current release; for an object an API server sent, what the object shows.
    job_api: JobAPI = JobAPI.CURRENT


@dataclass(frozen=True, slots=True, kw_only=True)
class Classification:
    """The workload class and the source that decided it."""

    name: str | None
    source: str
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """The judgement of one pod template of a workload, at ``path`` in the object.

    Paths in its findings are the object's (they start with ``path``).
    """

    path: str
    # The same place as a JSON pointer, as patches name it: /spec/workerGroupSpecs/0/template.
    pointer: str
    role: str
    classification: Classification
    refusals: tuple[Finding, ...] = ()
    notes: tuple[Finding, ...] = ()
    changes: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The engine's answer for one object.

    ``refusals`` holds what the policy refuses, each saying what to change. In enforce mode
    any refusal makes ``allowed`` false; in warn mode the object is allowed and each refusal
    is also a warning. ``changes`` are what placement did to ``mutated``, a copy of the object
    that shares with it every part it did not change (the object itself when nothing
    changes, and when refused). ``skip`` says why the object was left alone entirely.
    """

    kind: str
    namespace: str | None
    name: str
    classification: Classification
    allowed: bool
    mutated: Obj
    refusals: tuple[Finding, ...] = ()
    notes: tuple[Finding, ...] = ()
    changes: tuple[Finding, ...] = ()
    skip: Finding | None = None
    # One per pod template of a workload (empty for a pod, and for what is left alone).
    parts: tuple[Part, ...] = ()
    # What the mutating hook stores, where it is not ``mutated``: a workload with only the
    # changes to itself (a Job's podFailurePolicy), its templates being placed when their
    # pods are created.
    stored: Obj | None = None

    @property
    def workload_class(self) -> str | None:
        return self.classification.name

    @property
    def violations(self) -> tuple[str, ...]:
        """The refusals as text."""
        return tuple(f.message for f in self.refusals)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The warnings as text."""
        return tuple(f.message for f in self.notes)

    @property
    def skipped(self) -> str | None:
        """Why the object was left alone, as text; None when it was not."""
        return self.skip.message if self.skip is not None else None

    @property
    def enforce_refuses(self) -> bool:
        """True when enforce mode refuses the object (whatever the mode)."""
        return bool(self.refusals)

    def findings(self) -> tuple[Finding, ...]:
        """Every finding: the skip, refusals, warnings, then changes."""
        head = (self.skip,) if self.skip is not None else ()
        return (*head, *self.refusals, *self.notes, *self.changes)
