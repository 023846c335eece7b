"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager locally until Ctrl-C.

    .venv/bin/python -m harness [--release 1.37|1.20] [--packing-scheduler]

Prints an ``export KUBECONFIG=...`` line (an admin's); the control plane is the one the
end-to-end tests use. Add fake nodes with ``harness.cluster.create_node`` or plain
``kubectl create -f node.yaml``. ``--packing-scheduler`` also runs the second scheduler of
``manifests/components/packing-scheduler`` (pods naming ``schedulerName: preemptguard-packing``
go to it; see ``harness.scheduling``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from harness import scheduling
from harness.binaries import MAIN, RELEASES, ControlPlaneError, release
from harness.controlplane import running_control_plane
from harness.manifests import prepare_tree


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
    parser.add_argument(
        "--packing-scheduler",
        action="store_true",
        help="also run the packing scheduler of manifests/components/packing-scheduler",
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
            packing = None
            if args.packing_scheduler:
                work = Path(tempfile.mkdtemp(prefix="packing-", dir=cp.workdir))
                with cp.client() as kube:
                    objects = scheduling.render_component(prepare_tree(work))
                    packing = scheduling.start_packing_scheduler(cp, kube, objects, work)
                print(
                    f"# packing scheduler {scheduling.SCHEDULER_NAME} on port {packing.port}; "
                    f"its configuration {packing.config_path}, its log {packing.component.log_path}"
                )
            print(f"export KUBECONFIG={cp.kubeconfig}")
            print(
                f"# API server {cp.server}; logs in {cp.workdir}/logs; Ctrl-C stops it", flush=True
            )
            try:
                while True:
                    cp.check_alive()
                    if packing is not None:
                        packing.check_alive()
                    time.sleep(1)
            finally:
                if packing is not None:
                    packing.stop()
    except KeyboardInterrupt:
        return 0
    except (ControlPlaneError, scheduling.SchedulerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
