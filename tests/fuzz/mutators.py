"""Structure-aware mutations of AdmissionReviews and manifests, driven by a seeded ``Random``.

Each case is made from its own ``random.Random`` seeded with the run's seed and the case's
index, so any one case can be made again alone (``review_case(seed, index)``). A mutation
knows where a review keeps what the webhook reads (the request's fields, the pod or the pod
template inside the object) and breaks it in the ways a client, a misconfigured API server
or an attacker who may create pods could: wrong JSON types, missing fields, nesting up to the
10,000 levels the API server accepts, huge lists and strings, odd operations, kinds and
requesters, near-miss annotations, numbers past Python's 4,300-digit limit, lone surrogates,
duplicate keys, and bodies that are not JSON at all.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from tests import adversarial
from tests.fuzz import corpus
from tests.fuzz.jsontext import DupKeys, Raw, deep_copy, dumps, nested_text

KEY = "together.ai/compute-class"
WORKLOAD = "together.ai/workload"
CHECKPOINT = "together.ai/checkpoint-seconds"
PLACEMENT = "together.ai/placement"
MIRROR = "kubernetes.io/config.mirror"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
DAEMONSET_CONTROLLERS = (
    "system:serviceaccount:kube-system:daemon-set-controller",
    "system:kube-controller-manager",
)

# Where each kind keeps its pod (template); kinds not listed keep none the webhook knows of.
TEMPLATE_PATHS: dict[str, tuple[str | int, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "PodTemplate": ("template",),
    "RayCluster": ("spec", "headGroupSpec", "template"),
    "PyTorchJob": ("spec", "pytorchReplicaSpecs", "Master", "template"),
    # Partial templates: patches laid over templates their operators keep, spec optional.
    "TrainJob": (
        "spec",
        "runtimePatches",
        0,
        "trainingRuntimeSpec",
        "template",
        "spec",
        "replicatedJobs",
        0,
        "template",
        "spec",
        "template",
    ),
    "JobFlow": ("spec", "flows", 0, "patch", "jobSpec", "tasks", 0, "template"),
    "Widget": ("spec", "template"),
}
KIND_GROUPS: dict[str, tuple[str, str]] = {
    "Pod": ("", "v1"),
    "Deployment": ("apps", "v1"),
    "StatefulSet": ("apps", "v1"),
    "ReplicaSet": ("apps", "v1"),
    "Job": ("batch", "v1"),
    "DaemonSet": ("apps", "v1"),
    "CronJob": ("batch", "v1"),
    "PodTemplate": ("", "v1"),
    "RayCluster": ("ray.io", "v1"),
    "PyTorchJob": ("kubeflow.org", "v1"),
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1"),
    "JobFlow": ("flow.volcano.sh", "v1alpha1"),
    "Widget": ("example.com", "v1alpha1"),
}
# Kinds whose template is partial (see TEMPLATE_PATHS).
PARTIAL_KINDS = frozenset({"TrainJob", "JobFlow"})
STANDARD_CLASSES = ("serving", "coordinator", "login")
CLASSES = ("interruptible", "flexible", *STANDARD_CLASSES)

Box = dict[str, Any]  # a mapping holding the object under "object" (a review's request)


@dataclass
class Case:
    """One input: where it came from, what was done to it, and the bytes to send."""

    seed: int
    index: int
    origin: str
    hook: str
    body: bytes
    content_type: str = "application/json"
    mutations: list[str] = field(default_factory=list)
    warn_mode: bool = False

    @property
    def ref(self) -> str:
        return f"seed {self.seed} case {self.index}"


# --- values -----------------------------------------------------------------------------


def huge_int(rng: random.Random) -> Raw:
    digits = rng.choice([4301, 4400, 5000, 20_000])
    sign = rng.choice(["", "", "-"])
    return Raw(sign + rng.choice("123456789") + "7" * (digits - 1))


def odd_value(rng: random.Random, avoid: Any = None) -> Any:
    """A value of some JSON type, usually not the type of ``avoid``."""
    makers: list[Callable[[], Any]] = [
        lambda: rng.choice(["", "x", "123", "true", "null", "CREATE", "Pod", "preemptible"]),
        lambda: rng.choice([0, -1, 1, 7, 300, 2**31, 2**63, 10**30, -(10**30)]),
        # Written with a decimal point, so that YAML 1.1 reads them as numbers too.
        lambda: rng.choice([0.5, 1.5e300, -0.0, 3.0]),
        lambda: rng.choice([True, False]),
        lambda: None,
        lambda: rng.choice([[], ["x"], [1, None], [{}], [[]]]),
        lambda: rng.choice([{}, {"a": 1}, {"kind": "Pod"}, {"": None}]),
        lambda: huge_int(rng),
        lambda: rng.choice(["\ud800", "a\udfffb", "\u0000", "é" * 3, "\u202e"]),
    ]
    for _ in range(5):
        value = rng.choice(makers)()
        if type(value) is not type(avoid):
            return value
    return value


def long_string(rng: random.Random) -> str:
    size = rng.choice([300, 1025, 10_000, 100_000, 100_000, 200_000])
    unit = rng.choice(["a", "preemptible", "serving,", "ü", "\u4e00", "x/y.z-"])
    return (unit * (size // len(unit) + 1))[:size]


def surrogate(rng: random.Random, base: str = "") -> str:
    lone = rng.choice(["\ud800", "\udbff", "\udc00", "\udfff"])
    where = rng.randrange(len(base) + 1)
    return base[:where] + lone + base[where:]


# --- paths --------------------------------------------------------------------------------


def walk(rng: random.Random, root: Any, stop: float = 0.3) -> list[Any]:
    """A random path of keys and indices from ``root`` to some value inside it."""
    path: list[Any] = []
    node = root
    while True:
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
            path.append(key)
            node = node[key]
        elif isinstance(node, list) and node:
            i = rng.randrange(len(node))
            path.append(i)
            node = node[i]
        else:
            return path
        if rng.random() < stop:
            return path


def get_at(root: Any, path: list[Any]) -> Any:
    node = root
    for part in path:
        node = node[part]
    return node


def set_at(root: Any, path: list[Any], value: Any) -> None:
    get_at(root, path[:-1])[path[-1]] = value


def path_text(path: list[Any]) -> str:
    return ".".join(
        str(p) if not isinstance(p, str) or len(p) < 40 else p[:37] + "..." for p in path
    )


def child(node: dict[str, Any], key: str) -> dict[str, Any]:
    """``node[key]`` as a mapping, made one when absent or of another type."""
    value = node.get(key)
    if not isinstance(value, dict):
        value = node[key] = {}
    return value


def obj_of(box: Box) -> dict[str, Any] | None:
    obj = box.get("object")
    return obj if isinstance(obj, dict) else None


def pod_of(box: Box) -> dict[str, Any] | None:
    """The pod, or the pod template, inside the box's object (made where the path is open)."""
    obj = obj_of(box)
    if obj is None:
        return None
    kind = obj.get("kind")
    path = TEMPLATE_PATHS.get(kind if isinstance(kind, str) else "Pod", ("spec", "template"))
    node: Any = obj
    for part, after in itertools.pairwise((*path, "")):
        empty: Any = [] if isinstance(after, int) else {}
        if isinstance(part, int):
            if not isinstance(node, list):
                return None
            if len(node) <= part:
                node.extend({} for _ in range(part + 1 - len(node)))
            nxt = node[part]
        else:
            if not isinstance(node, dict):
                return None
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = empty
        node = nxt
    return node if isinstance(node, dict) else None


