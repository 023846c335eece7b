"""The audit as ``wgpolicyk8s.io/v1alpha2`` PolicyReports: one per namespace, named
``preemptguard``, in the format Kyverno and other policy engines publish and dashboards
(Policy Reporter, ...) read.

Each finding is a ``fail`` result naming the object; clean objects are counted in
``summary.pass`` and untouched ones in ``summary.skip`` rather than listed, so a namespace of
thousands of pods stays well under the API server's object size limit (results past
``MAX_RESULTS`` are counted, and one ``warn`` result says how many are not listed). A namespace
whose earlier report is now clean gets an empty one. Written by server-side apply, so a run
replaces what the previous run wrote and nothing else.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from webhook.cluster import inventory
from webhook.cluster.audit import Audit, AuditResult
from webhook.engine.decision import Obj
from webhook.engine.policy import Policy
from webhook.kube.client import Cluster, ClusterError, path

GROUP, VERSION, RESOURCE, KIND = "wgpolicyk8s.io", "v1alpha2", "policyreports", "PolicyReport"
API_VERSION = f"{GROUP}/{VERSION}"
REPORT_NAME = "preemptguard"
SOURCE = "preemptguard"
CATEGORY = "placement"
MANAGED_BY = {"app.kubernetes.io/managed-by": "preemptguard"}
MAX_RESULTS = 1000


def build(audit: Audit, policy: Policy, *, now: float) -> dict[str, Obj]:
    """The report of every namespace with something judged in it, by namespace."""
    by_namespace: dict[str, list[AuditResult]] = defaultdict(list)
    for result in audit.results:
        if result.namespace:
            by_namespace[result.namespace].append(result)
    reports = {}
    for namespace, results in sorted(by_namespace.items()):
        if all(r.judgement.decision.skipped is not None and not r.problems for r in results):
            continue  # an excluded namespace: nothing there is preemptguard's to report
        reports[namespace] = report(namespace, results, policy, now=now)
    return reports


def report(namespace: str, results: Iterable[AuditResult], policy: Policy, *, now: float) -> Obj:
    """One namespace's PolicyReport."""
    summary = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    listed: list[Obj] = []
    for result in results:
        # A DaemonSet is left alone (skipped) and may yet have a problem: it counts as failing.
        if result.judgement.decision.skipped is not None and not result.problems:
            summary["skip"] += 1
        elif not result.problems:
            summary["pass"] += 1
        for problem in result.problems:
            summary["fail"] += 1
            if len(listed) < MAX_RESULTS:
                listed.append(_result(result, problem.code.value, problem.severity,
                                      problem.message, policy, now))  # fmt: skip
    if summary["fail"] > len(listed):
        missing = summary["fail"] - len(listed)
        listed.append(
            {
                "policy": _policy_name(policy),
                "rule": "truncated",
                "category": CATEGORY,
                "result": "warn",
                "severity": "info",
                "scored": False,
                "source": SOURCE,
                "message": f"{missing} more findings are not listed here: "
                f"run `preemptguard audit -n {namespace}` to see them all",
                "timestamp": _timestamp(now),
            }
        )
        summary["warn"] += 1
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "summary": summary,
        "results": listed,
    }


def empty(namespace: str) -> Obj:
    """The report of a namespace where nothing is wrong any more (and nothing is judged)."""
    return report(namespace, (), Policy(name="-"), now=0)


def _result(
    result: AuditResult, rule: str, severity: str, message: str, policy: Policy, now: float
) -> Obj:
    d = result.judgement.decision
    properties = {
        "class": d.workload_class or inventory.UNCLASSIFIED,
        "classSource": d.classification.source,
        "codes": ",".join(sorted({f.code.value for f in (*d.refusals, *d.changes)})),
    }
    if result.node is not None:
        properties["node"] = result.node
        properties["nodeClass"] = result.node_class or inventory.UNKNOWN
    if result.phase is not None:
        properties["phase"] = result.phase
    return {
        "policy": _policy_name(policy),
        "rule": rule,
        "category": CATEGORY,
        "result": "fail",
        "severity": severity,
        "scored": True,
        "source": SOURCE,
        "message": message,
        "resources": [
            {
                "apiVersion": str(result.obj.get("apiVersion") or ""),
                "kind": result.kind,
                "namespace": result.namespace,
                "name": result.name,
                "uid": inventory.uid_of(result.obj),
            }
        ],
        "properties": {k: v for k, v in properties.items() if v},
        "timestamp": _timestamp(now),
    }


def _policy_name(policy: Policy) -> str:
    return f"preemptguard/{policy.name}"


def _timestamp(now: float) -> dict[str, int]:
    return {"seconds": int(now), "nanos": 0}


def write(cluster: Cluster, audit: Audit, policy: Policy, *, now: float) -> list[str]:
    """Apply the reports of ``audit``, and an empty one where an earlier run's report is in a
    namespace of the audit that has nothing to report now; returns the namespaces written.

    Raises ``ClusterError``; when the PolicyReport CRD is not installed, with what to do.
    """
    reports = build(audit, policy, now=now)
    try:
        earlier = cluster.list_all(
            path(RESOURCE, group=GROUP, version=VERSION),
            params={"labelSelector": ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())},
        ).items
    except ClusterError as exc:
        if exc.not_found:
            raise ClusterError(
                f"this cluster does not serve {API_VERSION} {KIND}: install the PolicyReport "
                "CRD (Kyverno installs it; so does kubernetes-sigs/wg-policy-prototypes), or "
                "run the audit without --report",
                status=404,
            ) from None
        raise
    in_scope = set(audit.namespaces)
    for old in earlier:
        namespace = inventory.namespace_of(old)
        if namespace in in_scope and namespace not in reports:
            reports[namespace] = empty(namespace)
    for namespace, body in sorted(reports.items()):
        cluster.apply(
            path(RESOURCE, group=GROUP, version=VERSION, namespace=namespace, name=REPORT_NAME),
            body,
        )
    return sorted(reports)


def result_count(reports: dict[str, Any]) -> int:
    return sum(len(r["results"]) for r in reports.values())
