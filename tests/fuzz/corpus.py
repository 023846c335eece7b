"""Where mutation starts: reviews recorded from a real kube-apiserver, reviews built around the
example manifests, and the adversarial pods of ``tests/adversarial.py`` at a modest size."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests import adversarial
from tests.fuzz.jsontext import Raw, deep_copy

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "admission-reviews"
EXAMPLES = REPO / "examples"

# Namespaces the fuzzer's fake cluster knows, with their together.ai/default-workload.
NAMESPACE_DEFAULTS: dict[str, str] = {
    "sweeps": "interruptible",
    "inference": "serving",
    "frontline": "serving",
    "mixed": "flexible",
    "heads": "coordinator",
    "typo-ns": "Serving",
    "unknown-ns": "batch-please",
}
EXCLUDED_NAMESPACES = ("kube-system", "kube-node-lease", "preemptguard-system")

# Group and plural resource of the kinds the examples and mutations use.
RESOURCES: dict[str, tuple[str, str]] = {
    "Pod": ("", "pods"),
    "PodTemplate": ("", "podtemplates"),
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "DaemonSet": ("apps", "daemonsets"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "Namespace": ("", "namespaces"),
}


@dataclass(frozen=True)
class Seed:
    """One starting review: its name, and the hook it was recorded for (None: either)."""

    name: str
    review: dict[str, Any]
    hook: str | None

    def copy(self) -> dict[str, Any]:
        copied: dict[str, Any] = deep_copy(self.review)
        return copied


def review_for(
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    uid: str = "fuzz-0",
    namespace: str | None = None,
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A review of ``obj`` as the API server writes one (field order included)."""
    kind = k if isinstance(k := obj.get("kind"), str) else "Pod"
    api_version = v if isinstance(v := obj.get("apiVersion"), str) else "v1"
    group, _, version = api_version.rpartition("/")
    resource = RESOURCES.get(kind, (group, kind.lower() + "s"))[1]
    meta = m if isinstance(m := obj.get("metadata"), dict) else {}
    ns = namespace if namespace is not None else meta.get("namespace", "default")
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": dict(gvk),
            "requestResource": dict(gvr),
            "name": meta.get("name", ""),
            "namespace": ns,
            "operation": operation,
            "userInfo": {"username": user, "groups": list(groups)},
            "object": obj if operation != "DELETE" else None,
            "oldObject": old,
            "dryRun": False,
            "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every object in ``examples/``, named ``file#index`` (shared: copy before changing)."""
    return list(_example_objects())


@functools.cache
def _example_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict):
                found.append((f"{path.stem}#{i}", doc))
    return tuple(found)


def recorded_reviews() -> list[tuple[str, dict[str, Any]]]:
    """The recorded reviews, named by file (shared: copy before changing one)."""
    return list(_recorded_reviews())


@functools.cache
def _recorded_reviews() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple((p.stem, json.loads(p.read_text())) for p in sorted(FIXTURES.glob("*.json")))


@functools.cache
def seeds() -> tuple[Seed, ...]:
    """Every starting review; the same list, in the same order, on every run."""
    out: list[Seed] = []
    for name, doc in recorded_reviews():
        hook = "mutate" if "-mutate" in name else "validate" if "-validate" in name else None
        out.append(Seed(f"recorded:{name}", doc, hook))
    for name, obj in _example_objects():
        if obj.get("kind") == "Namespace":
            continue
        out.append(Seed(f"example:{name}", review_for(copy.deepcopy(obj)), None))
    small = 48 * 1024
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "base": lambda: adversarial.base_pod("adv"),
        "many-values": lambda: adversarial.many_values(small),
        "too-many-values": lambda: adversarial.too_many_values(small),
        "many-tolerations": lambda: adversarial.many_tolerations(small),
        "many-annotations": lambda: adversarial.many_annotations(small),
        "deep-managed-fields": lambda: adversarial.deep_managed_fields(depth=1_000),
    }
    for name, build in builders.items():
        pod = build()
        fields = pod["metadata"].get("managedFields")
        if fields is not None:  # deep: kept as text, so that every copy is cheap
            pod["metadata"]["managedFields"] = Raw(adversarial.encode(fields).decode())
        out.append(Seed(f"adversarial:{name}", review_for(pod), None))
    return tuple(out)


def namespace_objects() -> list[dict[str, Any]]:
    """Namespace objects carrying ``NAMESPACE_DEFAULTS``, for manifests given to the CLI."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "annotations": {"together.ai/default-workload": workload},
            },
        }
        for name, workload in NAMESPACE_DEFAULTS.items()
    ]
