"""Policy test cases kept beside a policy (``<policy dir>/tests/*.yaml``), and their runner."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from webhook.admission import lookups
from webhook.admission.core import Judgement, Subject, judge
from webhook.engine.decision import Decision, NamespaceMeta, Obj, Requester
from webhook.engine.patch import apply_patch, make_patch
from webhook.engine.podshape import describe
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityLookup
from webhook.errors import CaseError
from webhook.loading.manifests import load_manifests
from webhook.loading.policies import load_policy

CASE_KIND = "PlacementTest"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def _is_texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_strings(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


Check = tuple[Callable[[Any], bool], str]
_TEXT: Check = (lambda v: isinstance(v, str), "a string")
_FLAG: Check = (lambda v: isinstance(v, bool), "true or false")
_TEXTS: Check = (_is_texts, "a list of strings")
SPEC_FIELDS: dict[str, Check] = {
    "operation": (lambda v: v in OPERATIONS, f"one of {', '.join(OPERATIONS)}"),
    "namespace": _TEXT,
    "namespaceAnnotations": (_is_strings, "a mapping of strings to strings"),
    "oldObject": (lambda v: isinstance(v, dict), "the object before the update"),
    "userInfo": (
        lambda v: (
            isinstance(v, dict)
            and isinstance(v.get("username"), str)
            and _is_texts(v.get("groups", []))
        ),
        "a mapping with username (a string) and groups (a list of strings)",
    ),
    "priorityClasses": (
        lambda v: isinstance(v, list) and all(lookups.info_of(c) is not None for c in v),
        "a list of PriorityClass objects (metadata.name, value, preemptionPolicy)",
    ),
}
EXPECT_FIELDS: dict[str, Check] = {
    "class": _TEXT,
    "allowed": _FLAG,
    "refused": _FLAG,
    "reasons": _TEXTS,
    "warnings": _TEXTS,
    "codes": (_is_texts, "a list of finding codes (see docs/cli.md)"),
    "patched": (lambda v: isinstance(v, dict), "the whole patched object"),
    "unchanged": _FLAG,
}


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    # The policy folder the case is kept beside, and where in its tests/ the case is written.
    policy_dir: Path
    file: str
    line: int
    subject: Subject
    namespace: NamespaceMeta
    expect: Mapping[str, Any]
    # The cluster's PriorityClasses: the system ones and those the case lists; without a
    # list, the system and shipped ones.
    priority_classes: PriorityLookup

    @property
    def source(self) -> str:
        return f"{self.file}:{self.line}"

    def lookup(self, namespace: str) -> NamespaceMeta:
        """The case's namespace annotations, for whichever namespace the case is in."""
        return self.namespace


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    case: Case
    judged: Judgement
    failures: list[str] = field(default_factory=list)
    # How long the case took to run, for the reports CI systems read.
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def actual(self) -> dict[str, Any]:
        """What the case's object got, in the terms of ``spec.expect`` (but the patch itself
        rather than the patched object)."""
        d = self.judged.decision
        return {
            "class": d.workload_class,
            "allowed": d.allowed,
            "refused": d.enforce_refuses,
            "reasons": list(d.violations),
            "warnings": list(d.warnings),
            "codes": _codes(d),
            "unchanged": not self.judged.patch,
            "patch": self.judged.patch,
        }


def policy_dirs(root: Path) -> list[Path]:
    """``root`` itself when it holds a policy and tests, else every such folder below it."""
    if (root / "tests").is_dir():
        return [root]
    return sorted(p.parent for p in root.rglob("tests") if p.is_dir() and p.parent != root)


def load_cases(policy_dir: Path) -> list[Case]:
    manifests = load_manifests([str(policy_dir / "tests")], stdin=io.StringIO())
    if manifests.errors:
        raise CaseError("; ".join(str(e) for e in manifests.errors))
    cases = [_case(doc.obj, policy_dir, doc.source, doc.line) for doc in manifests.documents]
    if not cases:
        raise CaseError(f"{policy_dir / 'tests'}: no {CASE_KIND} documents")
    return cases


