#!/usr/bin/env python3
"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager locally until Ctrl-C.

    .venv/bin/python hack/control-plane.py [--release 1.37|1.20]

The same as ``python -m harness`` run from the repository root (see harness/__main__.py):
prints an ``export KUBECONFIG=...`` line; Ctrl-C stops everything.
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # `-m` finds the harness package in the working directory: the repository root.
    os.chdir(Path(__file__).resolve().parents[1])
    os.execv(sys.executable, [sys.executable, "-m", "harness", *sys.argv[1:]])
