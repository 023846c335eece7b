"""The audit as policy reports, in the formats policy engines publish and dashboards (Policy
Reporter, ...) read:

- ``openreports.io/v1alpha1`` (OpenReports, which Kyverno 1.15 writes as an option): as Kyverno
  writes them, one ``Report`` per object, its ``scope`` that object and its owner (garbage
  collected with it). The object is the top-level owner, among the objects the audit listed,
  of what was judged: a pod's Deployment (through its ReplicaSet), a Job's CronJob; the object
  itself when it has none. A result about another object than the scope (the pod of a
  Deployment) names it in ``resources``. A cluster-scoped object gets a ``ClusterReport``.
- ``wgpolicyk8s.io/v1alpha2`` PolicyReports: one per namespace, named ``preemptguard``, no
  scope, each result naming its object in ``resources``.

``choose`` picks openreports where the cluster serves it (discovery), else wgpolicyk8s, or the
one asked for. Each finding is a ``fail`` result; clean objects are counted in ``summary.pass``
(and listed as ``pass`` results of rule ``placement`` when asked), untouched ones in
``summary.skip``, so a report stays well under the API server's object size limit (past
``MAX_RESULTS`` one ``warn`` result says how many are not listed).

Reports are written by server-side apply, only when they changed (timestamps aside). Those of
earlier runs (by their label) in the namespaces audited are retired when nothing is left to
report there: a Report deleted, a PolicyReport emptied; so are the audited namespaces' reports
of the other format the cluster serves, so that a switch of format leaves nothing stale.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.cluster import inventory
from webhook.cluster.audit import Audit, AuditResult, Problem, served_versions
from webhook.engine.decision import Obj
from webhook.engine.policy import Policy
from webhook.engine.workloads import api_group
from webhook.kube.client import Cluster, ClusterError, path

REPORT_NAME = "preemptguard"
SOURCE = "preemptguard"
CATEGORY = "placement"
PASS_RULE = "placement"  # the rule of a clean object's pass result: none of the codes applies
MANAGED_BY = {"app.kubernetes.io/managed-by": "preemptguard"}
MAX_RESULTS = 1000  # results in one report, the warn of those left out included
STATUSES = ("pass", "fail", "warn", "error", "skip")

Key = tuple[str, str]  # (namespace, "" for a cluster-scoped report; name)


@dataclass(frozen=True, kw_only=True)
class ReportApi:
    """A report format: ``name`` as ``--report-api`` says it, its API, kinds and resources
    (``cluster_resource``: None where preemptguard writes no cluster-scoped report)."""

    name: str
    group: str
    version: str
    kind: str
    resource: str
    cluster_kind: str
    cluster_resource: str | None
    per_object: bool
    install: str  # what to install on a cluster that does not serve it

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


OPENREPORTS = ReportApi(
    name="openreports",
    group="openreports.io",
    version="v1alpha1",
    kind="Report",
    resource="reports",
    cluster_kind="ClusterReport",
    cluster_resource="clusterreports",
    per_object=True,
    install="the OpenReports CRDs (openreports/reports-api; Kyverno installs them when its "
    "openreports option is on)",
)
WGPOLICYK8S = ReportApi(
    name="wgpolicyk8s",
    group="wgpolicyk8s.io",
    version="v1alpha2",
    kind="PolicyReport",
    resource="policyreports",
    cluster_kind="ClusterPolicyReport",
    cluster_resource=None,
    per_object=False,
    install="the PolicyReport CRD (Kyverno installs it; so does "
    "kubernetes-sigs/wg-policy-prototypes)",
)
APIS = (OPENREPORTS, WGPOLICYK8S)  # the preferred first
API_NAMES = tuple(api.name for api in APIS)


@dataclass(frozen=True)
class Target:
    """The format to write, and the others the cluster serves (whose earlier reports of the
    namespaces audited are retired)."""

    api: ReportApi
    others: tuple[ReportApi, ...] = ()


@dataclass(frozen=True)
class Published:
    """What ``publish`` did: ``reports``, every report of this run (``namespace/name``, a
    cluster-scoped one by its name); how many of them were ``written`` (the others were up to
    date); how many earlier ones were ``retired``."""

    api: ReportApi
    reports: list[str]
    written: int
    retired: int


def choose(cluster: Cluster, wanted: str | None = None) -> Target:
    """The format to write: ``wanted`` (an ``API_NAMES`` name), else the first of ``APIS`` the
    cluster serves; raises ``ClusterError`` (status 404) when it is not served."""
    served = served_versions(cluster)
    serving = [api for api in APIS if api.version in served.get(api.group, ())]
    if wanted is not None:
        api = _named(wanted)
        if api not in serving:
            raise ClusterError(
                f"this cluster does not serve {api.api_version} {api.kind}s (--report-api "
                f"{api.name}): install {api.install}, or leave out --report-api to write what "
                "it serves",
                status=404,
            )
    elif serving:
        api = serving[0]
    else:
        raise ClusterError(
            f"this cluster serves no policy report API, neither {OPENREPORTS.api_version} nor "
            f"{WGPOLICYK8S.api_version}: install {OPENREPORTS.install} or "
            f"{WGPOLICYK8S.install}, or run the audit without --report",
            status=404,
        )
    return Target(api, tuple(a for a in serving if a is not api))


def _named(name: str) -> ReportApi:
    for api in APIS:
        if api.name == name:
            return api
    raise ValueError(f"no report API {name!r}: one of {', '.join(API_NAMES)}")


# --- the reports ---------------------------------------------------------------------------


def build(
    audit: Audit, policy: Policy, *, now: float, api: ReportApi = WGPOLICYK8S, passing: bool = False
) -> dict[Key, Obj]:
    """The reports of ``audit`` in format ``api``, by where they are written; ``passing``:
    clean objects listed as ``pass`` results too."""
    if api.per_object:
        return _by_object(audit, policy, now, api, passing)
    return _by_namespace(audit, policy, now, api, passing)


def _by_namespace(
    audit: Audit, policy: Policy, now: float, api: ReportApi, passing: bool
) -> dict[Key, Obj]:
    """One report per namespace with something judged in it (an excluded namespace, where
    everything is left alone, has nothing of preemptguard's to report)."""
    by_namespace: dict[str, list[AuditResult]] = defaultdict(list)
    for result in audit.results:
        if result.namespace:
            by_namespace[result.namespace].append(result)
    reports = {}
    for namespace, results in sorted(by_namespace.items()):
        if not all(_untouched(r) for r in results):
            summary, listed = _contents(results, policy, now, passing=passing, scope=None)
            reports[(namespace, REPORT_NAME)] = _namespaced(api, namespace, summary, listed)
    return reports


def _namespaced(api: ReportApi, namespace: str, summary: dict[str, int], listed: list[Obj]) -> Obj:
    return {
        "apiVersion": api.api_version,
        "kind": api.kind,
        "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "summary": summary,
        "results": listed,
    }


def _by_object(
    audit: Audit, policy: Policy, now: float, api: ReportApi, passing: bool
) -> dict[Key, Obj]:
    """One report per scope (see ``scope_of``) with a result to list."""
    groups: dict[Key, tuple[Obj, list[AuditResult]]] = {}
    for result in audit.results:
        scope = scope_of(result.obj, audit.owners)
        key = (inventory.namespace_of(scope), _report_name(scope))
        groups.setdefault(key, (scope, []))[1].append(result)
    reports = {}
    for key, (scope, results) in sorted(groups.items()):
        summary, listed = _contents(results, policy, now, passing=passing, scope=scope)
        if listed:
            reports[key] = _scoped(api, scope, summary, listed, passing=passing)
    return reports


def scope_of(obj: Obj, owners: Mapping[str, Obj]) -> Obj:
    """``obj``'s top-level owner among ``owners`` (by uid): its controller, that one's
    controller, ... as long as each is in ``owners`` with the kind, name and namespace the
    reference names; ``obj`` itself when its controller is not there."""
    seen = {inventory.uid_of(obj)}
    current = obj
    while (ref := inventory.controller_ref(current)) is not None and ref.uid not in seen:
        owner = owners.get(ref.uid)
        if owner is None or not _is(owner, ref):
            break
        seen.add(ref.uid)
        current = owner
    return current


def _is(obj: Obj, ref: inventory.OwnerRef) -> bool:
    group, slash, _ = ref.api_version.rpartition("/")
    return (
        obj.get("kind") == ref.kind
        and (api_group(obj) or "") == (group if slash else "")
        and inventory.name_of(obj) == ref.name
        and inventory.namespace_of(obj) == ref.namespace
    )


def _report_name(scope: Obj) -> str:
    """``preemptguard-<uid>``, after the object's uid as Kyverno names its reports (prefixed,
    so as not to take the name of Kyverno's own report of the object)."""
    uid = inventory.uid_of(scope)
    if not uid:  # not from an API server: named after what it is
        what = "/".join(str(v) for v in _reference(scope).values())
        uid = hashlib.sha256(what.encode()).hexdigest()[:32]
    return f"{REPORT_NAME}-{uid}"


def _scoped(
    api: ReportApi, scope: Obj, summary: dict[str, int], listed: list[Obj], *, passing: bool
) -> Obj:
    namespace = inventory.namespace_of(scope)
    meta: Obj = {"name": _report_name(scope), "labels": dict(MANAGED_BY)}
    if namespace:
        meta["namespace"] = namespace
    owner = {k: v for k, v in _reference(scope).items() if k != "namespace"}
    if len(owner) == 4:  # apiVersion, kind, name and uid: an object the API server has
        meta["ownerReferences"] = [owner]
    statuses = ["pass", "fail", "warn"] if passing else ["fail", "warn"]
    return {
        "apiVersion": api.api_version,
        "kind": api.kind if namespace else api.cluster_kind,
        "metadata": meta,
        "scope": _reference(scope),
        "source": SOURCE,
        "configuration": {"limits": {"maxResults": MAX_RESULTS, "statusFilter": statuses}},
        "summary": summary,
        "results": listed,
    }


def _reference(obj: Obj) -> dict[str, str]:
    """``obj`` as an ObjectReference."""
    ref = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "name": inventory.name_of(obj),
        "namespace": inventory.namespace_of(obj),
        "uid": inventory.uid_of(obj),
    }
    return {k: v for k, v in ref.items() if v}