def _case(raw: Obj, policy_dir: Path, file: str, line: int) -> Case:
    source = f"{file}:{line}"
    if raw.get("kind") != CASE_KIND:
        raise CaseError(f"{source}: expected kind {CASE_KIND}, got {raw.get('kind')!r}")
    spec = raw.get("spec")
    name = (raw.get("metadata") or {}).get("name")
    if not isinstance(spec, dict) or not isinstance(spec.get("object"), dict) or not name:
        raise CaseError(f"{source}: a {CASE_KIND} needs metadata.name, spec.object and spec.expect")
    expect = spec.get("expect")
    if not isinstance(expect, dict) or not expect or set(expect) - set(EXPECT_FIELDS):
        keys = ", ".join(sorted(EXPECT_FIELDS))
        raise CaseError(f"{source}: spec.expect must be a mapping with some of: {keys}")
    problem = _field_problem(spec, "spec", SPEC_FIELDS) or _field_problem(
        expect, "spec.expect", EXPECT_FIELDS
    )
    if problem:
        raise CaseError(f"{source}: {problem}")
    subject = Subject(
        obj=spec["object"],
        operation=spec.get("operation") or "CREATE",
        namespace=spec.get("namespace") or _namespace_of(spec["object"]),
        old_object=spec.get("oldObject"),
        requester=_requester(spec.get("userInfo")),
    )
    namespace = NamespaceMeta(annotations=spec.get("namespaceAnnotations") or {})
    listed = spec.get("priorityClasses")
    classes = (
        lookups.offline_priority_classes()
        if listed is None
        else lookups.priority_classes_in_cluster(listed)
    )
    return Case(
        name=str(name),
        policy_dir=policy_dir,
        file=file,
        line=line,
        subject=subject,
        namespace=namespace,
        expect=expect,
        priority_classes=classes,
    )


def _requester(user: Mapping[str, Any] | None) -> Requester | None:
    if user is None:
        return None
    return Requester(username=user["username"], groups=tuple(user.get("groups", ())))


def _field_problem(fields: Mapping[str, Any], where: str, checks: dict[str, Check]) -> str | None:
    for key, value in fields.items():
        check = checks.get(key)
        if check is not None and value is not None and not check[0](value):
            return f"{where}.{key} must be {check[1]}, not {describe(value)}"
    return None


def _namespace_of(obj: Obj) -> str:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return namespace if isinstance(namespace, str) and namespace else "default"


def run_case(case: Case, policy: Policy) -> CaseResult:
    started = time.perf_counter()
    judged = judge(case.subject, policy, case.lookup, priority_classes=case.priority_classes)
    failures = [
        *_compare(case.expect, judged.decision, case.subject.obj, judged.patch),
        *_stable(judged, policy, case),
    ]
    seconds = time.perf_counter() - started
    return CaseResult(case=case, judged=judged, failures=failures, seconds=seconds)


def _compare(
    expect: Mapping[str, Any], d: Decision, original: Obj, patch: list[dict[str, Any]]
) -> Iterator[str]:
    if "class" in expect and expect["class"] != d.workload_class:
        got = f"{d.workload_class!r} ({d.classification.source})"
        yield f"class: expected {expect['class']!r}, got {got}"
    for key, actual in (("allowed", d.allowed), ("refused", d.enforce_refuses)):
        if key in expect and expect[key] != actual:
            yield f"{key}: expected {expect[key]}, got {actual}; reasons: {list(d.violations)}"
    yield from _contains("reasons", expect.get("reasons", []), d.violations)
    yield from _contains("warnings", expect.get("warnings", []), d.warnings)
    codes = _codes(d)
    for code in expect.get("codes", []):
        if code not in codes:
            yield f"codes: {code!r} not found; got {codes}"
    if expect.get("unchanged") and patch:
        yield f"expected no change, got patch {patch}"
    if "patched" in expect and apply_patch(original, patch) != expect["patched"]:
        diff = make_patch(expect["patched"], apply_patch(original, patch))
        yield f"the patched object differs from spec.expect.patched by {diff}"


def _codes(d: Decision) -> list[str]:
    return sorted({f.code.value for f in d.findings()})


def _contains(what: str, wanted: list[str], actual: tuple[str, ...]) -> Iterator[str]:
    for text in wanted:
        if not any(text in a for a in actual):
            yield f"{what}: none contains {text!r}; got {list(actual)}"


def _stable(judged: Judgement, policy: Policy, case: Case) -> list[str]:
    """The patched object, judged again, changes nothing (reinvocation-safe)."""
    patched = apply_patch(judged.subject.obj, judged.patch)
    again = judge(
        replace(judged.subject, obj=patched),
        policy,
        case.lookup,
        priority_classes=case.priority_classes,
    )
    return [f"not idempotent: a second run changes {again.patch}"] if again.patch else []


def run_policy_dir(policy_dir: Path) -> list[CaseResult]:
    policy = load_policy(policy_dir)
    return [run_case(case, policy) for case in load_cases(policy_dir)]
