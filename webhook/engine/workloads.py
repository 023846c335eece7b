"""Which kinds carry pods, and where in each object its pod templates live.

The kinds are policy data (``Policy.workload_kinds``), by API group and kind; these are the
built-in ones, and the means of finding templates along the paths a kind declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.decision import Obj
from webhook.engine.policy import (
    EVERY_ITEM,
    EVERY_VALUE,
    TemplateSpec,
    WorkloadKind,
    dotted,
)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def parse_path(text: str) -> tuple[str, ...]:
    """``spec.workerGroupSpecs[*].template`` as parts; raises ``ValueError`` saying why not."""
    parts: list[str] = []
    for piece in text.split("."):
        name, _, rest = piece.partition("[")
        if not name or (rest and rest != "*]"):
            raise ValueError(
                f"{text!r} is not a template path: write keys with dots, [*] for every item "
                "of a list and * for every value of a mapping, e.g. spec.groups[*].template"
            )
        parts.append(name)
        if rest:
            parts.append(EVERY_ITEM)
    return tuple(parts)


def _builtin(
    group: str,
    kind: str,
    path: str,
    owner: str | None,
    ignore: str | None = None,
    *,
    jobs: bool = False,
) -> WorkloadKind:
    return WorkloadKind(
        group=group,
        kind=kind,
        templates=(TemplateSpec(path=parse_path(path), pod_failure_policy=jobs),),
        pod_owner_kind=owner,
        ignore=ignore,
    )


# The kinds of a policy that lists none: Kubernetes' own controllers. The default policy lists
# these and the GPU world's operators (Ray, Kubeflow, JobSet, LeaderWorkerSet, ...).
BUILTIN_KINDS: dict[tuple[str, str], WorkloadKind] = {
    (k.group, k.kind): k
    for k in (
        _builtin("apps", "Deployment", "spec.template", "ReplicaSet"),
        _builtin("apps", "ReplicaSet", "spec.template", "ReplicaSet"),
        _builtin("apps", "StatefulSet", "spec.template", "StatefulSet"),
        _builtin("batch", "Job", "spec.template", "Job", jobs=True),
        _builtin("batch", "CronJob", "spec.jobTemplate.spec.template", "Job", jobs=True),
        _builtin("", "ReplicationController", "spec.template", "ReplicationController"),
        _builtin(
            "apps",
            "DaemonSet",
            "spec.template",
            "DaemonSet",
            ignore="DaemonSets run one pod on every node, of both classes",
        ),
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Template:
    """A pod template found in an object: where it is, which path of its kind found it, and
    the kind of its pods' controller."""

    parts: tuple[str | int, ...]
    template: Obj
    spec: TemplateSpec
    owner_kind: str | None = None

    @property
    def where(self) -> str:
        return dotted(self.parts)


def api_group(obj: Obj) -> str | None:
    """The API group of ``apps/v1`` (``apps``) or ``v1`` (the core group, ``""``)."""
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str):
        return None
    group, slash, _ = api_version.rpartition("/")
    return group if slash else ""


def workload_kind(obj: Obj, kinds: Mapping[tuple[str, str], WorkloadKind]) -> WorkloadKind | None:
    """The kind of ``obj`` among ``kinds``, by API group and kind: a Job of another group
    than ``batch`` is not a Job."""
    kind = obj.get("kind")
    group = api_group(obj)
    if not isinstance(kind, str) or group is None:
        return None
    return kinds.get((group, kind))


def is_pod(obj: Obj) -> bool:
    return obj.get("kind") == "Pod" and api_group(obj) == ""


# How many objects deep embedded objects are followed (an AppWrapper holding a JobSet is two).
MAX_EMBEDDING = 3

Kinds = Mapping[tuple[str, str], WorkloadKind]


def templates_of(
    obj: Obj, kind: WorkloadKind, kinds: Kinds, *, depth: int = 0
) -> tuple[list[Template], list[str]]:
    """Every pod template of ``obj``, and the (dotted) template paths of its kind it lacks:
    those that are neither optional nor cross a list or mapping, which may hold none.

    Embedded objects are followed by their own kinds, among ``kinds``; an embedded object of a
    kind not listed, or one left alone, holds no templates found here.
    """
    found: list[Template] = []
    missing: list[str] = []
    for spec in kind.templates:
        here: list[Template] = []
        for parts, node in _expand(obj, spec.path):
            if not isinstance(node, dict):
                continue
            if not spec.embedded:
                template = Template(
                    parts=parts, template=node, spec=spec, owner_kind=kind.pod_owner_kind
                )
                here.append(template)
            elif depth < MAX_EMBEDDING:
                inner, lacking = _embedded(node, parts, spec, kinds, depth)
                here += inner
                missing += lacking
        found += here
        wildcard = EVERY_ITEM in spec.path or EVERY_VALUE in spec.path
        if not here and not spec.optional and not wildcard:
            missing.append(spec.dotted)
    return found, missing


