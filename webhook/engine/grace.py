"""The termination grace period a pod on preemptible capacity gets: fits the drain window,
and leaves time for the checkpoint it declares."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final, final

from webhook.engine.findings import Code, Effects, Finding, change, finding, shorten
from webhook.engine.policy import Policy

CHECKPOINT_ANNOTATION = "together.ai/checkpoint-seconds"
# What the API server sets when a pod leaves the field out, before any webhook sees it.
API_DEFAULT_GRACE = 30
GRACE_FIELD = "spec.terminationGracePeriodSeconds"


@final
class GraceBudget:
    """The grace-period limits one pod is held to, with what is wrong with its request."""

    __slots__ = ("checkpoint", "margin", "maximum", "needed", "refusals")

    def __init__(
        self,
        *,
        maximum: int,
        margin: int,
        needed: int | None = None,
        checkpoint: int | None = None,
        refusals: tuple[Finding, ...] = (),
    ) -> None:
        self.maximum: Final = maximum
        self.margin: Final = margin
        self.needed: Final = needed
        self.checkpoint: Final = checkpoint
        self.refusals: Final = refusals


def grace_budget(annotations: Mapping[str, str], policy: Policy) -> GraceBudget:
    """The budget for a pod with these annotations under ``policy``."""
    raw = annotations.get(CHECKPOINT_ANNOTATION)
    maximum, margin = policy.max_grace_seconds, policy.checkpoint_margin_seconds
    if raw is None:
        return GraceBudget(maximum=maximum, margin=margin)
    seconds = _whole_seconds(raw)
    if seconds is None:
        message = (
            f"annotation {CHECKPOINT_ANNOTATION} must be a whole number of seconds, "
            f'got {shorten(raw)!r}: write the time a full checkpoint takes, e.g. "120"'
        )
        refusal = finding(Code.CHECKPOINT_NOT_A_NUMBER, message, _ANNOTATION_PATH)
        return GraceBudget(maximum=maximum, margin=margin, refusals=(refusal,))
    needed = seconds + margin
    if needed <= maximum:
        return GraceBudget(maximum=maximum, needed=needed, checkpoint=seconds, margin=margin)
    too_long = (
        f"the declared checkpoint ({CHECKPOINT_ANNOTATION}: {seconds}) plus the {margin} s "
        f"margin needs {needed} s, more than the {maximum} s a preemptible node gives before it "
        f"is removed: checkpoint in pieces that take at most {maximum - margin} s, or use a class "
        "that runs on standard nodes"
    )
    refusal = finding(Code.CHECKPOINT_TOO_LONG, too_long, _ANNOTATION_PATH)
    return GraceBudget(
        maximum=maximum, needed=needed, checkpoint=seconds, margin=margin, refusals=(refusal,)
    )


_ANNOTATION_PATH = f"metadata.annotations.{CHECKPOINT_ANNOTATION}"


# Longer than any drain window; also keeps int() clear of Python's limit on digit strings.
MAX_CHECKPOINT_DIGITS = 9


def _whole_seconds(raw: str) -> int | None:
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_CHECKPOINT_DIGITS:
        return None
    return int(text)


def grace_violation(spec: Mapping[str, Any]) -> Finding | None:
    """A negative grace period (its type is checked with the rest of the pod's shape)."""
    value = spec.get("terminationGracePeriodSeconds")
    if isinstance(value, int) and value < 0:
        message = f"{GRACE_FIELD} must be a non-negative whole number of seconds, got {value}"
        return finding(Code.NEGATIVE_GRACE, message, GRACE_FIELD)
    return None


def adjust_grace(spec: dict[str, Any], budget: GraceBudget) -> Effects:
    """Lower the grace period to the maximum, raise it to what the checkpoint needs."""
    current = spec.get("terminationGracePeriodSeconds")
    effective = API_DEFAULT_GRACE if current is None else int(current)
    target = min(effective, budget.maximum)
    if budget.needed is not None:
        target = max(target, budget.needed)
    if target == effective:
        return Effects()
    spec["terminationGracePeriodSeconds"] = target
    if target < effective:
        return _lowered(effective, target, budget.maximum)
    return _raised(effective, target, budget.checkpoint, budget.margin)


# Made once per set of numbers and reused (findings are immutable): most pods carry the same.
@lru_cache(maxsize=1024)
def _lowered(effective: int, target: int, maximum: int) -> Effects:
    lowered = change(
        Code.GRACE_LOWERED,
        f"grace period lowered from {effective} to {target} s",
        f"a preemptible node is removed {maximum} s after it is cordoned, so a "
        "longer grace period buys nothing",
        GRACE_FIELD,
    )
    note = finding(Code.GRACE_LOWERED, f"{GRACE_FIELD}: {lowered.message}", GRACE_FIELD)
    return Effects(changes=(lowered,), notes=(note,))


@lru_cache(maxsize=1024)
def _raised(effective: int, target: int, checkpoint: int | None, margin: int) -> Effects:
    raised = change(
        Code.GRACE_RAISED,
        f"grace period raised from {effective} to {target} s",
        f"{CHECKPOINT_ANNOTATION} {checkpoint} plus the {margin} s margin",
        GRACE_FIELD,
    )
    return Effects(changes=(raised,))