def _untouched(result: AuditResult) -> bool:
    # A DaemonSet is left alone (skipped) and may yet have a problem: it counts as failing.
    return result.verdict.skipped is not None and not result.problems


# --- the results ---------------------------------------------------------------------------

Listed = tuple[AuditResult, Problem | None]  # a finding, or a clean object (None)


def _contents(
    results: Iterable[AuditResult], policy: Policy, now: float, *, passing: bool, scope: Obj | None
) -> tuple[dict[str, int], list[Obj]]:
    """The summary of ``results`` and the results to list: every finding, then (``passing``)
    every clean object, at most ``MAX_RESULTS`` in all, the last a ``warn`` saying how many
    more there are."""
    summary = dict.fromkeys(STATUSES, 0)
    failed: list[Listed] = []
    passed: list[Listed] = []
    for result in results:
        if _untouched(result):
            summary["skip"] += 1
        elif not result.problems:
            summary["pass"] += 1
            passed.append((result, None))
        failed += [(result, problem) for problem in result.problems]
    summary["fail"] = len(failed)
    chosen = failed + passed if passing else failed
    room = MAX_RESULTS if len(chosen) <= MAX_RESULTS else MAX_RESULTS - 1
    scope_uid = inventory.uid_of(scope) if scope is not None else ""
    listed = [_result(r, p, policy, now, scope_uid) for r, p in chosen[:room]]
    if len(chosen) > room:
        where = inventory.namespace_of(scope if scope is not None else chosen[0][0].obj)
        listed.append(_left_out(chosen[room:], policy, now, where))
        summary["warn"] += 1
    return summary, listed


