"""``preemptguard audit``: the running cluster judged by the admission core, as the webhook
would judge each object if it were created now.

One paginated list of each kind and nothing per object; then every pending or running pod is
judged as a CREATE (with its namespace's annotations and, for the findings below, its node's
class), and every workload template as the validating webhook judges it. What is found:

- ``refused``: the webhook would refuse the object now (a serving pod pinned to preemptible
  nodes, a checkpoint that cannot fit the window, ...);
- ``unplaced``: a pod the policy classifies that lacks what the webhook would have given it
  (the ``together.ai/placement`` record, the affinity, the toleration, a grace period within
  the window and above its checkpoint): the mutating webhook would patch it;
- ``critical-on-preemptible``: a pod of a standard-only class bound to a preemptible node;
- ``interruptible-on-standard``: a pod of a preemptible-only class bound to a standard node;
- ``left-alone-on-preemptible``: a DaemonSet whose template is of a standard-only class but
  requires preemptible nodes. Admission leaves DaemonSets and their pods alone (the policy's
  ``ignore``), so nothing keeps those pods off preemptible nodes: the audit is where it shows.

The workloads are every kind of the policy's ``workloadKinds`` but those it leaves alone (its
CRDs' kinds beside Kubernetes' own), each listed at the version the cluster serves: API
discovery says which groups it serves and their preferred version (a kind the preferred
version lacks is looked for at the group's other versions), and a group or kind it does not
serve is noted, not an error. An object whose controller is an object of a listed kind that
the audit judges too (a Deployment's ReplicaSets, a CronJob's Jobs, the RayCluster of a
RayJob or RayService, a JobSet's Jobs, a LeaderWorkerSet's StatefulSets, what an AppWrapper
wraps) carries its owner's template: it is not judged again, so one mistake is reported once
(the owner's own owner may cover it in turn: a RayCronJob its RayJobs).
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from webhook.admission.core import Judgement, Subject, judge
from webhook.cluster import inventory
from webhook.cluster.access import audited_kinds
from webhook.cluster.inventory import PREEMPTIBLE, STANDARD, Creators
from webhook.engine.decision import NamespaceMeta, Obj
from webhook.engine.findings import Code, shorten
from webhook.engine.policy import Placement, Policy, WorkloadKind
from webhook.engine.workloads import api_group, mapping_at
from webhook.kube.client import Cluster, ClusterError, path
from webhook.loading.policies import builtin_policy

T = TypeVar("T")

# Pods that still run or wait to: finished pods hold no capacity and will not run again.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class ProblemCode(enum.StrEnum):
    REFUSED = "refused"
    UNPLACED = "unplaced"
    CRITICAL_ON_PREEMPTIBLE = "critical-on-preemptible"
    INTERRUPTIBLE_ON_STANDARD = "interruptible-on-standard"
    LEFT_ALONE_ON_PREEMPTIBLE = "left-alone-on-preemptible"


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One finding of the audit; ``severity`` as PolicyReports grade it."""

    code: ProblemCode
    severity: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"code": self.code.value, "severity": self.severity, "message": self.message}


# Read whatever the policy says: to confirm that the DaemonSet a pod names as its controller
# exists (see inventory), and to report those whose pods nothing keeps off preemptible nodes.
DAEMONSETS = WorkloadKind(group="apps", kind="DaemonSet", templates=(), resource="daemonsets")


@dataclass(frozen=True)
class Scope:
    """What to audit: ``namespaces`` (empty: all of them) and a label selector."""

    namespaces: tuple[str, ...] = ()
    label_selector: str | None = None

    @property
    def everywhere(self) -> bool:
        return not self.namespaces


# Called with a kind and how many of it have been read so far.
Progress = Callable[[str, int], None]


@dataclass
class Snapshot:
    """What one pass over the cluster read."""

    namespaces: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    workloads: list[Obj] = field(default_factory=list)
    daemonsets: list[Obj] = field(default_factory=list)
    # Those of ``daemonsets`` the scope's label selector selects (None: all of them).
    selected_daemonsets: list[Obj] | None = None
    notes: list[str] = field(default_factory=list)
    pages: int = 0