def spec_of(box: Box) -> dict[str, Any] | None:
    pod = pod_of(box)
    return None if pod is None else child(pod, "spec")


def meta_of(box: Box) -> dict[str, Any] | None:
    pod = pod_of(box)
    return None if pod is None else child(pod, "metadata")


def terms_of(spec: dict[str, Any]) -> list[Any]:
    required = child(child(child(spec, "affinity"), "nodeAffinity"), REQUIRED)
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        terms = required["nodeSelectorTerms"] = []
    return terms


# Paths the webhook reads, in a review and in an object; wrong types there matter most.
REVIEW_PATHS: list[list[Any]] = [
    ["apiVersion"],
    ["kind"],
    ["request"],
    ["request", "uid"],
    ["request", "operation"],
    ["request", "kind"],
    ["request", "kind", "kind"],
    ["request", "kind", "group"],
    ["request", "namespace"],
    ["request", "name"],
    ["request", "subResource"],
    ["request", "userInfo"],
    ["request", "userInfo", "username"],
    ["request", "userInfo", "groups"],
    ["request", "dryRun"],
    ["request", "object"],
    ["request", "oldObject"],
    ["request", "object", "kind"],
]
POD_PATHS: list[list[Any]] = [
    ["metadata"],
    ["metadata", "annotations"],
    ["metadata", "annotations", WORKLOAD],
    ["metadata", "annotations", CHECKPOINT],
    ["metadata", "labels"],
    ["metadata", "ownerReferences"],
    ["metadata", "namespace"],
    ["metadata", "name"],
    ["spec"],
    ["spec", "nodeSelector"],
    ["spec", "nodeSelector", KEY],
    ["spec", "tolerations"],
    ["spec", "tolerations", 0],
    ["spec", "tolerations", 0, "key"],
    ["spec", "terminationGracePeriodSeconds"],
    ["spec", "affinity"],
    ["spec", "affinity", "nodeAffinity"],
    ["spec", "affinity", "nodeAffinity", REQUIRED],
    ["spec", "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms"],
    ["spec", "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms", 0],
    ["spec", "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms", 0, "matchExpressions"],
    ["spec", "affinity", "nodeAffinity", PREFERRED],
    ["spec", "containers"],
]


def _existing(root: Any, path: list[Any]) -> bool:
    node = root
    for part in path:
        if (isinstance(node, dict) and isinstance(part, str) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        ):
            node = cast(Any, node)[part]  # a str into a dict or an int into a list
        else:
            return False
    return True


def choose_path(rng: random.Random, doc: Any, box: Box | None) -> tuple[Any, list[Any]] | None:
    """A (root, path) to change: a field the webhook reads, or anywhere at all."""
    roll = rng.random()
    if roll < 0.5 and box is not None:
        pod = pod_of(box)
        if pod is not None:
            options = [p for p in POD_PATHS if _existing(pod, p)]
            if options:
                return pod, list(rng.choice(options))
    if roll < 0.65 and isinstance(doc, dict) and "request" in doc:
        options = [p for p in REVIEW_PATHS if _existing(doc, p)]
        if options:
            return doc, list(rng.choice(options))
    path = walk(rng, doc)
    return (doc, path) if path else None


# --- object mutations (a review's request, or a manifest's box) ---------------------------

ObjectMutator = Callable[[random.Random, Any, Box], str]


def wrong_type(rng: random.Random, doc: Any, box: Box) -> str:
    found = choose_path(rng, doc, box)
    if found is None:
        return "wrong-type:none"
    root, path = found
    old = get_at(root, path)
    set_at(root, path, odd_value(rng, old))
    return f"wrong-type:{path_text(path)}"


def remove_or_null(rng: random.Random, doc: Any, box: Box) -> str:
    found = choose_path(rng, doc, box)
    if found is None:
        return "remove:none"
    root, path = found
    parent = get_at(root, path[:-1])
    if rng.random() < 0.5:
        parent[path[-1]] = None
        return f"null:{path_text(path)}"
    del parent[path[-1]]
    return f"remove:{path_text(path)}"


