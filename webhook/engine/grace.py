"""The termination grace period a pod on preemptible capacity gets: fits the drain window,
and leaves time for the checkpoint it declares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.decision import Change, shorten
from webhook.engine.policy import Policy

CHECKPOINT_ANNOTATION = "together.ai/checkpoint-seconds"
# What the API server sets when a pod leaves the field out, before any webhook sees it.
API_DEFAULT_GRACE = 30
GRACE_FIELD = "spec.terminationGracePeriodSeconds"


@dataclass(frozen=True)
class GraceBudget:
    """The grace-period limits one pod is held to, with what is wrong with its request."""

    maximum: int
    needed: int | None
    checkpoint: int | None
    margin: int
    violations: list[str] = field(default_factory=list)


def grace_budget(annotations: Mapping[str, str], policy: Policy) -> GraceBudget:
    """The budget for a pod with these annotations under ``policy``."""
    raw = annotations.get(CHECKPOINT_ANNOTATION)
    maximum, margin = policy.max_grace_seconds, policy.checkpoint_margin_seconds
    if raw is None:
        return GraceBudget(maximum, None, None, margin)
    seconds = _whole_seconds(raw)
    if seconds is None:
        return GraceBudget(
            maximum,
            None,
            None,
            margin,
            [
                f"annotation {CHECKPOINT_ANNOTATION} must be a whole number of seconds, "
                f'got {shorten(raw)!r}: write the time a full checkpoint takes, e.g. "120"'
            ],
        )
    needed = seconds + margin
    if needed <= maximum:
        return GraceBudget(maximum, needed, seconds, margin)
    too_long = (
        f"the declared checkpoint ({CHECKPOINT_ANNOTATION}: {seconds}) plus the {margin} s "
        f"margin needs {needed} s, more than the {maximum} s a preemptible node gives before it "
        f"is removed: checkpoint in pieces that take at most {maximum - margin} s, or use a class "
        "that runs on standard nodes"
    )
    return GraceBudget(maximum, needed, seconds, margin, [too_long])


# Longer than any drain window; also keeps int() clear of Python's limit on digit strings.
MAX_CHECKPOINT_DIGITS = 9


def _whole_seconds(raw: str) -> int | None:
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_CHECKPOINT_DIGITS:
        return None
    return int(text)


def grace_violation(spec: Mapping[str, Any]) -> str | None:
    """A negative grace period (its type is checked with the rest of the pod's shape)."""
    value = spec.get("terminationGracePeriodSeconds")
    if isinstance(value, int) and value < 0:
        return f"{GRACE_FIELD} must be a non-negative whole number of seconds, got {value}"
    return None


def adjust_grace(
    spec: dict[str, Any], budget: GraceBudget, changes: list[Change], warnings: list[str]
) -> None:
    """Lower the grace period to the maximum, raise it to what the checkpoint needs."""
    current = spec.get("terminationGracePeriodSeconds")
    effective = API_DEFAULT_GRACE if current is None else int(current)
    target = min(effective, budget.maximum)
    if budget.needed is not None:
        target = max(target, budget.needed)
    if target == effective:
        return
    spec["terminationGracePeriodSeconds"] = target
    if target < effective:
        why = (
            f"grace period lowered from {effective} to {target} s: a preemptible node is removed "
            f"{budget.maximum} s after it is cordoned, so a longer grace period buys nothing"
        )
        warnings.append(f"{GRACE_FIELD}: {why}")
    else:
        why = (
            f"grace period raised from {effective} to {target} s: {CHECKPOINT_ANNOTATION} "
            f"{budget.checkpoint} "
            f"plus the {budget.margin} s margin"
        )
    changes.append(Change(GRACE_FIELD, why))
