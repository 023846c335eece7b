"""Generated pod specs: the engine never crashes, is idempotent, and keeps its placement promises.

Node matching and toleration here are written independently of the engine, from the
Kubernetes scheduler's rules, so the engine is not checked against itself.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.decision import Context
from webhook.engine.evaluation import evaluate
from webhook.engine.patch import apply_patch, make_patch
from webhook.loading.policies import builtin_policy

POLICY = builtin_policy()
KEY = "together.ai/compute-class"
ZONE = "topology.kubernetes.io/zone"
CLASS_VALUES = [None, "preemptible", "standard", "other", "7", "07", "1_0"]
ZONE_VALUES = [None, "a", "b"]
STANDARD_CLASSES = {"coordinator", "login", "serving"}

junk = st.one_of(
    st.none(), st.integers(-5, 5), st.text(max_size=3), st.lists(st.none(), max_size=1)
)
# Numbers as the scheduler reads them (Go's ParseInt): "07" and "+7" are 7; "1_0" and "٣"
# are no numbers, though Python's int() reads them.
label_value = st.sampled_from(["preemptible", "standard", "other", "7", "a", "b", "07", "1_0", "٣"])
bound = st.one_of(st.integers(0, 10).map(str), st.sampled_from(["+3", "08", "1_0", "٣", " 4"]))


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    expr: dict[str, Any] = {"key": draw(st.sampled_from([KEY, ZONE])), "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(st.lists(label_value, min_size=1, max_size=3))
    elif op in ("Gt", "Lt"):
        expr["values"] = [draw(bound)]
    return expr


terms = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.lists(expressions(), max_size=3),
        "matchFields": st.just([{"key": "metadata.name", "operator": "In", "values": ["n1"]}]),
    },
)
node_affinity = st.fixed_dictionaries(
    {},
    optional={
        "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
            {"nodeSelectorTerms": st.lists(terms, max_size=3)}
        ),
        "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
            st.fixed_dictionaries({"weight": st.integers(1, 100), "preference": terms}), max_size=2
        ),
    },
)
tolerations = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.sampled_from(["", KEY, "other"]),
            "operator": st.sampled_from(["Exists", "Equal"]),
            "value": st.sampled_from(["", "preemptible", "standard"]),
            "effect": st.sampled_from(["", "NoSchedule", "NoExecute", "PreferNoSchedule"]),
        },
    ),
    max_size=3,
)
pod_annotations = st.fixed_dictionaries(
    {},
    optional={
        "together.ai/workload": st.sampled_from([*POLICY.classes, "bogus"]),
        "together.ai/checkpoint-seconds": st.one_of(
            st.integers(0, 400).map(str), st.sampled_from(["x", "-1", ""])
        ),
    },
)
specs = st.fixed_dictionaries(
    {"containers": st.just([{"name": "c", "image": "busybox"}])},
    optional={
        "nodeSelector": st.dictionaries(st.sampled_from([KEY, ZONE]), label_value, max_size=2),
        "affinity": st.fixed_dictionaries({}, optional={"nodeAffinity": node_affinity}),
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": st.integers(0, 1000),
    },
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    meta = {"name": "p", "namespace": "team-a", "annotations": draw(pod_annotations)}
    meta["labels"] = draw(
        st.sampled_from(
            [{}, {"ray.io/node-type": "head"}, {"app.kubernetes.io/component": "login"}]
        )
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": draw(specs)}


@st.composite
def junk_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods with anything where a mapping or list is expected."""
    spec = draw(
        st.one_of(
            junk,
            st.fixed_dictionaries(
                {},
                optional=dict.fromkeys(
                    ("nodeSelector", "affinity", "tolerations", "terminationGracePeriodSeconds"),
                    junk,
                ),
            ),
        )
    )
    meta = draw(
        st.one_of(
            junk,
            st.fixed_dictionaries(
                {},
                optional={
                    "annotations": st.one_of(junk, pod_annotations),
                    "labels": junk,
                    "ownerReferences": junk,
                },
            ),
        )
    )
    return {
        "apiVersion": "v1",
        "kind": draw(st.sampled_from(["Pod", "Job", "CronJob"])),
        "metadata": meta,
        "spec": spec,
    }