def nested(rng: random.Random, depth: int) -> Raw:
    """A value nested ``depth`` levels, as JSON text (Python's encoder stops at ~1,000)."""
    shape = rng.choice(["dict", "list", "mixed", "managed"])
    leaf = rng.choice(["{}", "[]", '"x"', "1", "null"])
    if shape == "dict":
        return Raw(nested_text(depth, leaf))
    if shape == "list":
        return Raw(nested_text(depth, leaf, key=None))
    if shape == "mixed":
        half = nested_text(depth // 2, leaf, key=None)
        return Raw(nested_text(depth - depth // 2, half))
    # managedFields as the API server writes them: each level an object with a few keys.
    inner = leaf
    for i in range(depth):
        inner = f'{{"f:k{i % 3}":{inner},".":{{}}}}' if i % 50 == 0 else f'{{"f:x":{inner}}}'
    return Raw(inner)


def deep_nesting(rng: random.Random, doc: Any, box: Box) -> str:
    depth = rng.choice([150, 199, 200, 201, 202, 500, 1_000, 1_000, 3_000, 10_000])
    value = nested(rng, depth)
    where = rng.random()
    meta = meta_of(box)
    if where < 0.4 and meta is not None:
        fields = meta.get("managedFields")
        if not isinstance(fields, list):
            fields = meta["managedFields"] = []
        fields.append(
            {
                "manager": "fuzz",
                "operation": "Update",
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": value,
            }
        )
        return f"deep:{depth}:managedFields"
    spec = spec_of(box)
    if where < 0.6 and spec is not None:
        target = rng.choice(["term", "toleration", "extra", "selector", "affinity"])
        if target == "term":
            terms = terms_of(spec)
            terms.append({"matchExpressions": [{"key": "zone", "operator": "Exists"}], "x": value})
        elif target == "toleration":
            tolerations = spec.get("tolerations")
            if not isinstance(tolerations, list):
                tolerations = spec["tolerations"] = []
            tolerations.append({"key": "k", "operator": "Exists", "x": value})
        elif target == "extra":
            spec["x-deep"] = value
        elif target == "selector":
            spec["nodeSelector"] = value
        else:
            spec["affinity"] = value
        return f"deep:{depth}:{target}"
    found = choose_path(rng, doc, None)
    if found is None or not found[1]:
        return "deep:none"
    root, path = found
    parent = get_at(root, path[:-1])
    if isinstance(parent, dict) and rng.random() < 0.5:
        parent["fuzz-deep"] = value
    else:
        parent[path[-1]] = value
    return f"deep:{depth}:{path_text(path)}"


def huge_list(rng: random.Random, doc: Any, box: Box, scale: float = 1.0) -> str:
    spec, meta = spec_of(box), meta_of(box)
    if spec is None or meta is None:
        return "huge-list:none"
    count = int(rng.choice([1_001, 2_000, 5_000]) * scale)
    target = rng.choice(
        ["terms", "expressions", "values", "tolerations", "annotations", "labels", "preferred"]
    )
    value_in = rng.choice(["preemptible", "standard", "other"])
    if target == "terms":
        op = rng.choice(["In", "NotIn", "Exists"])
        term = {"matchExpressions": [{"key": KEY, "operator": op, "values": [value_in]}]}
        if op == "Exists":
            del term["matchExpressions"][0]["values"]
        terms = terms_of(spec)
        terms.extend(deep_copy(term) for _ in range(count))
    elif target == "expressions":
        terms = terms_of(spec)
        exprs: list[dict[str, Any]] = [{"key": f"k{i}", "operator": "Exists"} for i in range(count)]
        exprs.append({"key": KEY, "operator": "In", "values": [value_in]})
        terms.append({"matchExpressions": exprs})
    elif target == "values":
        terms = terms_of(spec)
        values = [f"v{i}" for i in range(count)] + [value_in]
        op = rng.choice(["In", "NotIn"])
        terms.append({"matchExpressions": [{"key": KEY, "operator": op, "values": values}]})
    elif target == "tolerations":
        tolerations = [{"key": f"k{i}", "operator": "Exists"} for i in range(count)]
        if rng.random() < 0.5:
            tolerations.append({"key": KEY, "operator": "Equal", "value": "preemptible"})
        spec["tolerations"] = tolerations
    elif target == "preferred":
        pref = child(child(spec, "affinity"), "nodeAffinity")
        pref[PREFERRED] = [
            {"weight": 1, "preference": {"matchExpressions": [{"key": KEY, "operator": "Exists"}]}}
            for _ in range(count)
        ]
    else:
        mapping = child(meta, target)
        near = ["together.ai/workloa", "together.ai/workload-", "together.ai/checkpoint-second"]
        for i in range(count):
            mapping[f"{rng.choice(near)}{i}"] = "serving" if i % 2 else "x"
    return f"huge-list:{target}:{count}"


def huge_string(rng: random.Random, doc: Any, box: Box) -> str:
    spec, meta = spec_of(box), meta_of(box)
    if spec is None or meta is None:
        return "huge-string:none"
    text = long_string(rng)
    target = rng.choice(
        [
            "selector-value",
            "selector-key",
            "workload",
            "checkpoint",
            "annotation-value",
            "annotation-key",
            "name",
            "generateName",
            "label",
            "toleration",
            "expression-value",
            "namespace",
            "owner-kind",
        ]
    )
    if target == "selector-value":
        child(spec, "nodeSelector")[KEY] = text
    elif target == "selector-key":
        child(spec, "nodeSelector")[text] = "preemptible"
    elif target == "workload":
        child(meta, "annotations")[WORKLOAD] = text
    elif target == "checkpoint":
        child(meta, "annotations")[CHECKPOINT] = text
    elif target == "annotation-value":
        child(meta, "annotations")["example.com/note"] = text
    elif target == "annotation-key":
        child(meta, "annotations")[text] = "serving"
    elif target in ("name", "generateName", "namespace"):
        meta[target] = text
        if target == "namespace" and isinstance(box.get("namespace"), str):
            box["namespace"] = text
    elif target == "label":
        child(meta, "labels")["ray.io/node-type"] = text
    elif target == "toleration":
        spec["tolerations"] = [{"key": text, "operator": "Exists"}]
    elif target == "owner-kind":
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": text, "name": "x", "uid": "1", "controller": True}
        ]
    else:
        terms_of(spec).append(
            {"matchExpressions": [{"key": KEY, "operator": "NotIn", "values": [text]}]}
        )
    return f"huge-string:{target}:{len(text)}"


WORKLOAD_KEYS = [
    WORKLOAD,
    WORKLOAD,
    WORKLOAD,
    "together.ai/Workload",
    "Together.ai/workload",
    "together.ai/workloads",
    "together.ai/workload ",
    "together.ai/work-load",
    "together-ai/workload",
    "togetherai/workload",
    "together.ai/workload-class",
    "together.ai/default-workload",
    "workload",
    "together.ai/checkpoint-second",
]
CLASS_NAMES = [
    *CLASSES,
    *CLASSES,
    "Serving",
    "SERVING",
    " serving",
    "serving ",
    "serving\n",
    "",
    "none",
    "null",
    "unclassified",
    "\u0455erving",  # Cyrillic dze
    "serving\u200b",
    "interruptible,serving",
    "a" * 300,
    "\ud800",
]


def workload_annotations(rng: random.Random, doc: Any, box: Box) -> str:
    meta = meta_of(box)
    if meta is None:
        return "annotations:none"
    key, value = rng.choice(WORKLOAD_KEYS), rng.choice(CLASS_NAMES)
    where = rng.choice(["annotations", "annotations", "annotations", "labels"])
    child(meta, where)[key] = value
    extra = ""
    if rng.random() < 0.25:
        # A decision record written by someone else (or by an earlier run).
        child(meta, "annotations")[PLACEMENT] = rng.choice([*CLASSES, "bogus", ""])
        extra = "+placement"
    if rng.random() < 0.15:
        obj = obj_of(box)
        if obj is not None and obj is not meta:
            # On the workload's own metadata, where its pods never see it.
            child(child(obj, "metadata"), "annotations")[WORKLOAD] = rng.choice(CLASSES)
            extra += "+outer"
    return f"annotation:{where}:{key!r}={value[:20]!r}{extra}"


CHECKPOINT_VALUES: list[Any] = [
    "120",
    "270",
    "271",
    "0",
    "-1",
    "1e3",
    "0x10",
    " 120 ",
    "\u0661\u0662\u0660",  # Arabic-Indic digits: int() reads them
    "120s",
    "",
    "+120",
    "1_000",
    "9" * 10,
    "9" * 100,
    "9" * 4301,
    "9" * 5000,
    "9" * 20_000,
    "0" * 5000 + "1",
    120,
    True,
]


def checkpoint(rng: random.Random, doc: Any, box: Box) -> str:
    meta = meta_of(box)
    if meta is None:
        return "checkpoint:none"
    value = rng.choice(CHECKPOINT_VALUES)
    if rng.random() < 0.05:
        value = huge_int(rng)
    child(meta, "annotations")[CHECKPOINT] = value
    if rng.random() < 0.6:
        child(meta, "annotations")[WORKLOAD] = rng.choice(CLASSES)
    shown = value.text[:8] if isinstance(value, Raw) else repr(value)[:12]
    return f"checkpoint:{shown}({len(str(value)) if not isinstance(value, Raw) else 'raw'})"


def big_number(rng: random.Random, doc: Any, box: Box) -> str:
    """An integer past Python's 4,300-digit limit, where a number or anything else stands."""
    value = huge_int(rng)
    spec = spec_of(box)
    options = ["grace", "priority", "toleration-seconds", "weight", "anywhere", "review"]
    target = rng.choice(options)
    if spec is None and target != "review":
        target = "anywhere"
    if target == "grace" and spec is not None:
        spec["terminationGracePeriodSeconds"] = value
    elif target == "priority" and spec is not None:
        spec["priority"] = value
    elif target == "toleration-seconds" and spec is not None:
        spec["tolerations"] = [
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": value}
        ]
    elif target == "weight" and spec is not None:
        child(child(spec, "affinity"), "nodeAffinity")[PREFERRED] = [
            {
                "weight": value,
                "preference": {"matchExpressions": [{"key": KEY, "operator": "Exists"}]},
            }
        ]
    elif target == "review" and isinstance(doc, dict) and isinstance(doc.get("request"), dict):
        field_name = rng.choice(["uid", "operation", "namespace", "name", "dryRun", "options"])
        doc["request"][field_name] = value
        target = f"request.{field_name}"
    else:
        found = choose_path(rng, doc, box)
        if found is None:
            return "big-number:none"
        root, path = found
        set_at(root, path, value)
        target = path_text(path)
    return f"big-number:{target}"


def lone_surrogate(rng: random.Random, doc: Any, box: Box) -> str:
    meta, spec = meta_of(box), spec_of(box)
    target = rng.choice(
        ["class", "annotation-key", "name", "label", "selector", "toleration", "review"]
    )
    if meta is None or spec is None:
        target = "review"
    if target == "class" and meta is not None:
        child(meta, "annotations")[WORKLOAD] = surrogate(rng, rng.choice(CLASSES))
    elif target == "annotation-key" and meta is not None:
        child(meta, "annotations")[surrogate(rng, WORKLOAD)] = "serving"
    elif target == "name" and meta is not None:
        meta["name"] = surrogate(rng, "pod")
    elif target == "label" and meta is not None:
        child(meta, "labels")[surrogate(rng, "app")] = surrogate(rng, "x")
    elif target == "selector" and spec is not None:
        child(spec, "nodeSelector")[KEY] = surrogate(rng, "preemptible")
    elif target == "toleration" and spec is not None:
        spec["tolerations"] = [{"key": surrogate(rng, KEY), "operator": "Exists"}]
    elif isinstance(doc, dict) and isinstance(doc.get("request"), dict):
        field_name = rng.choice(["uid", "namespace", "name", "subResource"])
        doc["request"][field_name] = surrogate(rng, "x")
        user = doc["request"].get("userInfo")
        if isinstance(user, dict) and rng.random() < 0.5:
            user["username"] = surrogate(rng, "alice")
        target = f"request.{field_name}"
    return f"surrogate:{target}"


PLACEMENT_SHAPES: list[Callable[[], dict[str, Any]]] = [
    lambda: {"nodeSelector": {KEY: "preemptible"}},
    lambda: {"nodeSelector": {KEY: "standard"}},
    lambda: {"nodeSelector": {KEY: "Preemptible"}},
    lambda: {"nodeSelector": {KEY: ""}},
    lambda: {"terms": [[("In", ["preemptible"])]]},
    lambda: {"terms": [[("In", ["preemptible", "standard"])]]},
    lambda: {"terms": [[("NotIn", ["standard"])]]},
    lambda: {"terms": [[("Exists", None)]]},
    lambda: {"terms": [[("DoesNotExist", None)]]},
    lambda: {"terms": [[("Gt", ["5"])]]},
    lambda: {"terms": [[("Lt", ["x"])]]},
    lambda: {"terms": [[("In", [])]]},
    lambda: {"terms": [[("in", ["preemptible"])]]},
    lambda: {"terms": [[("In", ["preemptible"])], [("In", ["standard"])]]},
    lambda: {"terms": [[("In", ["preemptible"])], []]},
    lambda: {"terms": [[("NotIn", ["preemptible"])], [("In", ["preemptible"])]]},
    lambda: {"terms": [[("Exists", None), ("NotIn", ["preemptible"])]]},
    lambda: {"terms": [[("In", ["preemptible"]), ("In", ["standard"])]]},
    lambda: {"fields": True},
    lambda: {"empty-term": True},
    lambda: {"null-terms": True},
    lambda: {"preferred-only": True},
    lambda: {"tolerate-all": True},
    lambda: {"null-item": True},
]


TOLERATIONS: list[dict[str, Any]] = [
    {"operator": "Exists"},
    {"key": "", "operator": "Exists"},
    {"key": KEY, "operator": "Exists"},
    {"key": KEY, "operator": "Exists", "effect": "NoExecute"},
    {"key": KEY, "operator": "Equal", "value": "preemptible"},
    {"key": KEY, "operator": "Equal", "value": "preemptible", "effect": "NoSchedule"},
    {"key": KEY, "operator": "Equal", "value": "standard", "effect": "NoSchedule"},
    {"key": KEY, "value": "preemptible", "effect": "NoSchedule"},
    {"key": KEY, "operator": "Equal", "value": "preemptible", "effect": "PreferNoSchedule"},
    {"key": KEY, "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 10},
    {"key": "together.ai/Compute-Class", "operator": "Exists"},
]


def _expr(op: str, values: list[Any] | None) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": KEY, "operator": op}
    if values is not None:
        expr["values"] = list(values)
    return expr


def placement(rng: random.Random, doc: Any, box: Box) -> str:
    """Node selection that asks for, allows or excludes preemptible nodes, in many spellings."""
    spec, meta = spec_of(box), meta_of(box)
    if spec is None or meta is None:
        return "placement:none"
    index = rng.randrange(len(PLACEMENT_SHAPES))
    shape = PLACEMENT_SHAPES[index]()
    if "nodeSelector" in shape:
        child(spec, "nodeSelector").update(shape["nodeSelector"])
    if "terms" in shape:
        terms = terms_of(spec)
        if rng.random() < 0.7:
            terms.clear()
        for exprs in shape["terms"]:
            terms.append({"matchExpressions": [_expr(op, values) for op, values in exprs]})
    if "fields" in shape:
        terms_of(spec).append(
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
        )
    if "empty-term" in shape:
        terms_of(spec).append(
            rng.choice([{}, {"matchExpressions": []}, {"matchExpressions": None}])
        )
    if "null-terms" in shape:
        child(child(spec, "affinity"), "nodeAffinity")[REQUIRED] = rng.choice(
            [None, {}, {"nodeSelectorTerms": None}, {"nodeSelectorTerms": []}]
        )
    if "preferred-only" in shape:
        child(child(spec, "affinity"), "nodeAffinity")[PREFERRED] = [
            {"weight": 100, "preference": {"matchExpressions": [_expr("In", ["preemptible"])]}}
        ]
    if "null-item" in shape:
        # A null where a list holds objects or strings (the API server drops or refuses it).
        where = rng.choice(["tolerations", "terms", "expressions", "values", "preferred"])
        if where == "tolerations":
            tolerations = spec.get("tolerations")
            if not isinstance(tolerations, list):
                tolerations = spec["tolerations"] = []
            tolerations.append(None)
        elif where == "preferred":
            node_affinity = child(child(spec, "affinity"), "nodeAffinity")
            node_affinity[PREFERRED] = [None, {"weight": 1, "preference": None}]
        elif where == "terms":
            terms_of(spec).append(None)
        elif where == "expressions":
            terms_of(spec).append({"matchExpressions": [None, _expr("In", ["preemptible"])]})
        else:
            terms_of(spec).append({"matchExpressions": [_expr("NotIn", [None, "preemptible"])]})
    if "tolerate-all" in shape or rng.random() < 0.3:
        tolerations = spec.get("tolerations")
        if not isinstance(tolerations, list):
            tolerations = spec["tolerations"] = []
        tolerations.append(dict(rng.choice(TOLERATIONS)))
    if rng.random() < 0.6:
        child(meta, "annotations")[WORKLOAD] = rng.choice([*STANDARD_CLASSES, *CLASSES])
    return f"placement:{index}"


GRACE_VALUES: list[Any] = [0, 1, 30, 299, 300, 301, 600, 10**12, -1, 1.5, 300.0, "600", True, None]


def grace(rng: random.Random, doc: Any, box: Box) -> str:
    spec = spec_of(box)
    if spec is None:
        return "grace:none"
    value = rng.choice(GRACE_VALUES)
    spec["terminationGracePeriodSeconds"] = value
    return f"grace:{value!r}"


def kind_change(rng: random.Random, doc: Any, box: Box) -> str:
    """Wrap the pod into another kind (or unwrap a template into a pod), another group too."""
    pod = pod_of(box)
    obj = obj_of(box)
    if pod is None or obj is None:
        return "kind:none"
    kind = rng.choice(list(TEMPLATE_PATHS))
    group, version = KIND_GROUPS[kind]
    if rng.random() < 0.15:
        group = rng.choice(["example.com", "apps", "core", "v1", ""])
    meta = m if isinstance(m := pod.get("metadata"), dict) else {}
    outer_meta = o if isinstance(o := obj.get("metadata"), dict) else {}
    template = {"metadata": meta, "spec": pod.get("spec", {})}
    new: dict[str, Any] = {
        "apiVersion": f"{group}/{version}" if group else version,
        "kind": kind,
        "metadata": dict(outer_meta) if kind != "Pod" else meta,
    }
    path = TEMPLATE_PATHS[kind]
    if not path:
        new["spec"] = template["spec"]
        new["metadata"] = dict(outer_meta, **meta)
    else:
        node: Any = new
        for part, after in itertools.pairwise(path):
            empty: Any = [{} for _ in range(after + 1)] if isinstance(after, int) else {}
            if isinstance(part, int):
                node[part] = empty
                node = node[part]
            else:
                node = node.setdefault(part, empty)
        node[path[-1]] = template
    box["object"] = new
    label = f"kind:{kind}:{group or 'core'}"
    if kind in PARTIAL_KINDS and rng.random() < 0.5:
        # A partial template may leave its spec out, or hold it as null.
        if rng.random() < 0.5:
            del template["spec"]
        else:
            template["spec"] = None
        label += ":spec-left-out"
    request_kind = box.get("kind")
    if isinstance(request_kind, dict):
        mismatch = rng.random() < 0.1
        if not mismatch:
            request_kind.update({"group": group, "version": version, "kind": kind})
            resource = box.get("resource")
            if isinstance(resource, dict):
                plural = corpus.RESOURCES.get(kind, (group, kind.lower() + "s"))[1]
                resource.update({"group": group, "version": version, "resource": plural})
        else:
            label += ":request-kind-unchanged"
    if rng.random() < 0.05:
        new.pop("kind")
        label += ":object-kind-missing"
    return label


# Labels operators set on the pods they make from a template (and near misses): the default
# policy gives such pods their template's role or default class.
OPERATOR_LABELS: list[dict[str, str]] = [
    {"leaderworkerset.sigs.k8s.io/name": "llm", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
    {"leaderworkerset.sigs.k8s.io/name": "llm", "leaderworkerset.sigs.k8s.io/worker-index": "1"},
    {"leaderworkerset.sigs.k8s.io/name": ""},
    {"leaderworkerset.sigs.k8s.io/Name": "llm"},
    {"ray.io/node-type": "worker", "ray.io/serve": "true"},
    {"ray.io/node-type": "worker", "ray.io/serve": "True"},
    {"ray.io/node-type": "worker"},
    {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": "ps",
    },
    {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": "PS",
    },
    {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": "master",
    },
    {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-role": "launcher",
    },
    {"training.kubeflow.org/replica-type": "ps"},
]


def operator_labels(rng: random.Random, doc: Any, box: Box) -> str:
    meta = meta_of(box)
    if meta is None:
        return "operator-labels:none"
    i = rng.randrange(len(OPERATOR_LABELS))
    labels = child(meta, "labels")
    labels.update(OPERATOR_LABELS[i])
    extra = ""
    if rng.random() < 0.3:
        child(meta, "annotations")[WORKLOAD] = rng.choice([*CLASSES, "interruptible"])
        extra = "+annotated"
    if rng.random() < 0.5:
        # Spot capacity by another label, every taint tolerated: only its class keeps it off.
        spec = spec_of(box)
        if spec is not None:
            spec["tolerations"] = [{"operator": "Exists"}]
            expr = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["spot"]}
            spec["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [expr]}]}}}  # fmt: skip
            extra += "+spot"
    return f"operator-labels:{i}{extra}"


OBJECT_MUTATORS: list[tuple[ObjectMutator, int]] = [
    (wrong_type, 10),
    (remove_or_null, 6),
    (deep_nesting, 6),
    (huge_list, 4),
    (huge_string, 5),
    (workload_annotations, 12),
    (checkpoint, 6),
    (big_number, 4),
    (lone_surrogate, 4),
    (placement, 14),
    (grace, 4),
    (kind_change, 7),
    (operator_labels, 5),
]


# --- review mutations --------------------------------------------------------------------

ReviewMutator = Callable[[random.Random, dict[str, Any]], str]


def _request(doc: Any) -> dict[str, Any] | None:
    request = doc.get("request") if isinstance(doc, dict) else None
    return request if isinstance(request, dict) else None


OPERATIONS: list[Any] = [
    *["CREATE"] * 4,
    *["UPDATE"] * 3,
    *["DELETE"] * 2,
    "CONNECT",
    "create",
    "PATCH",
    "",
    " CREATE",
    "CREATE\u0000",
    "\u0421REATE",
    None,
    1,
]


def operation(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "operation:none"
    op = rng.choice(OPERATIONS)
    request["operation"] = op
    obj = request.get("object")
    if op == "DELETE" and rng.random() < 0.7:
        request["oldObject"], request["object"] = obj, None
    elif op == "UPDATE" and rng.random() < 0.7 and isinstance(obj, dict):
        request["oldObject"] = deep_copy(obj)
    elif op == "CONNECT" and rng.random() < 0.5:
        request["object"] = {"kind": "PodExecOptions", "apiVersion": "v1", "command": ["sh"]}
        request["subResource"] = "exec"
    return f"operation:{op!r}"


def user_info(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "user:none"
    choice = rng.choice(
        [
            "missing",
            "null",
            "string",
            "list",
            "username-number",
            "groups-string",
            "groups-mixed",
            "daemonset",
            "daemonset-claim",
            "node",
            "node-no-group",
            "group-only",
            "anonymous",
        ]
    )
    obj: Any = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if choice == "missing":
        request.pop("userInfo", None)
    elif choice == "null":
        request["userInfo"] = None
    elif choice == "string":
        request["userInfo"] = "system:admin"
    elif choice == "list":
        request["userInfo"] = [{"username": "alice"}]
    elif choice == "username-number":
        request["userInfo"] = {"username": 42, "groups": []}
    elif choice == "groups-string":
        request["userInfo"] = {"username": "alice", "groups": "system:nodes"}
    elif choice == "groups-mixed":
        request["userInfo"] = {"username": "alice", "groups": ["system:nodes", 1, None]}
    elif choice in ("daemonset", "daemonset-claim"):
        user = rng.choice(DAEMONSET_CONTROLLERS) if choice == "daemonset" else "alice"
        request["userInfo"] = {"username": user, "groups": ["system:authenticated"]}
        if isinstance(meta, dict):
            meta["ownerReferences"] = [
                {
                    "apiVersion": rng.choice(["apps/v1", "apps/v1", "extensions/v1beta1", 1]),
                    "kind": "DaemonSet",
                    "name": "agent",
                    "uid": "d-1",
                    "controller": rng.choice([True, True, False, "true", None]),
                }
            ]
    elif choice in ("node", "node-no-group", "group-only"):
        user = "system:node:gpu-1" if choice != "group-only" else "alice"
        groups = ["system:nodes", "system:authenticated"] if choice != "node-no-group" else []
        request["userInfo"] = {"username": user, "groups": groups}
        if isinstance(meta, dict) and rng.random() < 0.8:
            child(meta, "annotations")[MIRROR] = "abc123"
    else:
        request["userInfo"] = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    if rng.random() < 0.3 and isinstance(meta, dict):
        child(meta, "annotations")[WORKLOAD] = rng.choice(STANDARD_CLASSES)
        child(obj, "spec")["nodeSelector"] = {KEY: "preemptible"}
    return f"user:{choice}"


def subresource(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "subresource:none"
    value: Any = rng.choice(
        ["status", "binding", "eviction", "ephemeralcontainers", "exec", "", None, 5, ["status"]]
    )
    request["subResource"] = value
    return f"subresource:{value!r}"


def dry_run(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "dryrun:none"
    value: Any = rng.choice([True, False, None, "true", 1, [], "missing"])
    if value == "missing":
        request.pop("dryRun", None)
    else:
        request["dryRun"] = value
    return f"dryrun:{value!r}"


def old_object(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "old:none"
    obj = request.get("object")
    choice = rng.choice(
        ["absent", "null", "same", "same", "changed", "changed", "other-kind", "string", "list"]
        + ["deleting"] * 2
        + ["relabelled"] * 2
    )
    if choice == "absent":
        request.pop("oldObject", None)
    elif choice == "null":
        request["oldObject"] = None
    elif choice == "same":
        request["oldObject"] = deep_copy(obj)
    elif choice == "changed" and isinstance(obj, dict):
        old = deep_copy(obj)
        placement(rng, None, {"object": old})
        request["oldObject"] = old
    elif choice == "other-kind":
        request["oldObject"] = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}}
    elif choice == "string":
        request["oldObject"] = "pod"
    elif choice == "list":
        request["oldObject"] = [obj]
    elif choice == "relabelled" and isinstance(obj, dict):
        # What the object was before its labels and annotations gave it its class.
        old = deep_copy(obj)
        meta = child(old, "metadata")
        for key in ("labels", "annotations", "ownerReferences"):
            meta.pop(key, None)
        request["oldObject"] = old
    elif choice == "deleting" and isinstance(obj, dict):
        request["oldObject"] = deep_copy(obj)
        child(obj, "metadata")["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if rng.random() < 0.4:
        request["operation"] = "UPDATE"
        choice += "+UPDATE"
    return f"old:{choice}"


def api_version(rng: random.Random, doc: dict[str, Any]) -> str:
    choice: tuple[str, Any] = rng.choice(
        [
            *[("apiVersion", "admission.k8s.io/v1beta1")] * 6,
            *[("apiVersion", "admission.k8s.io/v1")] * 2,
            ("apiVersion", "admission.k8s.io/v2"),
            ("apiVersion", "v1"),
            ("apiVersion", ""),
            ("apiVersion", None),
            ("apiVersion", 1),
            ("apiVersion", "ADMISSION.K8S.IO/V1"),
            ("kind", "AdmissionReviewList"),
            ("kind", "admissionreview"),
            ("kind", None),
            ("kind", "Pod"),
            ("request", None),
            ("request", []),
            ("response", {"uid": "x", "allowed": True}),
        ]
    )
    key, value = choice
    if value is None and rng.random() < 0.5:
        doc.pop(key, None)
        return f"envelope:remove:{key}"
    doc[key] = value
    return f"envelope:{key}={value!r}"


def uid(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "uid:none"
    value: Any = rng.choice(
        ["missing", "", 0, None, ["a"], {}, "x" * 100_000, " ", "\u00fcid", "a\nb"]
    )
    if value == "missing":
        request.pop("uid", None)
    else:
        request["uid"] = value
    return f"uid:{str(value)[:12]!r}"


def namespace(rng: random.Random, doc: dict[str, Any]) -> str:
    request = _request(doc)
    if request is None:
        return "namespace:none"
    choice = rng.choice(
        [
            *corpus.EXCLUDED_NAMESPACES,
            *corpus.NAMESPACE_DEFAULTS,
            "",
            None,
            7,
            "missing",
            "object-only",
            "object-differs",
        ]
    )
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if choice == "missing":
        request.pop("namespace", None)
    elif choice == "object-only":
        request.pop("namespace", None)
        if isinstance(meta, dict):
            meta["namespace"] = rng.choice([*corpus.EXCLUDED_NAMESPACES, "inference"])
    elif choice == "object-differs":
        request["namespace"] = rng.choice(["team-a", "inference"])
        if isinstance(meta, dict):
            meta["namespace"] = rng.choice(corpus.EXCLUDED_NAMESPACES)
    else:
        request["namespace"] = choice
        if isinstance(meta, dict) and isinstance(choice, str) and rng.random() < 0.7:
            meta["namespace"] = choice
    return f"namespace:{choice!r}"


def duplicate_keys(rng: random.Random, doc: dict[str, Any]) -> str:
    """An object written with one key twice; readers keep the last."""
    request = _request(doc)
    candidates: list[tuple[Any, Any, str]] = []  # (parent, key in parent, label)
    if request is not None:
        candidates.append((doc, "request", "request"))
        obj = request.get("object")
        if isinstance(obj, dict):
            box = {"object": obj}
            meta = meta_of(box)
            spec = spec_of(box)
            if meta is not None:
                candidates.append((meta, "annotations", "annotations"))
            if spec is not None:
                candidates.append((spec, "nodeSelector", "nodeSelector"))
    if not candidates:
        return "duplicate:none"
    parent, key, label = rng.choice(candidates)
    target = parent.get(key)
    if not isinstance(target, dict):
        target = parent[key] = {}
    pairs = list(target.items())
    if label == "annotations":
        first, last = rng.sample([*CLASSES, "bogus"], 2)
        pairs = [(WORKLOAD, first), *pairs, (WORKLOAD, last)]
    elif label == "nodeSelector":
        first, last = rng.sample(["preemptible", "standard", ""], 2)
        pairs = [(KEY, first), *pairs, (KEY, last)]
    elif pairs:
        name, value = rng.choice(pairs)
        other = odd_value(rng, value) if rng.random() < 0.5 else value
        where = rng.randrange(len(pairs) + 1)
        pairs.insert(where, (name, other))
    else:
        pairs = [("a", 1), ("a", 2)]
    parent[key] = DupKeys(pairs)
    return f"duplicate:{label}"


def duplicate_root(rng: random.Random, doc: dict[str, Any]) -> DupKeys:
    """The whole review with one of its top-level keys written twice."""
    pairs = list(doc.items())
    name = rng.choice(["apiVersion", "kind", "request"])
    other = rng.choice(["admission.k8s.io/v1", "AdmissionReview", None, {"uid": ""}, 1])
    pairs.insert(rng.randrange(len(pairs) + 1), (name, other))
    return DupKeys(pairs)


REVIEW_MUTATORS: list[tuple[ReviewMutator, int]] = [
    (operation, 6),
    (user_info, 6),
    (subresource, 3),
    (dry_run, 3),
    (old_object, 4),
    (api_version, 3),
    (uid, 3),
    (namespace, 7),
]

# Review mutations that leave the object alone (bulk reviews share theirs).
BULK_MUTATORS: list[tuple[ReviewMutator, int]] = [
    (subresource, 1),
    (dry_run, 1),
    (api_version, 1),
    (uid, 1),
]

# Text-level changes of a body; each takes and returns bytes.
BODY_MUTATORS: list[tuple[str, Callable[[random.Random, bytes], bytes]]] = [
    ("empty", lambda rng, b: b""),
    ("null", lambda rng, b: b"null"),
    ("array", lambda rng, b: b"[" + b + b"]"),
    ("number", lambda rng, b: b"12"),
    ("truncated", lambda rng, b: b[: rng.randrange(max(1, len(b)))]),
    ("trailing-garbage", lambda rng, b: b + rng.choice([b"x", b"}", b",", b"\x00"])),
    ("trailing-whitespace", lambda rng, b: b" \n\t" + b + b"\r\n "),
    ("bom", lambda rng, b: b"\xef\xbb\xbf" + b),
    ("latin-1", lambda rng, b: b.replace(b'"uid":"', b'"uid":"\xe9', 1)),
    ("raw-surrogate", lambda rng, b: b.replace(b'"uid":"', b'"uid":"\xed\xa0\x80', 1)),
    ("invalid-byte", lambda rng, b: _insert(rng, b, b"\xff")),
    ("control-char", lambda rng, b: b.replace(b'"uid":"', b'"uid":"\x01', 1)),
    ("single-quotes", lambda rng, b: b.replace(b'"', b"'", 4)),
    ("trailing-comma", lambda rng, b: b[:-1] + b",}" if b.endswith(b"}") else b),
    ("utf16", lambda rng, b: b.decode("ascii", "replace").encode("utf-16")),
]


def _insert(rng: random.Random, body: bytes, piece: bytes) -> bytes:
    at = rng.randrange(len(body) + 1)
    return body[:at] + piece + body[at:]


# /mutate does more (patches, follow-ups): it gets more of the cases.
HOOKS = ["mutate", "mutate", "validate"]

# Reviews of a full-size adversarial pod: slow to build and to answer, so a few per thousand.
BULK_SHARE = 0.002

CONTENT_TYPES = [
    ("application/json", 96),
    ("application/json; charset=utf-8", 2),
    ("text/plain", 1),
    ("", 1),
]


def _weighted(rng: random.Random, options: list[tuple[Any, int]]) -> Any:
    return rng.choices([o for o, _ in options], weights=[w for _, w in options])[0]


BULK_TARGETS = (600 * 1024, 1024 * 1024, 2 * 1024 * 1024, adversarial.TARGET)


@functools.lru_cache(maxsize=6)
def _bulk_review(name: str, target: int) -> dict[str, Any]:
    builder = adversarial.SLOW_PODS[name]
    pod = builder() if name.startswith("deep") else builder(target)
    fields = pod["metadata"].get("managedFields")
    if fields is not None:  # deep: written once here rather than piece by piece later
        pod["metadata"]["managedFields"] = Raw(adversarial.encode(fields).decode())
    return corpus.review_for(pod, namespace="team-a")


def bulk(rng: random.Random) -> tuple[dict[str, Any], str]:
    """A review of an adversarial pod of 0.6 to 3 MiB, as large as the API server accepts.

    Built once per size and shared: only the envelope (``BULK_MUTATORS``) is changed, never
    the object.
    """
    name = rng.choice(sorted(adversarial.SLOW_PODS))
    target = rng.choice(BULK_TARGETS)
    review = _bulk_review(name, target)
    doc = dict(review, request=dict(review["request"]))
    return doc, f"bulk:{name}:{target // 1024}KiB"


def review_case(seed: int, index: int) -> Case:
    """Case ``index`` of the run with ``seed``: the same bytes every time."""
    rng = random.Random(f"review:{seed}:{index}")
    origin = rng.choice(corpus.seeds())
    mutations: list[str] = []
    if rng.random() < BULK_SHARE:
        doc, label = bulk(rng)
        origin_name, hook = label, rng.choice(["mutate", "validate"])
        mutations.append(label)
    else:
        doc = origin.copy()
        origin_name = origin.name
        hook = origin.hook if origin.hook and rng.random() < 0.7 else rng.choice(HOOKS)
    request = _request(doc)
    if request is not None:
        request["uid"] = f"fuzz-{seed}-{index}"
    if not mutations and request is not None and rng.random() < 0.35:
        meta = meta_of(request)
        if meta is not None:
            name = rng.choice(CLASSES)
            child(meta, "annotations")[WORKLOAD] = name
            mutations.append(f"class:{name}")
    count = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4, 5])
    if mutations and mutations[0].startswith(
        "bulk"
    ):  # a bulk review: its shared object stays as it is
        for _ in range(count // 2):
            mutations.append(_weighted(rng, BULK_MUTATORS)(rng, doc))
        count = 0
    for _ in range(count):
        request = _request(doc)
        if rng.random() < 0.7 and request is not None:
            mutate_object = _weighted(rng, OBJECT_MUTATORS)
            mutations.append(mutate_object(rng, doc, request))
        else:
            mutate_review = _weighted(rng, REVIEW_MUTATORS)
            mutations.append(mutate_review(rng, doc))
    if rng.random() < 0.04:
        mutations.append(duplicate_keys(rng, doc))
    root: dict[str, Any] | DupKeys = doc
    if rng.random() < 0.01:
        root = duplicate_root(rng, doc)
        mutations.append("duplicate:root")
    body = dumps(root).encode("ascii")
    if rng.random() < 0.04:
        name, change = rng.choice(BODY_MUTATORS)
        body = change(rng, body)
        mutations.append(f"body:{name}")
    content_type = _weighted(rng, CONTENT_TYPES)
    if content_type != "application/json":
        mutations.append(f"content-type:{content_type!r}")
    return Case(
        seed,
        index,
        origin_name,
        hook,
        body,
        content_type,
        mutations,
        warn_mode=rng.random() < 0.1,
    )


# --- manifests for the CLI ---------------------------------------------------------------


@dataclass
class ManifestCase:
    """Files to give ``preemptguard`` and the command to run on them."""

    seed: int
    index: int
    files: dict[str, bytes]
    args: list[str]
    stdin: bytes | None = None
    mutations: list[str] = field(default_factory=list)
    # The objects as written, when the file reads back as exactly these (no text mutation).
    objects: list[Any] | None = None

    @property
    def ref(self) -> str:
        return f"seed {self.seed} cli-case {self.index}"


def _manifest_objects(rng: random.Random) -> list[dict[str, Any]]:
    pool: list[dict[str, Any]] = [obj for _, obj in corpus.example_objects()]
    for _, review in corpus.recorded_reviews():
        obj = review["request"].get("object")
        if isinstance(obj, dict):
            pool.append(obj)
    count = rng.choice([1, 1, 1, 2, 3, 5])
    objects = [deep_copy(rng.choice(pool)) for _ in range(count)]
    if rng.random() < 0.2:
        objects.append(rng.choice(corpus.namespace_objects()))
    return objects


def _go_dumper() -> Any:
    """PyYAML's safe dumper quoting every string that kubectl's reader (go-yaml) would take
    for something else (y, 0o17, 1e2) as well as those YAML 1.1 would: the text it writes is
    read as the objects it was given, by kubectl and by check alike."""
    import yaml

    from webhook.loading import goyaml

    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    resolvers = {k: list(v) for k, v in base.yaml_implicit_resolvers.items()}
    for tag, pattern, first in goyaml.IMPLICIT:
        for char in first:
            resolvers.setdefault(char, []).append((tag, pattern))
    return type("GoSafeDumper", (base,), {"yaml_implicit_resolvers": resolvers})


_GO_DUMPER = _go_dumper()


def _yaml_text(rng: random.Random, docs: list[Any]) -> str:
    import yaml

    parts = []
    for doc in docs:
        try:
            if rng.random() < 0.7:
                parts.append(yaml.dump(doc, Dumper=_GO_DUMPER, allow_unicode=rng.random() < 0.5))
                continue
        except (yaml.YAMLError, RecursionError, TypeError, ValueError):
            pass
        parts.append(dumps(doc) + "\n")  # JSON is YAML's flow style
    return "---\n".join(parts)


YAML_BREAKERS: list[tuple[str, Callable[[random.Random, str], str]]] = [
    ("tab-indent", lambda rng, t: t.replace("\n  ", "\n\t", 1)),
    ("unclosed-flow", lambda rng, t: t + "\nextra: [a, b\n"),
    ("bad-mapping", lambda rng, t: t.replace(":", ": :", 1)),
    ("duplicate-key", lambda rng, t: t.replace("kind:", "kind: Pod\nkind:", 1)),
    (
        "huge-int",
        lambda rng, t: t.replace("metadata:", "generation: " + "9" * 5000 + "\nmetadata:", 1),
    ),
    (
        "billion-laughs",
        lambda rng, t: (
            'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
            "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
            "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
            "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
            "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
            "apiVersion: v1\nkind: Pod\n"
        ),
    ),
    ("recursive-alias", lambda rng, t: "a: &a [*a]\napiVersion: v1\nkind: Pod\n"),
    ("python-tag", lambda rng, t: "apiVersion: v1\nkind: !!python/object/apply:os.system [true]\n"),
    ("scalar-doc", lambda rng, t: t + "---\njust a string\n"),
    ("list-doc", lambda rng, t: t + "---\n- a\n- b\n"),
    ("empty-docs", lambda rng, t: "---\n---\n" + t + "---\n"),
    ("nul-byte", lambda rng, t: t.replace("name", "na\x00me", 1)),
    (
        "deep-flow",
        lambda rng, t: t + "---\napiVersion: v1\nkind: Pod\nx: " + "[" * 5000 + "]" * 5000 + "\n",
    ),
    (
        "kind-list",
        lambda rng, t: "apiVersion: v1\nkind: List\nitems:\n- 1\n- apiVersion: v1\n  kind: Pod\n",
    ),
    (
        "merge-key",
        lambda rng, t: "base: &b {kind: Pod}\napiVersion: v1\n<<: *b\nmetadata: {name: m}\n",
    ),
    ("long-line", lambda rng, t: t.replace("name:", "name: " + "n" * 200_000 + "\n  x:", 1)),
    ("anchor-dup", lambda rng, t: "apiVersion: v1\nkind: Pod\nmetadata: &m {name: a}\nspec: *m\n"),
]
BYTE_BREAKERS: list[tuple[str, Callable[[random.Random, bytes], bytes]]] = [
    ("latin-1", lambda rng, b: b.replace(b"name", b"n\xe9me", 1)),
    ("invalid-byte", lambda rng, b: _insert(rng, b, b"\xff\xfe")),
    ("raw-surrogate", lambda rng, b: _insert(rng, b, b"\xed\xa0\x80")),
    ("bom", lambda rng, b: b"\xef\xbb\xbf" + b),
    ("utf16", lambda rng, b: b.decode("utf-8", "replace").encode("utf-16")),
    ("truncated", lambda rng, b: b[: rng.randrange(max(1, len(b)))]),
    ("empty", lambda rng, b: b""),
]
JSON_BREAKERS: list[tuple[str, Callable[[random.Random, str], str]]] = [
    ("truncated", lambda rng, t: t[: rng.randrange(max(1, len(t)))]),
    ("trailing-comma", lambda rng, t: t[:-1] + ",}" if t.endswith("}") else t),
    ("two-documents", lambda rng, t: t + "\n" + t),
    ("nan", lambda rng, t: t.replace('"metadata":', '"x":NaN,"metadata":', 1)),
    ("duplicate-key", lambda rng, t: t.replace('"kind":', '"kind":"Pod","kind":', 1)),
    ("huge-int", lambda rng, t: t.replace('"metadata":', '"g":' + "9" * 5000 + ',"metadata":', 1)),
    (
        "deep",
        lambda rng, t: t.replace(
            '"metadata":', '"x":' + "[" * 12000 + "]" * 12000 + ',"metadata":', 1
        ),
    ),
    ("not-object", lambda rng, t: rng.choice(["[1,2]", '"pod"', "null", "3"])),
]


def manifest_case(seed: int, index: int) -> ManifestCase:
    """CLI case ``index`` of the run with ``seed``: manifests written as YAML or JSON, mutated."""
    rng = random.Random(f"cli:{seed}:{index}")
    objects = _manifest_objects(rng)
    mutations: list[str] = []
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        i = rng.randrange(len(objects))
        box: Box = {"object": objects[i]}
        mutate = _weighted(rng, OBJECT_MUTATORS)
        if mutate is huge_list:
            mutations.append(huge_list(rng, box["object"], box, scale=0.5))
        else:
            mutations.append(mutate(rng, box["object"], box))
        objects[i] = box["object"]
    if rng.random() < 0.05:
        box = {"object": objects[0]}
        meta = meta_of(box)
        if meta is not None:
            annotations_map = meta.get("annotations")
            pairs = list(annotations_map.items()) if isinstance(annotations_map, dict) else []
            meta["annotations"] = DupKeys(
                [(WORKLOAD, "interruptible"), *pairs, (WORKLOAD, "serving")]
            )
            mutations.append("duplicate:annotations")
    as_json = rng.random() < 0.4
    if as_json:
        doc: Any = (
            objects[0]
            if len(objects) == 1
            else {"apiVersion": "v1", "kind": "List", "items": objects}
        )
        text = dumps(doc)
        if rng.random() < 0.15:
            name, breaker = rng.choice(JSON_BREAKERS)
            text = breaker(rng, text)
            mutations.append(f"json:{name}")
        filename = "manifest.json"
    else:
        text = _yaml_text(rng, objects)
        if rng.random() < 0.15:
            name, yaml_breaker = rng.choice(YAML_BREAKERS)
            text = yaml_breaker(rng, text)
            mutations.append(f"yaml:{name}")
        filename = rng.choice(["manifest.yaml", "manifest.yml"])
    data = text.encode("utf-8", "surrogatepass")
    exact = not any(m.split(":")[0] in ("json", "yaml", "duplicate") for m in mutations)
    if rng.random() < 0.05:
        exact = False
        name, byte_breaker = rng.choice(BYTE_BREAKERS)
        data = byte_breaker(rng, data)
        mutations.append(f"bytes:{name}")
    command = rng.choice(
        [
            ["check", "-o", "json"],
            ["check", "-o", "json"],
            ["check", "-o", "text"],
            ["check"],
            ["explain"],
        ]
    )
    if rng.random() < 0.1:
        # An AdmissionReview, which check answers as the server would.
        review = review_case(seed, 1_000_000 + index)
        filename = rng.choice(["review.json", "review.json", "review.yaml"])
        data = review.body
        mutations = [f"review:{m}" for m in review.mutations] or ["review"]
        exact = False
    files = {filename: data}
    stdin = None
    source = rng.random()
    if source < 0.1:
        args = [*command, "-f", "-"]
        stdin, files = data, {}
    elif source < 0.2:
        files["extra.yaml"] = _yaml_text(rng, [rng.choice(corpus.namespace_objects())]).encode()
        args = [*command, "-f", "."]
    else:
        args = [*command, "-f", filename]
    if rng.random() < 0.1:
        args += ["-n", rng.choice(["kube-system", "inference", "", "x" * 300, "sweeps"])]
    return ManifestCase(seed, index, files, args, stdin, mutations, objects if exact else None)