def _result(
    result: AuditResult, problem: Problem | None, policy: Policy, now: float, scope_uid: str
) -> Obj:
    """A ``fail`` result for ``problem``, a ``pass`` result for a clean object; its object in
    ``resources`` unless it is the report's scope."""
    entry: Obj = {
        "policy": _policy_name(policy),
        "rule": problem.code.value if problem else PASS_RULE,
        "category": CATEGORY,
        "result": "fail" if problem else "pass",
    }
    if problem:
        entry["severity"] = problem.severity
    entry |= {
        "scored": True,
        "source": SOURCE,
        "message": problem.message if problem else _clean(result),
    }
    uid = inventory.uid_of(result.obj)
    if not uid or uid != scope_uid:
        entry["resources"] = [_reference(result.obj) | {"kind": result.kind}]
    entry["properties"] = _properties(result)
    entry["timestamp"] = _timestamp(now)
    return entry


def _clean(result: AuditResult) -> str:
    if result.kind == "Pod":
        return (
            "placed as its class requires: the webhook would neither refuse nor change this pod "
            "now, and it is on no node its class must keep off"
        )
    return f"the webhook would not refuse this {result.kind}'s pod template now"


def _properties(result: AuditResult) -> dict[str, str]:
    v = result.verdict
    properties = {
        "class": v.workload_class or inventory.UNCLASSIFIED,
        "classSource": v.class_source,
        "codes": v.codes,
    }
    if result.node is not None:
        properties["node"] = result.node
        properties["nodeClass"] = result.node_class or inventory.UNKNOWN
    if result.phase is not None:
        properties["phase"] = result.phase
    return {k: v for k, v in properties.items() if v}


