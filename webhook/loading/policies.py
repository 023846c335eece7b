"""Read and check PlacementPolicy files; a bad file is refused with its file, line and field."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.engine.policy import (
    EVERY_ITEM,
    EVERY_VALUE,
    FirstPod,
    LabelRequirement,
    Match,
    Mode,
    NodeLabel,
    Placement,
    PodSelector,
    Policy,
    Rule,
    Taint,
    TemplateSpec,
    TrustedRequesters,
    WorkloadClass,
    WorkloadKind,
)
from webhook.engine.workloads import parse_path
from webhook.errors import PolicyError

if TYPE_CHECKING:
    import jsonschema

from webhook.loading.yamlnodes import Located, compose_documents, problem_line

POLICY_KIND = "PlacementPolicy"
POLICY_API_VERSION = "preemptguard.together.ai/v1alpha1"


@cache
def policy_schema() -> dict[str, Any]:
    """The JSON Schema of the policy format (also usable by editors)."""
    text = resources.files("webhook").joinpath("data/placementpolicy.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def builtin_policy() -> Policy:
    """The default policy shipped with the package (read once; a Policy is immutable).

    Its schema is checked by the test suite, not on every start: the check costs more than
    the rest of a small `preemptguard check` together.
    """
    ref = resources.files("webhook").joinpath("data/default-policy.yaml")
    source = "<built-in default policy>"
    docs = [d for d in _documents(ref.read_text(), source) if d.value is not None]
    return _build(docs[0], source, check_schema=False)


def policy_files(directory: Path) -> list[Path]:
    """The YAML files of a policy directory (its top level; test cases live below it)."""
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_policy(directory: Path) -> Policy:
    """The one PlacementPolicy kept in ``directory`` (or in the file ``directory``)."""
    if directory.is_file():
        return parse_policy(_read(directory), source=str(directory))
    if not directory.is_dir():
        raise PolicyError(str(directory), None, "", "no such policy file or directory")
    found = [
        (path, doc)
        for path in policy_files(directory)
        for doc in _documents(_read(path), str(path))
        if isinstance(doc.value, Mapping) and doc.value.get("kind") == POLICY_KIND
    ]
    if len(found) != 1:
        names = ", ".join(str(p) for p, _ in found) or "none"
        raise PolicyError(
            str(directory), None, "", f"expected exactly one {POLICY_KIND} document, found {names}"
        )
    path, doc = found[0]
    return _build(doc, str(path))


def parse_policy(text: str, *, source: str) -> Policy:
    """The policy in a single-document YAML text."""
    docs = [d for d in _documents(text, source) if d.value is not None]
    if len(docs) != 1:
        raise PolicyError(source, None, "", f"expected one YAML document, found {len(docs)}")
    return _build(docs[0], source)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(str(path), None, "", f"cannot read: {exc}") from exc


def _documents(text: str, source: str) -> list[Located]:
    try:
        return compose_documents(text)
    except yaml.YAMLError as exc:
        detail = str(getattr(exc, "problem", None) or exc)
        raise PolicyError(source, problem_line(exc), "", f"not valid YAML: {detail}") from exc
    except RecursionError as exc:
        raise PolicyError(source, None, "", "not usable YAML: nested too deeply") from exc


def _build(doc: Located, source: str, *, check_schema: bool = True) -> Policy:
    if check_schema:
        _check_schema(doc, source)
    spec = doc.value["spec"]
    classes = _classes(doc, source)
    rules = _rules(doc, source, classes)
    default = spec.get("defaultClass")
    if default is not None and default not in classes:
        _unknown_class(doc, source, ("spec", "defaultClass"), default, classes)
    _check_grace(doc, source)
    return Policy(
        name=doc.value["metadata"]["name"],
        mode=Mode(spec.get("mode", "enforce")),
        node_label=_node_label(spec.get("nodeLabel", {})),
        taint=_taint(spec["preemptibleTaint"]) if "preemptibleTaint" in spec else Taint(),
        max_grace_seconds=spec.get("gracePeriod", {}).get("maxSeconds", 300),
        checkpoint_margin_seconds=spec.get("gracePeriod", {}).get("checkpointMarginSeconds", 30),
        preferred_weight=spec.get("preferredAffinityWeight", 100),
        classes=classes,
        rules=rules,
        excluded_namespaces=tuple(
            spec.get("excludedNamespaces", ("kube-system", "kube-node-lease"))
        ),
        reserved_priority_classes=_reserved(doc, source),
        default_class=default,
        trusted=_trusted(spec.get("trustedRequesters", {})),
        workload_kinds=_workload_kinds(doc, source, classes),
    )


def _workload_kinds(
    doc: Located, source: str, classes: Mapping[str, WorkloadClass]
) -> dict[tuple[str, str], WorkloadKind]:
    """``spec.workloadKinds``, checked beyond the schema: paths, classes, repeats."""
    kinds: dict[tuple[str, str], WorkloadKind] = {}
    for i, raw in enumerate(doc.value["spec"].get("workloadKinds", [])):
        at = ("spec", "workloadKinds", i)
        key = (raw["group"], raw["kind"])
        if key in kinds or key == ("", "Pod"):
            why = "Pods are built in" if key == ("", "Pod") else "listed twice"
            raise PolicyError(source, doc.line_of(at), _dotted(at), f"{raw['kind']}: {why}")
        if "ignore" not in raw and not raw.get("templates"):
            message = (
                "list the paths of its pod templates (templates), or why it is left alone (ignore)"
            )
            raise PolicyError(source, doc.line_of(at), _dotted(at), message)
        templates = tuple(
            _template(doc, source, classes, (*at, "templates", j), t)
            for j, t in enumerate(raw.get("templates", []))
        )
        kinds[key] = WorkloadKind(
            group=raw["group"],
            kind=raw["kind"],
            templates=templates,
            pod_owner_kind=raw.get("podOwnerKind"),
            ignore=raw.get("ignore"),
            resource=raw.get("resource", ""),
            cluster_scoped=raw.get("scope", "Namespaced") == "Cluster",
        )
    return kinds


def _template(
    doc: Located,
    source: str,
    classes: Mapping[str, WorkloadClass],
    at: tuple[str | int, ...],
    raw: Mapping[str, Any],
) -> TemplateSpec:
    try:
        path = parse_path(raw["path"])
    except ValueError as exc:
        raise PolicyError(
            source, doc.line_of((*at, "path")), _dotted((*at, "path")), str(exc)
        ) from None
    default = raw.get("defaultClass")
    if default is not None and default not in classes:
        _unknown_class(doc, source, (*at, "defaultClass"), default, classes)
    return TemplateSpec(
        path=path,
        role=raw.get("role", ""),
        default_class=default,
        optional=raw.get("optional", False),
        embedded=raw.get("embedded", False),
        partial=raw.get("partial", False),
        pods=_pods(doc, source, (*at, "podSelector"), raw),
        first_pod=_first_pod(doc, source, (*at, "firstPod"), raw.get("firstPod")),
        pod_failure_policy=_pod_failure_policy(doc, source, at, raw, path),
    )


def _pod_failure_policy(
    doc: Located,
    source: str,
    at: tuple[str | int, ...],
    raw: Mapping[str, Any],
    path: tuple[str, ...],
) -> bool:
    """``podFailurePolicy: true``: the template is a Job spec's, which holds it at ``template``."""
    if not raw.get("podFailurePolicy", False):
        return False
    if path[-1] != "template" or raw.get("embedded", False) or raw.get("partial", False):
        where = (*at, "podFailurePolicy")
        message = (
            "podFailurePolicy is for the pod template of a batch/v1 Job spec, at a path "
            "ending in .template (spec.template, spec.jobTemplate.spec.template), neither "
            "embedded nor partial"
        )
        raise PolicyError(source, doc.line_of(where), _dotted(where), message)
    return True