def _embedded(
    obj: Obj, at: tuple[str | int, ...], spec: TemplateSpec, kinds: Kinds, depth: int
) -> tuple[list[Template], list[str]]:
    if is_pod(obj):
        # Its controller is the embedding object's: what matters to rules is the pod itself.
        return [Template(parts=at, template=obj, spec=spec)], []
    kind = workload_kind(obj, kinds)
    if kind is None or kind.ignore is not None:
        return [], []
    inner, lacking = templates_of(obj, kind, kinds, depth=depth + 1)
    return (
        [
            Template(
                parts=(*at, *t.parts), template=t.template, spec=t.spec, owner_kind=t.owner_kind
            )
            for t in inner
        ],
        [f"{dotted(at)}.{path}" for path in lacking],
    )


def _expand(obj: Obj, path: tuple[str, ...]) -> list[tuple[tuple[str | int, ...], Any]]:
    """The values at ``path`` in ``obj``, with the concrete path of each."""
    level: list[tuple[tuple[str | int, ...], Any]] = [((), obj)]
    for part in path:
        following: list[tuple[tuple[str | int, ...], Any]] = []
        for parts, node in level:
            if part == EVERY_ITEM and isinstance(node, list):
                following += [((*parts, i), item) for i, item in enumerate(node)]
            elif part == EVERY_VALUE and isinstance(node, dict):
                following += [((*parts, key), value) for key, value in node.items()]
            elif isinstance(node, dict) and part in node:
                following.append(((*parts, part), node[part]))
        level = following
    return level


def value_at(obj: Obj, parts: tuple[str | int, ...]) -> Any:
    """The value at a concrete path; None where there is none."""
    node: Any = obj
    for part in parts:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def mapping_at(obj: object, *path: str) -> dict[str, Any]:
    """A nested mapping read without creating anything; ``{}`` where absent or not a mapping."""
    node: Any = obj
    for part in path:
        if type(node) is not dict:
            return {}
        node = node.get(part)
    return node if type(node) is dict else {}


def string_map(raw: Any) -> dict[str, str]:
    """Labels or annotations; entries that are not strings are ignored."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's controlling owner reference, as the pod states it (a claim, not a proof)."""

    api_version: str
    kind: str


def controller_owner(pod: Obj) -> Owner | None:
    """The pod's controlling owner reference, if any."""
    refs = mapping_at(pod, "metadata").get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, api_version = ref.get("kind"), ref.get("apiVersion")
            if not isinstance(kind, str):
                return None
            return Owner(api_version if isinstance(api_version, str) else "", kind)
    return None


# How far into an object of an unknown kind, and through how many of its containers, the
# search for pod templates goes: far enough for every operator's CRD, bounded for any object.
TEMPLATE_SEARCH_DEPTH = 12
TEMPLATE_SEARCH_NODES = 20_000
MAX_TEMPLATES_NAMED = 5


def find_pod_templates(obj: Obj) -> list[str]:
    """Paths of the pod templates (a mapping whose ``spec.containers`` is a list) in ``obj``."""
    found: list[str] = []
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    visited = 0
    while stack and visited < TEMPLATE_SEARCH_NODES and len(found) < MAX_TEMPLATES_NAMED:
        node, path, depth = stack.pop()
        visited += 1
        if path and isinstance(mapping_at(node, "spec").get("containers"), list):
            found.append(path)
            continue
        if depth >= TEMPLATE_SEARCH_DEPTH:
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node)
        children = [
            (value, _child_path(path, key), depth + 1)
            for key, value in items
            if isinstance(value, dict | list)
        ]
        stack.extend(reversed(children))
    return found


def _child_path(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def display_name(obj: Obj, *, pending: str = "*") -> str:
    """``name``, or ``generateName`` marked with ``pending`` for an object the API server
    will name (``sweep-*``; logs show ``generateName`` as it is, with ``pending=""``)."""
    meta = mapping_at(obj, "metadata")
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    generate = meta.get("generateName")
    return f"{generate}{pending}" if isinstance(generate, str) and generate else ""
