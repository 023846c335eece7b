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
- ``interruptible-on-standard``: a pod of a preemptible-only class bound to a standard node.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.core import Judgement, Subject, judge
from webhook.admission.namespaces import NamespaceMeta
from webhook.cluster import inventory
from webhook.cluster.client import Cluster, ClusterError, path
from webhook.cluster.inventory import PREEMPTIBLE, STANDARD, Creators
from webhook.engine.decision import Obj
from webhook.engine.findings import shorten
from webhook.engine.policy import Placement, Policy
from webhook.engine.workloads import mapping_at, string_map

# Pods that still run or wait to: finished pods hold no capacity and will not run again.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class ProblemCode(enum.StrEnum):
    REFUSED = "refused"
    UNPLACED = "unplaced"
    CRITICAL_ON_PREEMPTIBLE = "critical-on-preemptible"
    INTERRUPTIBLE_ON_STANDARD = "interruptible-on-standard"


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One finding of the audit; ``severity`` as PolicyReports grade it."""

    code: ProblemCode
    severity: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"code": self.code.value, "severity": self.severity, "message": self.message}


@dataclass(frozen=True, kw_only=True)
class WorkloadType:
    """A kind the audit lists: where, and which of its objects another one already covers."""

    kind: str
    group: str
    version: str
    resource: str


POD = WorkloadType(kind="Pod", group="", version="v1", resource="pods")
WORKLOAD_TYPES = (
    WorkloadType(kind="Deployment", group="apps", version="v1", resource="deployments"),
    WorkloadType(kind="StatefulSet", group="apps", version="v1", resource="statefulsets"),
    WorkloadType(kind="ReplicaSet", group="apps", version="v1", resource="replicasets"),
    WorkloadType(kind="Job", group="batch", version="v1", resource="jobs"),
    WorkloadType(kind="CronJob", group="batch", version="v1", resource="cronjobs"),
)
DAEMONSETS = WorkloadType(kind="DaemonSet", group="apps", version="v1", resource="daemonsets")
# A ReplicaSet a Deployment made has the Deployment's template, a Job a CronJob made the
# CronJob's: judging both would report one mistake twice.
COVERED_BY = {"ReplicaSet": "Deployment", "Job": "CronJob"}


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
    notes: list[str] = field(default_factory=list)
    pages: int = 0


def read_cluster(cluster: Cluster, scope: Scope, progress: Progress | None = None) -> Snapshot:
    """List everything the audit judges, page by page; raises ``ClusterError``."""
    snap = Snapshot()
    snap.namespaces = _list(cluster, snap, path("namespaces"), "Namespace", None, progress)
    snap.nodes = _list(cluster, snap, path("nodes"), "Node", None, progress)
    labels = {"labelSelector": scope.label_selector} if scope.label_selector else {}
    pod_params = {"fieldSelector": ACTIVE_PODS, **labels}
    for namespace in scope.namespaces or (None,):
        where = path("pods", namespace=namespace)
        snap.pods += _list(cluster, snap, where, "Pod", pod_params, progress, api_version="v1")
    for wtype in (*WORKLOAD_TYPES, DAEMONSETS):
        for namespace in scope.namespaces or (None,):
            where = path(wtype.resource, group=wtype.group, version=wtype.version,
                         namespace=namespace)  # fmt: skip
            api_version = f"{wtype.group}/{wtype.version}"
            params = labels if wtype is not DAEMONSETS else {}
            try:
                found = _list(cluster, snap, where, wtype.kind, params, progress, api_version)
            except ClusterError as exc:
                if not exc.not_found:
                    raise
                snap.notes.append(
                    f"{api_version} {wtype.kind} is not served by this cluster: not audited"
                )
                break
            (snap.daemonsets if wtype is DAEMONSETS else snap.workloads).extend(found)
    return snap


def _list(
    cluster: Cluster,
    snap: Snapshot,
    where: str,
    kind: str,
    params: dict[str, str] | None,
    progress: Progress | None,
    api_version: str = "v1",
) -> list[Obj]:
    count = 0

    def on_page(items: int) -> None:
        nonlocal count
        count += items
        if progress is not None:
            progress(kind, count)

    listing = cluster.list_all(where, params=params, on_page=on_page)
    snap.pages += listing.pages
    # Items of a list carry no kind of their own; the engine reads it.
    for item in listing.items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return listing.items


@dataclass(frozen=True, kw_only=True)
class AuditResult:
    """One object judged: the judgement as ``check`` has it, where the pod runs, what is wrong."""

    obj: Obj
    judgement: Judgement
    problems: tuple[Problem, ...] = ()
    node: str | None = None
    node_class: str | None = None
    phase: str | None = None

    @property
    def kind(self) -> str:
        return self.judgement.decision.kind

    @property
    def namespace(self) -> str:
        return inventory.namespace_of(self.obj)

    @property
    def name(self) -> str:
        return inventory.name_of(self.obj)

    def as_json(self) -> dict[str, Any]:
        """The result shape of ``check -o json`` (no file or line: the object is live), plus
        ``uid``, ``node``, ``nodeClass``, ``phase`` and the audit's ``problems``."""
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
            "untouched": sum(r.judgement.decision.skipped is not None for r in self.results),
            "findings": by_code,
        }