def _first_pod(
    doc: Located, source: str, at: tuple[str | int, ...], raw: Mapping[str, Any] | None
) -> FirstPod | None:
    if raw is None:
        return None
    unless = []
    for i, text in enumerate(raw.get("unless", [])):
        where = (*at, "unless", i)
        try:
            parts = parse_path(text)
        except ValueError as exc:
            raise PolicyError(source, doc.line_of(where), _dotted(where), str(exc)) from None
        if any(p in (EVERY_ITEM, EVERY_VALUE) for p in parts):
            message = f"{text}: name one field, without [*] or *"
            raise PolicyError(source, doc.line_of(where), _dotted(where), message)
        unless.append(parts)
    return FirstPod(role=raw["role"], unless=tuple(unless))


def _pods(
    doc: Located, source: str, at: tuple[str | int, ...], template: Mapping[str, Any]
) -> PodSelector | None:
    """How a template's pods are known once its operator creates them."""
    raw = template.get("podSelector")
    if raw is None:
        return None
    if template.get("embedded", False):
        message = (
            "an embedded path holds whole objects, each judged by its own kind: drop podSelector"
        )
        raise PolicyError(source, doc.line_of(at), _dotted(at), message)
    _check_selector(doc, source, at, raw)
    try:
        return PodSelector(dict(raw.get("matchLabels", {})), _requirements(raw))
    except ValueError as exc:
        raise PolicyError(source, doc.line_of(at), _dotted(at), str(exc)) from None