def read_cluster(
    cluster: Cluster,
    scope: Scope,
    progress: Progress | None = None,
    *,
    policy: Policy | None = None,
) -> Snapshot:
    """List everything the audit judges by ``policy`` (default: the built-in one), page by
    page; raises ``ClusterError``. Every pod is held: ``audit_cluster`` judges them as they
    come instead.

    Pass the policy the audit will judge by: its workload kinds are what is listed.
    Cluster-scoped kinds are listed only when every namespace is in scope.
    """
    snap = read_around_pods(cluster, scope, progress, policy=policy)
    snap.pods = list_pods(cluster, snap, scope, inventory.lean, progress)
    return snap


def audit_cluster(
    cluster: Cluster, scope: Scope, policy: Policy, progress: Progress | None = None
) -> Audit:
    """The audit of the live cluster: everything but the pods listed first, then each page of
    pods judged as it comes, of each pod only what the results name kept (see
    ``AuditResult.kept``): the memory holds the results, never the pods."""
    snap = read_around_pods(cluster, scope, progress, policy=policy)
    judged = pod_judge(snap, policy)
    pods = list_pods(cluster, snap, scope, judged, progress)
    return _assemble(snap, policy, scope, pods)


def read_around_pods(
    cluster: Cluster,
    scope: Scope,
    progress: Progress | None = None,
    *,
    policy: Policy | None = None,
) -> Snapshot:
    """What judging a pod needs, listed before the pods: namespaces, nodes, DaemonSets, and
    the workloads (``read_cluster`` for the rest)."""
    kinds = audited_kinds(policy if policy is not None else builtin_policy())
    snap = Snapshot()
    snap.namespaces = _list(cluster, snap, path("namespaces"), "Namespace", None, progress)
    _check_named(scope, snap.namespaces)
    snap.nodes = _list(cluster, snap, path("nodes"), "Node", None, progress)
    labels = {"labelSelector": scope.label_selector} if scope.label_selector else {}
    served = served_versions(cluster)
    unserved: list[str] = []
    for kind in (*kinds, DAEMONSETS):
        if kind.cluster_scoped and not scope.everywhere:
            continue
        versions = ["v1"] if not kind.group else served.get(kind.group)
        if not versions:
            if kind.group not in unserved:
                unserved.append(kind.group)
            continue
        params = labels if kind is not DAEMONSETS else {}
        found = _list_kind(cluster, snap, kind, versions, scope, params, progress)
        if found is None:
            tried = ", ".join(f"{kind.group}/{v}" if kind.group else v for v in versions)
            snap.notes.append(
                f"{kind.name} is not served by this cluster (none of {tried} serves "
                f"{kind.plural}): not audited"
            )
        elif kind is not DAEMONSETS:
            snap.workloads.extend(found)
        else:
            # Every one, to confirm who made a pod; those selected, to report.
            snap.daemonsets.extend(found)
            if labels:
                selected = _list_kind(cluster, snap, kind, versions, scope, labels, progress)
                snap.selected_daemonsets = selected or []
    if unserved:
        snap.notes.insert(
            0,
            "API groups not served by this cluster (their workload kinds are not audited): "
            + ", ".join(unserved),
        )
    return snap


def list_pods(
    cluster: Cluster,
    snap: Snapshot,
    scope: Scope,
    take: Callable[[Obj], T],
    progress: Progress | None = None,
) -> list[T]:
    """What ``take`` makes of every pending or running pod in scope, page by page."""
    labels = {"labelSelector": scope.label_selector} if scope.label_selector else {}
    params = {"fieldSelector": ACTIVE_PODS, **labels}
    made: list[T] = []
    for namespace in scope.namespaces or (None,):
        where = path("pods", namespace=namespace)
        made += _collect(cluster, snap, where, "Pod", params, progress, "v1", take)
    return made


def _check_named(scope: Scope, namespaces: Sequence[Obj]) -> None:
    """A namespace named that does not exist is a mistake (a typo), not a clean audit."""
    existing = {inventory.name_of(ns) for ns in namespaces}
    missing = [n for n in scope.namespaces if n not in existing]
    if missing:
        raise ClusterError(
            f"no namespace {', '.join(missing)} in this cluster: check -n/--namespace "
            "(kubectl get namespaces lists them)",
            status=404,
        )


