"""A real single-machine Kubernetes control plane for the end-to-end tests, the benchmarks and
manual experiments, with the real ``preemptguard serve`` and the shipped manifests on top.

Not part of the shipped package (``webhook``): it starts processes, builds or finds binaries and
talks to a throwaway cluster.

- ``binaries``: which Kubernetes releases the harness knows, and their binaries;
- ``processes``: free ports, polling, one child process per component;
- ``pki``: the throwaway CA, serving certificate, service-account keys and tokens;
- ``kube``: a small JSON client for the API server, and kubeconfig files;
- ``controlplane``: etcd, kube-apiserver, kube-scheduler and kube-controller-manager;
- ``cluster``: fake nodes of both compute classes, namespaces, pods;
- ``manifests``: ``manifests/`` rendered by kustomize;
- ``webhook``: the real ``preemptguard serve`` and the shipped webhook configurations;
- ``scheduling``: the packing scheduler of ``manifests/components/packing-scheduler``, a second
  kube-scheduler on the shipped configuration;
- ``python -m harness``: a control plane until Ctrl-C.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