def _reserved(doc: Located, source: str) -> dict[str, tuple[str, ...]]:
    """``spec.reservedPriorityClasses``: each class once."""
    found: dict[str, tuple[str, ...]] = {}
    for i, raw in enumerate(doc.value["spec"].get("reservedPriorityClasses", [])):
        if raw["name"] in found:
            at = ("spec", "reservedPriorityClasses", i, "name")
            message = f"{raw['name']}: listed twice; give all its namespaces in one entry"
            raise PolicyError(source, doc.line_of(at), _dotted(at), message)
        found[raw["name"]] = tuple(raw["namespaces"])
    return found


def _trusted(raw: Mapping[str, Any]) -> TrustedRequesters:
    default = TrustedRequesters()
    nodes = raw.get("nodes", {})
    return TrustedRequesters(
        daemonset_controllers=tuple(raw.get("daemonSetControllers", default.daemonset_controllers)),
        node_group=nodes.get("group", default.node_group),
        node_username_prefix=nodes.get("usernamePrefix", default.node_username_prefix),
    )


def _check_grace(doc: Located, source: str) -> None:
    grace = doc.value["spec"].get("gracePeriod", {})
    maximum, margin = grace.get("maxSeconds", 300), grace.get("checkpointMarginSeconds", 30)
    if margin >= maximum:
        path = ("spec", "gracePeriod", "checkpointMarginSeconds")
        message = (
            f"a margin of {margin} s leaves no time for a checkpoint within the {maximum} s "
            "maximum grace period: make it smaller than maxSeconds"
        )
        raise PolicyError(source, doc.line_of(path), _dotted(path), message)