def audit(snapshot: Snapshot, policy: Policy, scope: Scope = Scope()) -> Audit:
    """Judge every pod and workload of ``snapshot`` by ``policy``."""
    known = {
        inventory.name_of(ns): NamespaceMeta(
            annotations=string_map(inventory.meta_of(ns).get("annotations")),
            labels=string_map(inventory.meta_of(ns).get("labels")),
        )
        for ns in snapshot.namespaces
    }

    def lookup(namespace: str) -> NamespaceMeta:
        return known.get(namespace, NamespaceMeta())

    nodes = {inventory.name_of(n): inventory.node_class(n, policy) for n in snapshot.nodes}
    who = inventory.creators(snapshot.daemonsets, snapshot.nodes)
    results = [_pod(pod, policy, lookup, nodes, who) for pod in snapshot.pods]
    covered = _uids(snapshot.workloads)
    results += [
        _workload(w, policy, lookup) for w in snapshot.workloads if not _covered(w, covered)
    ]
    in_scope = list(scope.namespaces) if scope.namespaces else sorted(known)
    return Audit(results=results, notes=list(snapshot.notes), namespaces=in_scope)


def _uids(objects: Iterable[Obj]) -> set[tuple[str, str]]:
    return {(str(o.get("kind")), inventory.uid_of(o)) for o in objects}


def _covered(obj: Obj, present: set[tuple[str, str]]) -> bool:
    """Made by a workload that the audit judges itself, or a Job that has finished."""
    owner = inventory.controller_ref(obj)
    kind = obj.get("kind")
    if owner is not None and isinstance(kind, str) and COVERED_BY.get(kind) == owner.kind:
        return (owner.kind, owner.uid) in present
    if kind == "Job":
        conditions = mapping_at(obj, "status").get("conditions")
        for c in conditions if isinstance(conditions, list) else []:
            finished = c.get("type") in ("Complete", "Failed") if isinstance(c, dict) else False
            if finished and c.get("status") == "True":
                return True
    return False


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
    return AuditResult(
        obj=pod,
        judgement=judged,
        problems=tuple(_pod_problems(judged, policy, node, node_class)),
        node=node,
        node_class=node_class,
        phase=inventory.phase_of(pod),
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
            f"preemptible node {node}: a reclaim there takes it down within 300 s; recreate it "
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
    return AuditResult(obj=obj, judgement=judged, problems=tuple(problems))


def sort_key(result: AuditResult) -> tuple[str, str, str]:
    return (result.namespace, result.kind, result.name)


def problem_counts(results: Sequence[AuditResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        for p in r.problems:
            counts[p.code.value] = counts.get(p.code.value, 0) + 1
    return counts
