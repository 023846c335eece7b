"""The live cluster: what runs where it should not (``audit``), what a reclaim did to the pods
it displaced (the reclaim observer) and a rehearsed reclaim (``drill``).

The only layer besides the server that talks to a cluster, and the only one that writes to it.
It judges pods and templates with the same admission core (``webhook.admission``) and policy as
the webhook: nothing here decides placement on its own.

- ``client``: the kubernetes client as plain JSON (lists by page, watches, writes), each call
  recorded as the RBAC verb it needs;
- ``access``: the API calls each part makes, declared once; the shipped ClusterRoles are
  checked against it;
- ``inventory``: what a pod, a node or a workload says, read from the listed objects;
- ``audit``, ``reports``: the audit and its ``wgpolicyk8s.io/v1alpha2`` PolicyReports;
- ``reclaims``: recognising reclaims and deciding each displaced pod's outcome (no I/O);
- ``observer``, ``lease``, ``metrics``: the reclaim observer, its leader election, its metrics;
- ``drill``: a reclaim rehearsed on one preemptible node;
- ``clock``: the time, injectable so that tests need not wait out a 300 s window.
"""
