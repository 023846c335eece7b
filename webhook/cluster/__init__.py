"""The live cluster: what runs where it should not (``audit``), what a reclaim did to the pods
it displaced (the reclaim observer) and a rehearsed reclaim (``drill``).

The only layer that writes to a cluster, through ``webhook.kube``. It judges pods and
templates with the same admission core (``webhook.admission``) and policy as the webhook:
nothing here decides placement on its own.

- ``inventory``: what a pod, a node or a workload says, read from the listed objects;
- ``audit``, ``reports``: the audit and its ``wgpolicyk8s.io/v1alpha2`` PolicyReports;
- ``reclaims``: recognising reclaims and deciding each displaced pod's outcome (no I/O);
- ``observer``, ``metrics``: the reclaim observer and its metrics;
- ``drill``: a reclaim rehearsed on one preemptible node.
"""
