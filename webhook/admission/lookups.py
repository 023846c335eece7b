"""What the engine looks up besides the object: namespaces and PriorityClasses, offline.

The server keeps both by list + watch (``webhook.server.caches``). Offline, ``check``,
``explain`` and ``test`` know the namespaces among their input, the system PriorityClasses,
the ones preemptguard ships and any PriorityClass among their input (``*_from_objects``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources

import yaml

from webhook.engine.decision import NamespaceLookup, NamespaceMeta, Obj
from webhook.engine.scheduling import PREEMPT, PriorityClassInfo, PriorityLookup
from webhook.engine.workloads import mapping_at, string_map

# --- namespaces -------------------------------------------------------------------------------


def no_namespaces(namespace: str) -> NamespaceMeta:
    """The lookup when no cluster is configured: no namespace has annotations or labels."""
    return NamespaceMeta()


def namespaces_from_objects(objects: Iterable[Obj]) -> NamespaceLookup:
    """A lookup over the Namespace objects among ``objects`` (others are ignored)."""
    known: dict[str, NamespaceMeta] = {}
    for obj in objects:
        meta = mapping_at(obj, "metadata")
        if obj.get("kind") == "Namespace" and isinstance(meta.get("name"), str):
            known[meta["name"]] = NamespaceMeta(
                annotations=string_map(meta.get("annotations")),
                labels=string_map(meta.get("labels")),
            )
    return lambda namespace: known.get(namespace, NamespaceMeta())


# --- PriorityClasses --------------------------------------------------------------------------

# Every cluster has these (the API server creates them).
SYSTEM = (
    PriorityClassInfo("system-node-critical", 2_000_001_000),
    PriorityClassInfo("system-cluster-critical", 2_000_000_000),
)


def info_of(obj: Obj) -> PriorityClassInfo | None:
    """A PriorityClass object as the scheduler uses it; None for anything else."""
    name, value = mapping_at(obj, "metadata").get("name"), obj.get("value")
    if obj.get("kind") != "PriorityClass" or not isinstance(name, str) or type(value) is not int:
        return None
    policy = obj.get("preemptionPolicy")
    return PriorityClassInfo(name, value, policy if isinstance(policy, str) else PREEMPT)


@cache
def shipped() -> tuple[PriorityClassInfo, ...]:
    """The PriorityClasses preemptguard ships (webhook/data/priorityclasses.yaml)."""
    text = resources.files("webhook").joinpath("data/priorityclasses.yaml").read_text("utf-8")
    found = (info_of(doc) for doc in yaml.safe_load_all(text) if isinstance(doc, dict))
    return tuple(info for info in found if info is not None)


def known_classes() -> tuple[PriorityClassInfo, ...]:
    """The classes assumed to exist without a cluster: the system ones and the shipped ones."""
    return (*SYSTEM, *shipped())


def priority_classes_from_objects(objects: Iterable[Obj]) -> PriorityLookup:
    """A lookup over the system classes, the shipped ones and the PriorityClass objects among
    ``objects`` (which win: they are what the user is about to apply)."""
    return _lookup(known_classes(), objects)


def priority_classes_in_cluster(objects: Iterable[Obj]) -> PriorityLookup:
    """A lookup over the system classes and ``objects`` alone: a cluster holding just these."""
    return _lookup(SYSTEM, objects)


def offline_priority_classes() -> PriorityLookup:
    """The lookup without a cluster and without input: the system and shipped classes."""
    return priority_classes_from_objects(())


def _lookup(known: Iterable[PriorityClassInfo], objects: Iterable[Obj]) -> PriorityLookup:
    found = {info.name: info for info in known}
    for obj in objects:
        info = info_of(obj)
        if info is not None:
            found[info.name] = info
    return found.get