CTX = Context(namespace="team-a", namespace_annotations={})
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def node_matches(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """The scheduler's NodeAffinity filter: nodeSelector AND any required term."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    # A term with neither expressions nor fields matches no node; matchFields names nodes,
    # which any of these label sets may be.
    return any(
        bool(t.get("matchExpressions") or t.get("matchFields"))
        and all(_expr_matches(e, labels) for e in t.get("matchExpressions") or [])
        for t in required["nodeSelectorTerms"]
    )


def _expr_matches(e: dict[str, Any], labels: dict[str, str]) -> bool:
    value = labels.get(e["key"])
    op, values = e["operator"], e.get("values", [])
    if op in ("Gt", "Lt"):
        number, limit = _go_int(value), _go_int(values[0])
        if number is None or limit is None:
            return False
        return number > limit if op == "Gt" else number < limit
    return {
        "In": value is not None and value in values,
        "NotIn": value is None or value not in values,
        "Exists": value is not None,
        "DoesNotExist": value is None,
    }[op]


def _go_int(text: str | None) -> int | None:
    """strconv.ParseInt(text, 10, 64), as the scheduler reads label values and bounds."""
    if text is None or not re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def nodes(classes: list[str | None]) -> list[dict[str, str]]:
    out = []
    for cls, zone in itertools.product(classes, ZONE_VALUES):
        out.append({k: v for k, v in ((KEY, cls), (ZONE, zone)) if v is not None})
    return out


def tolerates_preemptible_taint(spec: dict[str, Any]) -> bool:
    for t in spec.get("tolerations") or []:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        if t.get("operator") == "Exists" and t.get("key", "") in ("", KEY):
            return True
        if (
            t.get("operator", "Equal") == "Equal"
            and t.get("key") == KEY
            and t.get("value") == "preemptible"
        ):
            return True
    return False


@SETTINGS
@given(junk_pods())
def test_never_crashes_on_junk(obj: dict[str, Any]) -> None:
    decision = evaluate(obj, POLICY, CTX)
    assert isinstance(decision.allowed, bool)
    assert all(isinstance(v, str) and v for v in decision.violations)


@SETTINGS
@given(pods())
def test_mutation_is_idempotent_and_the_patch_reproduces_it(obj: dict[str, Any]) -> None:
    first = evaluate(obj, POLICY, CTX)
    patch = make_patch(obj, first.mutated)
    assert apply_patch(obj, patch) == first.mutated
    # The same object as a full structural diff makes (the engine's diff skips shared subtrees).
    assert apply_patch(obj, patch) == apply_patch(
        obj, jsonpatch.make_patch(obj, first.mutated).patch
    )
    second = evaluate(first.mutated, POLICY, CTX)
    assert make_patch(first.mutated, second.mutated) == []
    assert second.allowed == first.allowed


@SETTINGS
@given(pods())
def test_interruptible_pods_tolerate_and_require_preemptible(obj: dict[str, Any]) -> None:
    decision = evaluate(obj, POLICY, CTX)
    if decision.workload_class != "interruptible" or not decision.allowed:
        return
    spec = decision.mutated["spec"]
    assert tolerates_preemptible_taint(spec)
    assert not any(
        node_matches(spec, n) for n in nodes([None, "standard", "other", "7", "07", "1_0"])
    )
    assert any(node_matches(spec, n) for n in nodes(["preemptible"])) or _other_keys_conflict(obj)


@SETTINGS
@given(pods())
def test_standard_only_pods_never_fit_a_preemptible_node(obj: dict[str, Any]) -> None:
    decision = evaluate(obj, POLICY, CTX)
    if decision.workload_class not in STANDARD_CLASSES or not decision.allowed:
        return
    assert not any(node_matches(decision.mutated["spec"], n) for n in nodes(["preemptible"]))


@SETTINGS
@given(pods())
def test_refused_pods_are_not_mutated(obj: dict[str, Any]) -> None:
    decision = evaluate(obj, POLICY, CTX)
    if decision.enforce_refuses:
        assert decision.mutated == obj
        assert decision.changes == ()


def _other_keys_conflict(obj: dict[str, Any]) -> bool:
    """The user's own zone constraints may leave no node at all; that is theirs to keep."""
    spec = obj["spec"]
    return not any(node_matches(spec, n) for n in nodes(CLASS_VALUES))