def served_versions(cluster: Cluster) -> dict[str, list[str]]:
    """The API groups the cluster serves (the core group aside), each with its versions, the
    preferred one first, from one discovery request (``GET /apis``)."""
    groups = cluster.get("/apis").get("groups")
    served: dict[str, list[str]] = {}
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("name"), str):
            continue
        versions = [
            v["version"]
            for v in group.get("versions") or []
            if isinstance(v, dict) and isinstance(v.get("version"), str)
        ]
        preferred = mapping_at(group, "preferredVersion").get("version")
        if isinstance(preferred, str) and preferred in versions:
            versions.remove(preferred)
            versions.insert(0, preferred)
        served[group["name"]] = versions
    return served


def _list_kind(
    cluster: Cluster,
    snap: Snapshot,
    kind: WorkloadKind,
    versions: Sequence[str],
    scope: Scope,
    params: dict[str, str],
    progress: Progress | None,
) -> list[Obj] | None:
    """Every object of ``kind`` in scope, at the first of ``versions`` that serves it (the
    first list that is not a 404 decides); None when none does."""
    namespaces: Sequence[str | None] = (
        (None,) if kind.cluster_scoped or scope.everywhere else scope.namespaces
    )
    for version in versions:
        api_version = f"{kind.group}/{version}" if kind.group else version
        found: list[Obj] = []
        try:
            for namespace in namespaces:
                where = path(kind.plural, group=kind.group, version=version, namespace=namespace)
                found += _list(cluster, snap, where, kind.kind, params, progress, api_version)
        except ClusterError as exc:
            if not exc.not_found or found:
                raise
            continue
        return found
    return None


def _list(
    cluster: Cluster,
    snap: Snapshot,
    where: str,
    kind: str,
    params: dict[str, str] | None,
    progress: Progress | None,
    api_version: str = "v1",
) -> list[Obj]:
    """Every item, lean (``inventory.lean``)."""
    return _collect(cluster, snap, where, kind, params, progress, api_version, inventory.lean)


