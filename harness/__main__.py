"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager locally until Ctrl-C.

    .venv/bin/python -m harness [--release 1.37|1.20]

Prints an ``export KUBECONFIG=...`` line (an admin's); the control plane is the one the
end-to-end tests use. Add fake nodes with ``harness.cluster.create_node`` or plain
``kubectl create -f node.yaml``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from harness.binaries import MAIN, RELEASES, ControlPlaneError, release
from harness.controlplane import running_control_plane


def main(argv: list[str] | None = None) -> int:
    """Bring a control plane up, print how to reach it, and keep it until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m harness", description="A local Kubernetes control plane until Ctrl-C."
    )
    parser.add_argument(
        "--release",
        choices=sorted(RELEASES),
        default=MAIN.name,
        help=f"Kubernetes release (default {MAIN.name})",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # A shell starts background jobs with SIGINT ignored; Ctrl-C and `kill -INT` still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        print(
            f"starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager "
            f"(Kubernetes {args.release}) ...",
            flush=True,
        )
        with running_control_plane(release(args.release)) as cp:
            print(f"export KUBECONFIG={cp.kubeconfig}")
            print(
                f"# API server {cp.server}; logs in {cp.workdir}/logs; Ctrl-C stops it", flush=True
            )
            while True:
                cp.check_alive()
                time.sleep(1)
    except KeyboardInterrupt:
        return 0
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
