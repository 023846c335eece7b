"""What the engine is given besides the object, and what it answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Obj = dict[str, Any]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


@dataclass(frozen=True)
class Requester:
    """Who sent the request, as the API server authenticated them (``request.userInfo``)."""

    username: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Context:
    """Facts about the request that are not in the object itself."""

    operation: Operation = "CREATE"
    namespace: str | None = None
    namespace_annotations: Mapping[str, str] = field(default_factory=dict)
    # On UPDATE, the object as it was: only a changed pod template is judged again.
    old_object: Obj | None = None
    # None offline (check, explain, test): the answer is the one an ordinary user gets.
    requester: Requester | None = None
    namespace_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Classification:
    """The workload class and the source that decided it."""

    name: str | None
    source: str
    detail: str = ""


@dataclass(frozen=True)
class Change:
    """One change the engine made to the pod spec, and why."""

    field: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """The engine's answer for one object.

    ``violations`` holds what the policy refuses, each saying what to change. In enforce
    mode any violation makes ``allowed`` false; in warn mode the object is allowed and the
    violations are reported as warnings too. ``mutated`` is a deep copy of the object with
    the placement applied (equal to the input when nothing changes, and when refused).
    ``skipped`` says why the object was left alone entirely, if it was.
    """

    kind: str
    namespace: str | None
    name: str
    classification: Classification
    allowed: bool
    violations: tuple[str, ...]
    warnings: tuple[str, ...]
    changes: tuple[Change, ...]
    mutated: Obj
    skipped: str | None = None

    @property
    def workload_class(self) -> str | None:
        return self.classification.name

    @property
    def refused(self) -> bool:
        """True when enforce mode would refuse the object (whatever the mode)."""
        return bool(self.violations)


def shorten(value: str, limit: int = 63) -> str:
    """A user-supplied value cut for quoting in a message (63: the longest label value)."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


# No reason or warning is longer than this, however long the values quoted in it.
MAX_MESSAGE_CHARS = 1024


def bounded(message: str) -> str:
    """``message`` cut to ``MAX_MESSAGE_CHARS``: the last guard after every quoted value has
    already been shortened where it is quoted."""
    return shorten(message, MAX_MESSAGE_CHARS)