def _collect(
    cluster: Cluster,
    snap: Snapshot,
    where: str,
    kind: str,
    params: dict[str, str] | None,
    progress: Progress | None,
    api_version: str,
    take: Callable[[Obj], T],
) -> list[T]:
    """What ``take`` makes of each item, page by page."""
    count = 0

    def on_page(items: int) -> None:
        nonlocal count
        count += items
        if progress is not None:
            progress(kind, count)

    def typed(item: Obj) -> T:
        # Items of a list carry no kind of their own; the engine reads it.
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
        return take(item)

    listing = cluster.collect(where, typed, params=params, on_page=on_page)
    snap.pages += listing.pages
    return listing.items


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the summary and the reports read of a judgement: many objects share one."""

    kind: str
    workload_class: str | None
    class_source: str
    skipped: str | None  # why the object is left alone, as text
    codes: str  # the codes of its refusals and changes, sorted, comma-separated

    @classmethod
    def of(cls, judgement: Judgement) -> Verdict:
        d = judgement.decision
        return cls(
            kind=d.kind,
            workload_class=d.workload_class,
            class_source=d.classification.source,
            skipped=d.skipped,
            codes=",".join(sorted({f.code.value for f in (*d.refusals, *d.changes)})),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditResult:
    """One object judged: what the judgement says, where the pod runs, what is wrong.

    ``judgement`` is the engine's as ``check`` has it, kept only where there is a problem to
    show (None once ``kept`` drops it from a clean result)."""

    obj: Obj
    verdict: Verdict
    judgement: Judgement | None
    problems: tuple[Problem, ...] = ()
    node: str | None = None
    node_class: str | None = None
    phase: str | None = None

    @classmethod
    def of(
        cls,
        obj: Obj,
        judgement: Judgement,
        problems: tuple[Problem, ...] = (),
        *,
        node: str | None = None,
        node_class: str | None = None,
        phase: str | None = None,
    ) -> AuditResult:
        return cls(obj=obj, verdict=Verdict.of(judgement), judgement=judgement,
                   problems=problems, node=node, node_class=node_class, phase=phase)  # fmt: skip

    @property
    def kind(self) -> str:
        return self.verdict.kind

    @property
    def namespace(self) -> str:
        return inventory.namespace_of(self.obj)

    @property
    def name(self) -> str:
        return inventory.name_of(self.obj)

    def kept(self, verdicts: dict[Verdict, Verdict]) -> AuditResult:
        """This result as a large audit keeps it: the object's identity for the object, one
        ``Verdict`` of ``verdicts`` for the equal ones, and the judgement only when there is a
        problem to show, without the object copies it holds."""
        ident = inventory.identity(self.obj)
        judgement = None
        if self.problems and self.judgement is not None:
            j = self.judgement
            judgement = replace(
                j,
                subject=replace(j.subject, obj=ident, old_object=None),
                decision=replace(j.decision, mutated=ident, stored=None),
                stored_patch=[],
            )
        return replace(
            self,
            obj=ident,
            verdict=verdicts.setdefault(self.verdict, self.verdict),
            judgement=judgement,
            node=sys.intern(self.node) if self.node is not None else None,
            phase=sys.intern(self.phase) if self.phase is not None else None,
        )

    def as_json(self) -> dict[str, Any]:
        """The result shape of ``check -o json`` (no file or line: the object is live), plus
        ``uid``, ``node``, ``nodeClass``, ``phase`` and the audit's ``problems``; of a result
        with a judgement (every one with a problem)."""
        if self.judgement is None:
            raise ValueError(f"{self.kind} {self.namespace}/{self.name}: no judgement was kept")
        d = self.judgement.decision
        groups = (("skip", (d.skip,) if d.skip else ()), ("refusal", d.refusals),
                  ("warning", d.notes), ("change", d.changes))  # fmt: skip
        findings = [{"severity": sev, **f.as_json()} for sev, found in groups for f in found]
        return {
            "kind": d.kind,
            "namespace": d.namespace,
            "name": d.name,
            "uid": inventory.uid_of(self.obj),
            "class": d.workload_class,
            "source": d.classification.source,
            "sourceDetail": d.classification.detail,
            "allowed": d.allowed,
            "refused": d.enforce_refuses,
            "skipped": d.skipped,
            "reasons": list(d.violations),
            "warnings": list(d.warnings),
            "changes": [{"field": c.path, "reason": c.message} for c in d.changes],
            "findings": findings,
            "patch": self.judgement.patch,
            "node": self.node,
            "nodeClass": self.node_class,
            "phase": self.phase,
            "problems": [p.as_json() for p in self.problems],
        }


@dataclass(frozen=True, kw_only=True)
class Audit:
    """Everything judged in one pass; ``results`` in the order listed."""

    results: list[AuditResult]
    notes: list[str]
    namespaces: list[str]  # the namespaces in scope
    everywhere: bool = True  # every namespace in scope, cluster-scoped kinds listed
    # Every workload and DaemonSet listed, by uid: where a report's scope is looked for.
    owners: Mapping[str, Obj] = field(default_factory=dict)
    pages: int = 0  # pages listed

    @property
    def findings(self) -> list[AuditResult]:
        return [r for r in self.results if r.problems]

    def summary(self) -> dict[str, Any]:
        pods = [r for r in self.results if r.kind == "Pod"]
        by_code = {code.value: 0 for code in ProblemCode}
        for r in self.results:
            for p in r.problems:
                by_code[p.code.value] += 1
        return {
            "pods": len(pods),
            "workloads": len(self.results) - len(pods),
            "namespaces": len(self.namespaces),
            "withFindings": len(self.findings),
            "untouched": sum(
                r.verdict.skipped is not None and not r.problems for r in self.results
            ),
            "findings": by_code,
        }


def audit(snapshot: Snapshot, policy: Policy, scope: Scope = Scope()) -> Audit:
    """Judge every pod and workload of ``snapshot`` by ``policy``."""
    judged = pod_judge(snapshot, policy)
    return _assemble(snapshot, policy, scope, [judged(pod) for pod in snapshot.pods])


def pod_judge(snapshot: Snapshot, policy: Policy) -> Callable[[Obj], AuditResult]:
    """Judge a pod with what ``snapshot`` says of its namespace, node and creator; the result
    as the audit keeps it (``AuditResult.kept``)."""
    lookup = inventory.namespace_lookup(snapshot.namespaces)
    nodes = {inventory.name_of(n): inventory.node_class(n, policy) for n in snapshot.nodes}
    who = inventory.creators(snapshot.daemonsets, snapshot.nodes)
    verdicts: dict[Verdict, Verdict] = {}

    def judged(pod: Obj) -> AuditResult:
        return _pod(pod, policy, lookup, nodes, who).kept(verdicts)

    return judged


def _assemble(snapshot: Snapshot, policy: Policy, scope: Scope, pods: list[AuditResult]) -> Audit:
    """The audit: ``pods`` (judged), then the workloads and DaemonSets of ``snapshot``."""
    lookup = inventory.namespace_lookup(snapshot.namespaces)
    verdicts: dict[Verdict, Verdict] = {}
    results = pods
    results += [r.kept(verdicts) for r in _workloads(snapshot.workloads, policy, lookup)]
    selected = snapshot.selected_daemonsets
    for daemonset in snapshot.daemonsets if selected is None else selected:
        result = _daemonset(daemonset, policy, lookup)
        if result.problems:
            results.append(result.kept(verdicts))
    known = [inventory.name_of(ns) for ns in snapshot.namespaces]
    in_scope = list(scope.namespaces) if scope.namespaces else sorted(known)
    owners = {
        inventory.uid_of(o): inventory.identity(o)
        for o in (*snapshot.workloads, *snapshot.daemonsets)
        if inventory.uid_of(o)
    }
    return Audit(
        results=results,
        notes=list(snapshot.notes),
        namespaces=in_scope,
        everywhere=scope.everywhere,
        owners=owners,
        pages=snapshot.pages,
    )


def _workloads(
    workloads: Sequence[Obj], policy: Policy, lookup: Callable[[str], NamespaceMeta]
) -> list[AuditResult]:
    """Every workload judged, but for those ``_covered`` leaves out."""
    kinds = {(k.group, k.kind) for k in audited_kinds(policy)}
    results = [_workload(w, policy, lookup) for w in workloads]
    judged: dict[tuple[str, str, str], AuditResult] = {}
    for w, result in zip(workloads, results, strict=True):
        key = (api_group(w) or "", str(w.get("kind")))
        if key in kinds and inventory.uid_of(w):
            judged[(*key, inventory.uid_of(w))] = result
    return [r for w, r in zip(workloads, results, strict=True) if not _covered(w, r, judged)]


def _covered(
    obj: Obj, result: AuditResult, judged: Mapping[tuple[str, str, str], AuditResult]
) -> bool:
    """Made by a workload judged too that reports what this one would, or a batch Job that
    has finished.

    A ReplicaSet carries its Deployment's template (a RayCluster its RayJob's), so the mistake
    is reported once, on the owner. But the controller an object names is its writer's claim:
    the API server checks an ownerReference's form, not its truth, and the garbage collector
    keeps an object whose named owner exists. So an object is left out only when it has no
    problem its owner lacks; one that names a clean owner and would be refused is reported.
    """
    owner = inventory.controller_ref(obj)
    if owner is not None:
        group, slash, _ = owner.api_version.rpartition("/")
        made_by = judged.get(((group if slash else ""), owner.kind, owner.uid))
        if made_by is not None and _codes(result) <= _codes(made_by):
            return True
    if obj.get("kind") == "Job" and api_group(obj) == "batch":
        conditions = mapping_at(obj, "status").get("conditions")
        for c in conditions if isinstance(conditions, list) else []:
            finished = c.get("type") in ("Complete", "Failed") if isinstance(c, dict) else False
            if finished and c.get("status") == "True":
                return True
    return False


def _codes(result: AuditResult) -> set[ProblemCode]:
    return {p.code for p in result.problems}


def _pod(
    pod: Obj,
    policy: Policy,
    lookup: Callable[[str], NamespaceMeta],
    nodes: dict[str, str],
    who: Creators,
) -> AuditResult:
    subject = Subject(
        obj=pod,
        namespace=inventory.namespace_of(pod) or None,
        requester=who.requester(pod, policy),
    )
    judged = judge(subject, policy, lookup)
    node = inventory.node_name_of(pod)
    node_class = nodes.get(node, inventory.UNKNOWN) if node is not None else None
    problems = tuple(_pod_problems(judged, policy, node, node_class))
    return AuditResult.of(
        pod, judged, problems, node=node, node_class=node_class, phase=inventory.phase_of(pod)
    )


def _pod_problems(
    judged: Judgement, policy: Policy, node: str | None, node_class: str | None
) -> list[Problem]:
    d = judged.decision
    if d.skip is not None:
        return []
    found: list[Problem] = []
    wclass = policy.classes.get(d.workload_class or "")
    placement = wclass.placement if wclass is not None else None
    if d.enforce_refuses:
        severity = "high" if placement is Placement.STANDARD else "medium"
        message = f"the webhook would refuse this pod now: {'; '.join(d.violations)}"
        found.append(Problem(code=ProblemCode.REFUSED, severity=severity, message=message))
    elif judged.patch:
        what = "; ".join(c.summary or c.message for c in d.changes)
        message = (
            f"lacks the placement of its class {d.workload_class} (created while the webhook "
            f"was not answering, or before it was installed): {shorten(what, 600)}; recreate it "
            "so that the webhook places it"
        )
        found.append(Problem(code=ProblemCode.UNPLACED, severity="medium", message=message))
    if placement is Placement.STANDARD and node_class == PREEMPTIBLE:
        message = (
            f"class {d.workload_class} must run on standard nodes, but the pod is bound to "
            f"preemptible node {node}: a reclaim there takes it down within "
            f"{policy.max_grace_seconds} s; recreate it "
            "so that the webhook keeps it off preemptible nodes"
        )
        found.append(
            Problem(code=ProblemCode.CRITICAL_ON_PREEMPTIBLE, severity="high", message=message)
        )
    elif placement is Placement.PREEMPTIBLE and node_class == STANDARD:
        message = (
            f"class {d.workload_class} runs only on preemptible nodes, but the pod is bound to "
            f"standard node {node}, taking guaranteed capacity; recreate it so that the webhook "
            "places it"
        )
        found.append(
            Problem(code=ProblemCode.INTERRUPTIBLE_ON_STANDARD, severity="low", message=message)
        )
    return found


def _workload(obj: Obj, policy: Policy, lookup: Callable[[str], NamespaceMeta]) -> AuditResult:
    judged = judge(Subject(obj=obj, namespace=inventory.namespace_of(obj) or None), policy, lookup)
    d = judged.decision
    problems: list[Problem] = []
    if d.skip is None and d.enforce_refuses:
        message = (
            f"the webhook would refuse this {d.kind}'s pod template now: {'; '.join(d.violations)}"
        )
        problems.append(Problem(code=ProblemCode.REFUSED, severity="high", message=message))
    return AuditResult.of(obj, judged, tuple(problems))


def _daemonset(obj: Obj, policy: Policy, lookup: Callable[[str], NamespaceMeta]) -> AuditResult:
    """A DaemonSet, left alone as admission leaves it, with a problem for each template whose
    pods nothing keeps off preemptible nodes (the engine's ``left-alone-on-preemptible``)."""
    judged = judge(Subject(obj=obj, namespace=inventory.namespace_of(obj) or None), policy, lookup)
    problems = tuple(
        Problem(code=ProblemCode.LEFT_ALONE_ON_PREEMPTIBLE, severity="high", message=f.message)
        for f in judged.decision.notes
        if f.code is Code.LEFT_ALONE_ON_PREEMPTIBLE
    )
    return AuditResult.of(obj, judged, problems)


def sort_key(result: AuditResult) -> tuple[str, str, str]:
    return (result.namespace, result.kind, result.name)


def problem_counts(results: Sequence[AuditResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        for p in r.problems:
            counts[p.code.value] = counts.get(p.code.value, 0) + 1
    return counts
