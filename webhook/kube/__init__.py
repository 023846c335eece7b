"""Kubernetes as every other layer reaches it: one client, one list-and-watch loop, one lease.

The server's caches (namespaces, PriorityClasses) and the live-cluster features (audit, the
reclaim observer, drills) are built on these; nothing else imports the ``kubernetes`` client.

- ``client``: the API server spoken to in JSON (lists by page, watches, writes), each call
  recorded as the RBAC permission it needs (``access``);
- ``reflector``: a collection listed, then watched, for good: relisted after any failure;
- ``watchcache``: objects of one kind by name, kept by a reflector, read directly when the
  cache does not hold one;
- ``lease``: leader election on a ``coordination.k8s.io/v1`` Lease;
- ``clock``: the time, injectable, and the API server's notation of it.
"""