def _left_out(missing: Sequence[Listed], policy: Policy, now: float, namespace: str) -> Obj:
    findings = sum(problem is not None for _, problem in missing)
    counts = [f"{findings} more findings"] if findings else []
    if len(missing) > findings:
        counts.append(f"{len(missing) - findings} more passing objects")
    where = f" -n {namespace}" if namespace else ""
    return {
        "policy": _policy_name(policy),
        "rule": "truncated",
        "category": CATEGORY,
        "result": "warn",
        "severity": "info",
        "scored": False,
        "source": SOURCE,
        "message": f"{' and '.join(counts)} are not listed here: run `preemptguard audit"
        f"{where}` to see them all",
        "timestamp": _timestamp(now),
    }


def _policy_name(policy: Policy) -> str:
    return f"preemptguard/{policy.name}"


def _timestamp(now: float) -> dict[str, int]:
    return {"seconds": int(now), "nanos": 0}


# --- writing -------------------------------------------------------------------------------


def publish(
    cluster: Cluster,
    audit: Audit,
    policy: Policy,
    *,
    now: float,
    target: Target | None = None,
    passing: bool = False,
) -> Published:
    """Write the reports of ``audit`` in ``target``'s format (default: ``choose``), and retire
    what earlier runs wrote in the namespaces audited that this run does not write again (and
    their reports of ``target.others``).

    Raises ``ClusterError``; when the cluster does not serve the format, with what to do.
    """
    chosen = target if target is not None else choose(cluster)
    api = chosen.api
    wanted = build(audit, policy, now=now, api=api, passing=passing)
    earlier = _earlier(cluster, api, audit, required=True)
    written = 0
    for key, body in sorted(wanted.items()):
        if not _same(earlier.get(key), body):
            cluster.apply(_path(api, key), body)
            written += 1
    stale = {key: old for key, old in earlier.items() if key not in wanted}
    retired = sum(_retire(cluster, api, key, old) for key, old in sorted(stale.items()))
    for other in chosen.others:
        found = _earlier(cluster, other, audit, required=False)
        retired += sum(_retire(cluster, other, key, old) for key, old in sorted(found.items()))
    names = [f"{ns}/{name}" if ns else name for ns, name in sorted(wanted)]
    return Published(api, names, written, retired)


