"""Where a pod (or pod template) comes from: the templates whose role and default class it has.

A workload's template has its own. A pod its operator made from one carries neither: the
operator copies the template, adds labels of its own, and the template's role and default
class stay behind in the workload. Those labels say which template a pod comes from
(``TemplateSpec.pods``), so a LeaderWorkerSet's pods are serving and a TFJob's parameter
servers coordinators when they are created, as their templates were at apply time. The
operator sets those labels over whatever the template says, so a template cannot leave
them off its pods; a pod that carries them without coming from such a template only adds a
source, and the strictest source wins.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from webhook.engine.decision import Classification, Obj
from webhook.engine.policy import PodTemplate, Policy, TemplateSpec
from webhook.engine.workloads import mapping_at

TEMPLATE_DEFAULT = "template default"


class Origins(NamedTuple):
    """The roles a pod's templates play, and the classes they default to (each a
    classification source when the pod carries no class annotation)."""

    roles: frozenset[str] = frozenset()
    defaults: tuple[Classification, ...] = ()


NONE = Origins()


def of_template(spec: TemplateSpec) -> Origins:
    """A workload's template: its own role and default."""
    roles = frozenset((spec.role,)) if spec.role else frozenset()
    if spec.default_class is None:
        return Origins(roles=roles)
    detail = f"the default of {spec.role or 'the'} templates of its kind"
    default = Classification(name=spec.default_class, source=TEMPLATE_DEFAULT, detail=detail)
    return Origins(roles, (default,))


def with_role(found: Origins, role: str) -> Origins:
    """``found`` for a pod that plays ``role`` instead (see ``FirstPod``)."""
    return found._replace(roles=frozenset((role,)))


def of_pod(pod: Obj, policy: Policy) -> Origins:
    """A pod: the templates whose pods carry its labels."""
    labels = mapping_at(pod, "metadata", "labels")
    index = policy.pod_templates_by_key
    if index.keys().isdisjoint(labels):
        return NONE  # the common case, decided without a selector
    candidates = {t for key in labels for t in index.get(key, ())}
    found = [t for t in policy.pod_templates if t in candidates and t.selector.matches(labels)]
    if not found:
        return NONE
    defaults: dict[str, Classification] = {}
    for t in found:
        if t.spec.default_class is not None and t.spec.default_class not in defaults:
            defaults[t.spec.default_class] = _pod_default(t)
    return Origins(frozenset(t.spec.role for t in found if t.spec.role), tuple(defaults.values()))


# Templates of the policies loaded lately: the same few for every review.
@lru_cache(maxsize=256)
def _pod_default(t: PodTemplate) -> Classification:
    role = f"{t.spec.role} " if t.spec.role else ""
    detail = (
        f"the default of {t.kind.name} {role}templates, whose pods carry the labels {t.selector}"
    )
    return Classification(name=t.spec.default_class, source=TEMPLATE_DEFAULT, detail=detail)
