"""Which API calls each part of the live-cluster code makes, as the RBAC rules they need.

Declared once, here, beside the code: ``tests/cluster/test_rbac.py`` checks both ways that the
ClusterRoles in ``manifests/components/observer/`` grant exactly these and nothing more, and
that the calls recorded while the tests run (``Cluster.calls``) are all declared and all made.
The audit's role follows the policy: it lists every workload kind the policy judges
(``audit_access``), so the shipped role is the default policy's (``audit_rules``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.engine.evaluation import kinds_of
from webhook.engine.policy import Policy, WorkloadKind
from webhook.kube.access import Access


def _grant(group: str, resource: str, *verbs: str) -> frozenset[Access]:
    return frozenset(Access(group, resource, verb) for verb in verbs)


def _union(*parts: Iterable[Access]) -> frozenset[Access]:
    return frozenset(a for part in parts for a in part)


# API discovery (which groups and versions the cluster serves). The built-in ClusterRole
# system:discovery grants it to every authenticated user: no shipped role needs to.
DISCOVERY = frozenset({Access("", "/apis", "get")})

# `preemptguard audit`: one paginated list of each kind, nothing per object. These whatever the
# policy; `audit_access` adds the policy's workload kinds.
AUDIT_BASE = _union(
    _grant("", "namespaces", "list"),
    _grant("", "nodes", "list"),
    _grant("", "pods", "list"),
    # Only to confirm that the DaemonSet a pod names as its controller exists (see inventory).
    _grant("apps", "daemonsets", "list"),
)


# `preemptguard audit --report` (webhook.cluster.reports), in either format: the reports it wrote
# before (to retire those with nothing left to report), and server-side apply, which creates a
# report the first time. A wgpolicyk8s.io PolicyReport (one per namespace) is emptied when
# retired, an openreports.io Report (one per object; a ClusterReport for a cluster-scoped one)
# deleted. Its role grants both: it writes whichever the cluster serves.
AUDIT_REPORTS = _grant("wgpolicyk8s.io", "policyreports", "list", "create", "patch")
AUDIT_OPEN_REPORTS = _union(
    _grant("openreports.io", "reports", "list", "create", "patch", "delete"),
    _grant("openreports.io", "clusterreports", "list", "create", "patch", "delete"),
)

# The reclaim observer, cluster-wide: watches, the namespaces of displaced pods without a
# placement record (to classify them), the Deployment behind a ReplicaSet, its Events, and the
# DisruptionTarget condition on the pods of a node being reclaimed (their status only).
OBSERVER = _union(
    _grant("", "nodes", "list", "watch"),
    _grant("", "pods", "list", "watch"),
    _grant("", "pods/status", "patch"),
    _grant("", "events", "list", "watch", "create"),
    _grant("", "namespaces", "get"),
    _grant("apps", "replicasets", "get"),
)

# `preemptguard capacity` (webhook.cluster.capacity_live), and the observer's capacity gauges:
# nodes, namespaces (to classify pods) and every pod, the TogetherPreempted Events in the
# namespace of events about Nodes, and the observer's outcome Events in every namespace.
# The observer's own roles already grant these.
CAPACITY = _union(
    _grant("", "nodes", "list"),
    _grant("", "namespaces", "list"),
    _grant("", "pods", "list"),
    _grant("", "events", "list"),
)

# The observer's leader election, in its own namespace only (a Role, not a ClusterRole).
OBSERVER_LEASE = _grant("coordination.k8s.io", "leases", "get", "create", "update")

# `preemptguard drill NODE`: the node (read, cordon, uncordon), its pods (listed by node,
# given DisruptionTarget, deleted), their namespaces (to classify them) and the
# TogetherPreempted Event.
DRILL = _union(
    _grant("", "nodes", "get", "patch"),
    _grant("", "pods", "list", "delete"),
    _grant("", "pods/status", "patch"),
    _grant("", "namespaces", "get"),
    _grant("", "events", "create"),
)


def audited_kinds(policy: Policy) -> list[WorkloadKind]:
    """The workload kinds ``preemptguard audit`` lists and judges: every kind of the policy
    but those it leaves alone (``ignore``, such as DaemonSets), in the policy's order."""
    return [k for k in kinds_of(policy).values() if k.ignore is None]


def audit_access(policy: Policy) -> frozenset[Access]:
    """What ``preemptguard audit`` lists with ``policy``: ``AUDIT_BASE`` and every kind of
    ``audited_kinds``, at whichever version the cluster serves it (RBAC names no version)."""
    return AUDIT_BASE | frozenset(Access(k.group, k.plural, "list") for k in audited_kinds(policy))


def audit_rules(policy: Policy) -> list[dict[str, Any]]:
    """``audit_access(policy)`` as the rules of a ClusterRole: one rule per API group, the core
    group first, then ``apps``, then in the order the policy first names each group; within a
    group ``AUDIT_BASE``'s resources, then the policy's in its order."""
    resources: dict[str, list[str]] = {}
    for access in sorted(AUDIT_BASE):
        resources.setdefault(access.group, []).append(access.resource)
    for kind in audited_kinds(policy):
        listed = resources.setdefault(kind.group, [])
        if kind.plural not in listed:
            listed.append(kind.plural)
    return [
        {"apiGroups": [group], "resources": listed, "verbs": ["list"]}
        for group, listed in resources.items()
    ]


def cluster_roles(policy: Policy) -> Mapping[str, frozenset[Access]]:
    """The shipped roles, by name (manifests/components/observer/), as ``policy`` needs them:
    the shipped ones are the default policy's."""
    return {
        "preemptguard-audit": audit_access(policy),
        "preemptguard-audit-reports": AUDIT_REPORTS | AUDIT_OPEN_REPORTS,
        "preemptguard-capacity": CAPACITY,
        "preemptguard-observer": OBSERVER,
        "preemptguard-drill": DRILL,
    }


LEASE_ROLE = "preemptguard-observer-lease"
