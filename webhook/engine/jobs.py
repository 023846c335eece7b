"""Retries that do not count: the Jobs of preemptible classes ignore the failures reclaims cause.

A Job counts every failed pod against its ``backoffLimit``, a pod killed by a reclaim like any
other. A pod disrupted by the system (a reclaim seen by the observer, a preemption, an
eviction) carries the condition ``DisruptionTarget``; a ``podFailurePolicy`` rule ``Ignore`` on
that condition makes the Job controller replace such a pod without counting it. So a Job spec
whose pod template is of a class that may run on preemptible nodes is given that rule, ahead of
the user's own (the first rule that matches decides), whose rules are kept as they are.

Kubernetes allows a ``podFailurePolicy`` only with pods that use ``restartPolicy: Never`` (with
``OnFailure`` the kubelet restarts the container in place and the Job never sees a failed pod)
and only with ``podReplacementPolicy: Failed``, so that one is set too.

An API server that does not know a field drops it before any webhook sees the object, and one
that knows ``podReplacementPolicy`` (1.29 on) writes its default into every Job before webhooks
run: so a Job as the API server sends it proves the server knows both fields when it carries
either. A Job that carries neither is left alone (Kubernetes before 1.29). Nothing is defaulted
in a template (a CronJob's, a JobSet's): the Job made from it later is the Job webhook's.
"""

from __future__ import annotations

import enum
from typing import Any, Final, final

from webhook.engine.findings import Code, Effects, Finding, change, finding

# The API server refuses a podFailurePolicy of more rules.
MAX_RULES = 20
FAILED = "Failed"


class JobAPI(enum.Enum):
    """What the API server that will store a Job spec knows of podFailurePolicy."""

    # Offline: a current release, which knows both fields and defaults podReplacementPolicy.
    CURRENT = "current"
    # The object as an API server sent it: a Job's own spec tells (see the module).
    AS_SENT = "as-sent"


@final
class JobSpecAt:
    """A Job spec in the copy, with its pod template's spec: ``own`` when it is the Job's own
    spec (not a template's), ``where`` its dotted path in the object."""

    __slots__ = ("own", "spec", "template_spec", "where")

    def __init__(self, spec: dict[str, Any], template_spec: Any, *, own: bool, where: str) -> None:
        self.spec: Final = spec
        self.template_spec: Final = template_spec
        self.own: Final = own
        self.where: Final = where


def copy_along(obj: dict[str, Any], paths: list[tuple[str | int, ...]]) -> dict[str, Any]:
    """A copy of ``obj`` in which the containers along ``paths`` (and the mappings at their
    ends) are copies, shallowly: everything else is shared with ``obj``."""
    mutated = dict(obj)
    for parts in paths:
        node: Any = mutated
        for part in parts:
            child = node[part]
            node[part] = dict(child) if isinstance(child, dict) else list(child)
            node = node[part]
    return mutated


def retries(job: JobSpecAt, api: JobAPI) -> Effects:
    """Give ``job`` (in the copy) the rule that ignores disruptions, when its pods may have
    it; a warning when they may not and what that costs."""
    restart = (
        job.template_spec.get("restartPolicy") if isinstance(job.template_spec, dict) else None
    )
    if restart == "OnFailure":
        return Effects(notes=(_restarted_in_place(job.where),))
    if restart != "Never" or not _known(job, api):
        return Effects()
    current = job.spec.get("podFailurePolicy")
    rules = current.get("rules") if isinstance(current, dict) else None
    if current is not None and not isinstance(rules, list):
        return Effects()  # not a policy the API server takes: its own message says why
    rules = rules or []
    if rules and ignores_disruption(rules[0]):
        return Effects()
    if len(rules) >= MAX_RULES:
        return Effects(notes=(_no_room(job.where),))
    job.spec["podFailurePolicy"] = {**(current or {}), "rules": [disruption_rule(), *rules]}
    return Effects(changes=(_added(job.where), *_replacement(job, api)))


def _known(job: JobSpecAt, api: JobAPI) -> bool:
    """Whether the API server knows podFailurePolicy (see the module)."""
    if api is JobAPI.CURRENT or not job.own:
        return True
    return "podReplacementPolicy" in job.spec or "podFailurePolicy" in job.spec


def ignores_disruption(rule: Any) -> bool:
    """Whether ``rule`` ignores every pod with the condition DisruptionTarget: action Ignore,
    on that condition (status True, the API server's default) alone."""
    if not isinstance(rule, dict) or rule.get("action") != "Ignore" or "onExitCodes" in rule:
        return False
    conditions = rule.get("onPodConditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") == "DisruptionTarget"
        and c.get("status", "True") == "True"
        for c in conditions
    )


def disruption_rule() -> dict[str, Any]:
    """The rule, a new value each time (the copy's, never shared)."""
    return {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }


def _replacement(job: JobSpecAt, api: JobAPI) -> tuple[Finding, ...]:
    """``podReplacementPolicy: Failed``, which the API server requires with a
    podFailurePolicy; not on a Job whose API server does not know the field (it is absent)."""
    current = job.spec.get("podReplacementPolicy")
    if current == FAILED:
        return ()
    if current is None and job.own and api is JobAPI.AS_SENT:
        return ()
    job.spec["podReplacementPolicy"] = FAILED
    return (_replaced(job.where, current),)


def _path(where: str, field: str) -> str:
    return f"{where}.{field}" if where else field


def _added(where: str) -> Finding:
    return change(
        Code.POD_FAILURE_POLICY,
        "podFailurePolicy rule Ignore on DisruptionTarget, ahead of any of the Job's own",
        "a pod killed by a reclaim of its preemptible node is replaced without counting "
        "against backoffLimit",
        _path(where, "podFailurePolicy.rules"),
    )


def _replaced(where: str, current: Any) -> Finding:
    was = f" (was {current})" if isinstance(current, str) else ""
    return change(
        Code.POD_REPLACEMENT_POLICY,
        f"podReplacementPolicy Failed{was}",
        "Kubernetes takes a podFailurePolicy only with it: a replacement pod is created once "
        "the one it replaces has failed",
        _path(where, "podReplacementPolicy"),
    )


def _restarted_in_place(where: str) -> Finding:
    message = (
        "its pods use restartPolicy OnFailure, so a reclaim of their preemptible node counts "
        "against the Job's backoffLimit like any failure; use restartPolicy Never to have "
        "reclaims ignored (the webhook then gives the Job a podFailurePolicy rule for them)"
    )
    return finding(Code.RECLAIMS_COUNTED, message, _path(where, "template.spec.restartPolicy"))


def _no_room(where: str) -> Finding:
    message = (
        f"its podFailurePolicy already has {MAX_RULES} rules, the most Kubernetes allows, so "
        "no rule ignoring reclaims could be added: a reclaim of a preemptible node counts "
        "against backoffLimit; make room for a first rule {action: Ignore, onPodConditions: "
        "[{type: DisruptionTarget, status: 'True'}]}"
    )
    return finding(Code.RECLAIMS_COUNTED, message, _path(where, "podFailurePolicy.rules"))