def write(
    cluster: Cluster,
    audit: Audit,
    policy: Policy,
    *,
    now: float,
    target: Target | None = None,
    passing: bool = False,
) -> list[str]:
    """``publish``, and the reports of this run."""
    return publish(cluster, audit, policy, now=now, target=target, passing=passing).reports


def _earlier(cluster: Cluster, api: ReportApi, audit: Audit, *, required: bool) -> dict[Key, Obj]:
    """The reports preemptguard wrote in ``api``'s format (its label) in the namespaces
    audited, and its cluster-scoped ones when the audit covered every namespace. A resource
    the cluster does not serve is an error when ``required``, else has none."""
    resources = [api.resource]
    if api.cluster_resource is not None and audit.everywhere:
        resources.append(api.cluster_resource)
    selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
    in_scope = set(audit.namespaces)
    found: dict[Key, Obj] = {}
    for resource in resources:
        where = path(resource, group=api.group, version=api.version)
        try:
            items = cluster.list_all(where, params={"labelSelector": selector}).items
        except ClusterError as exc:
            if not exc.not_found:
                raise
            if required:
                raise ClusterError(
                    f"this cluster does not serve {api.api_version} {resource}: install "
                    f"{api.install}, or run the audit without --report",
                    status=404,
                ) from None
            continue
        for item in items:
            namespace = inventory.namespace_of(item)
            if namespace in in_scope or (not namespace and resource == api.cluster_resource):
                found[(namespace, inventory.name_of(item))] = item
    return found


def _retire(cluster: Cluster, api: ReportApi, key: Key, old: Obj) -> int:
    """Delete an earlier report (a PolicyReport: empty it); 1 when something was done."""
    if not api.per_object:
        body = _namespaced(api, key[0], dict.fromkeys(STATUSES, 0), [])
        if _same(old, body):
            return 0
        cluster.apply(_path(api, key), body)
        return 1
    try:
        cluster.delete(_path(api, key), uid=inventory.uid_of(old) or None)
    except ClusterError as exc:
        if exc.not_found or exc.conflict:  # gone already (its object was), or made anew
            return 0
        raise
    return 1


def _path(api: ReportApi, key: Key) -> str:
    namespace, name = key
    if namespace:
        return path(
            api.resource, group=api.group, version=api.version, namespace=namespace, name=name
        )
    assert api.cluster_resource is not None
    return path(api.cluster_resource, group=api.group, version=api.version, name=name)


def _same(old: Obj | None, new: Obj) -> bool:
    """Whether ``old`` (as stored) already says what ``new`` says, the results' timestamps
    aside: then it is not written again."""
    if old is None:
        return False
    meta, stored = new["metadata"], inventory.meta_of(old)
    labels = stored.get("labels") or {}
    if any(labels.get(k) != v for k, v in meta["labels"].items()):
        return False
    if stored.get("ownerReferences") != meta.get("ownerReferences"):
        return False
    fields = [k for k in new if k not in ("apiVersion", "kind", "metadata", "results")]
    return all(old.get(k) == new[k] for k in fields) and _untimed(old.get("results")) == (
        _untimed(new["results"])
    )


def _untimed(results: Any) -> list[Any]:
    if not isinstance(results, list):
        return []
    return [
        {k: v for k, v in r.items() if k != "timestamp"} if isinstance(r, dict) else r
        for r in results
    ]