def _check_schema(doc: Located, source: str) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(policy_schema())
    errors = sorted(validator.iter_errors(doc.value), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        first = min(errors, key=lambda e: doc.line_of(_error_path(e)))
        path = _error_path(first)
        raise PolicyError(source, doc.line_of(path), _dotted(path), _schema_message(first))


def _error_path(error: jsonschema.ValidationError) -> list[str | int]:
    """Where the error is; for an unknown field, the field itself rather than its parent."""
    path: list[str | int] = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        extra = sorted(str(k) for k in error.instance if k not in known)
        path += extra[:1]
    return path


def _schema_message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties" and isinstance(error.schema, Mapping):
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        return f"{error.message}; allowed fields: {allowed}"
    if error.validator == "pattern":
        return f"{error.instance!r} is not a valid name here (must match {error.validator_value})"
    if error.validator == "not" and isinstance(error.instance, str):
        return (
            f"{error.instance!r} is a word preemptguard's output uses for itself (no class, "
            "a skipped object, YAML's null and booleans): choose another class name"
        )
    if error.validator == "oneOf" and error.context:
        # The branch that failed on something other than the value's type says what is wrong.
        specific = [e for e in error.context if e.validator != "type"] or list(error.context)
        return _schema_message(min(specific, key=lambda e: len(e.message)))
    return error.message


def _classes(doc: Located, source: str) -> dict[str, WorkloadClass]:
    classes: dict[str, WorkloadClass] = {}
    for i, item in enumerate(doc.value["spec"]["classes"]):
        if item["name"] in classes:
            line = doc.line_of(("spec", "classes", i, "name"))
            raise PolicyError(
                source, line, f"spec.classes[{i}].name", f"duplicate class {item['name']!r}"
            )
        classes[item["name"]] = WorkloadClass(
            item["name"],
            Placement(item["placement"]),
            item.get("description", ""),
            priority_class_name=item.get("priorityClassName"),
            scheduler_name=item.get("schedulerName"),
        )
    return classes


def _rules(doc: Located, source: str, classes: Mapping[str, WorkloadClass]) -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for i, item in enumerate(doc.value["spec"].get("rules", [])):
        if item["class"] not in classes:
            _unknown_class(doc, source, ("spec", "rules", i, "class"), item["class"], classes)
        if any(r.name == item["name"] for r in rules):
            line = doc.line_of(("spec", "rules", i, "name"))
            raise PolicyError(
                source, line, f"spec.rules[{i}].name", f"duplicate rule {item['name']!r}"
            )
        selector_at = ("spec", "rules", i, "match", "podSelector")
        _check_selector(doc, source, selector_at, item["match"].get("podSelector", {}))
        rules.append(Rule(item["name"], item["class"], _match(item["match"])))
    return tuple(rules)


def _check_selector(
    doc: Located, source: str, at: tuple[str | int, ...], selector: Mapping[str, Any]
) -> None:
    for j, expr in enumerate(selector.get("matchExpressions", [])):
        needs_values = expr["operator"] in ("In", "NotIn")
        if needs_values != bool(expr.get("values")):
            path = (*at, "matchExpressions", j)
            what = "needs at least one value" if needs_values else "must not have values"
            raise PolicyError(
                source, doc.line_of(path), _dotted(path), f"operator {expr['operator']} {what}"
            )


def _unknown_class(
    doc: Located, source: str, path: Sequence[str | int], name: str, classes: Mapping[str, Any]
) -> None:
    valid = ", ".join(sorted(classes))
    raise PolicyError(
        source,
        doc.line_of(path),
        _dotted(path),
        f"unknown class {name!r}; declared classes: {valid}",
    )


def _match(raw: Mapping[str, Any]) -> Match:
    selector = raw.get("podSelector", {})
    return Match(
        namespaces=tuple(raw.get("namespaces", ())),
        match_labels=dict(selector.get("matchLabels", {})),
        match_expressions=_requirements(selector),
        owner_kinds=tuple(raw.get("ownerKinds", ())),
        template_roles=tuple(raw.get("templateRoles", ())),
    )


def _requirements(selector: Mapping[str, Any]) -> tuple[LabelRequirement, ...]:
    return tuple(
        LabelRequirement(e["key"], e["operator"], tuple(e.get("values", ())))
        for e in selector.get("matchExpressions", ())
    )


def _node_label(raw: Mapping[str, Any]) -> NodeLabel:
    default = NodeLabel()
    return NodeLabel(
        key=raw.get("key", default.key),
        preemptible=raw.get("preemptibleValue", default.preemptible),
        standard=raw.get("standardValue", default.standard),
    )


def _taint(raw: Mapping[str, Any] | None) -> Taint | None:
    if raw is None:
        return None
    return Taint(key=raw["key"], value=raw.get("value", ""), effect=raw.get("effect", "NoSchedule"))


def _dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
