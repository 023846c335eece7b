"""What the engine finds about an object, as values: a stable code, the field, the message.

Findings are turned into text only at the edges (a review's message and warnings, the CLI's
output); JSON output and policy test cases match on codes, which do not change when a message
is reworded. docs/cli.md lists every code (hack/generate.py holds what each means).
"""

from __future__ import annotations

import enum
from typing import Final, NamedTuple, final


class Severity(enum.StrEnum):
    REFUSAL = "refusal"  # enforce mode refuses the object (warn mode reports it)
    WARNING = "warning"
    CHANGE = "change"  # made to the pod (or, for a workload, what its pods will get)
    SKIP = "skip"  # why the object is left alone entirely


class Code(enum.StrEnum):
    # Refusals
    UNKNOWN_CLASS = "unknown-class"
    REQUIRES_PREEMPTIBLE = "requires-preemptible"
    EXCLUDES_PREEMPTIBLE = "excludes-preemptible"
    MATCHES_NO_NODE = "matches-no-node"
    CHECKPOINT_TOO_LONG = "checkpoint-too-long"
    CHECKPOINT_NOT_A_NUMBER = "checkpoint-not-a-number"
    NEGATIVE_GRACE = "negative-grace"
    WRONG_TYPE = "wrong-type"
    NO_POD_SPEC = "no-pod-spec"
    TOO_MANY_TERMS = "too-many-terms"
    TOO_MANY_LABEL_VALUES = "too-many-label-values"
    UNPLACED = "unplaced"
    UNKNOWN_PRIORITY_CLASS = "unknown-priority-class"
    CLASS_CHANGED = "class-changed"
    RESERVED_PRIORITY_CLASS = "reserved-priority-class"
    # Warnings
    WOULD_BE_REFUSED = "would-be-refused"
    SOURCES_DISAGREE = "sources-disagree"
    CLAIM_NOT_TRUSTED = "claim-not-trusted"
    ANNOTATION_NEAR_MISS = "annotation-near-miss"
    CLASS_AS_LABEL = "class-as-label"
    ANNOTATION_MISPLACED = "annotation-misplaced"
    ANNOTATION_OUT_OF_REACH = "annotation-out-of-reach"
    CLASS_NOT_INHERITED = "class-not-inherited"
    FIRST_POD_CLASS = "first-pod-class"
    LEFT_ALONE_ON_PREEMPTIBLE = "left-alone-on-preemptible"
    GRACE_LOWERED = "grace-lowered"
    TEMPLATE_SUMMARY = "template-summary"
    PRIORITY_REPLACED = "priority-replaced"
    PRIORITY_NOT_KNOWN = "priority-not-known"
    SCHEDULER_KEPT = "scheduler-kept"
    RECLAIMS_COUNTED = "reclaims-counted"
    # Changes
    AFFINITY_REQUIRED = "affinity-required"
    AFFINITY_PREFERRED = "affinity-preferred"
    TOLERATION_ADDED = "toleration-added"
    GRACE_RAISED = "grace-raised"
    PLACEMENT_RECORDED = "placement-recorded"
    PRIORITY_SET = "priority-set"
    SCHEDULER_SET = "scheduler-set"
    POD_FAILURE_POLICY = "pod-failure-policy"
    POD_REPLACEMENT_POLICY = "pod-replacement-policy"
    # Skips
    NOT_A_WORKLOAD = "not-a-workload"
    UNCHECKED_KIND = "unchecked-kind"
    EXCLUDED_NAMESPACE = "excluded-namespace"
    DAEMONSET = "daemonset"
    IGNORED_KIND = "ignored-kind"
    MIRROR_POD = "mirror-pod"
    OPERATION_NOT_CHECKED = "operation-not-checked"
    POD_UPDATE = "pod-update"
    TEMPLATE_UNCHANGED = "template-unchanged"
    BEING_DELETED = "being-deleted"
    SUBRESOURCE = "subresource"
    NOT_MUTATED = "not-mutated"


class Finding(NamedTuple):
    """One thing found: ``path`` is the field it is about (dotted, ``""`` for the object).

    A change also says what it is in a few words (``summary``); its message adds why.
    An immutable tuple: a review makes several, and a tuple costs a third of a frozen
    dataclass to make.
    """

    code: Code
    message: str
    path: str = ""
    summary: str = ""

    def __str__(self) -> str:
        return self.message

    def as_json(self) -> dict[str, str]:
        return {"code": self.code.value, "path": self.path, "message": self.message}


def finding(code: Code, message: str, path: str = "") -> Finding:
    """A finding whose message is cut to ``MAX_MESSAGE_CHARS``, however long its values."""
    return Finding(code=code, message=bounded(message), path=path)


def change(code: Code, summary: str, why: str, path: str) -> Finding:
    """A change: ``summary`` says what it is, the message adds ``why``."""
    return Finding(code=code, message=bounded(f"{summary}: {why}"), path=path, summary=summary)


def shorten(value: str, limit: int = 63) -> str:
    """A user-supplied value cut for quoting in a message (63: the longest label value)."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


# No message is longer than this, however long the values quoted in it.
MAX_MESSAGE_CHARS = 1024


def bounded(message: str) -> str:
    """``message`` cut to ``MAX_MESSAGE_CHARS``: the last guard after every quoted value has
    already been shortened where it is quoted."""
    return shorten(message, MAX_MESSAGE_CHARS)


@final
class Effects:
    """What one step of placement changed in the copy, and the warnings it earned."""

    __slots__ = ("changes", "notes")

    def __init__(
        self, *, changes: tuple[Finding, ...] = (), notes: tuple[Finding, ...] = ()
    ) -> None:
        self.changes: Final = changes
        self.notes: Final = notes
