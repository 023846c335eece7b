#!/usr/bin/env python3
"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager locally until Ctrl-C.

    .venv/bin/python hack/control-plane.py

Prints an ``export KUBECONFIG=...`` line; the control plane is the one the end-to-end tests use.
Add fake nodes with ``tests.e2e.cluster.create_node`` or plain ``kubectl create -f node.yaml``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.controlplane import main

if __name__ == "__main__":
    sys.exit(main())
