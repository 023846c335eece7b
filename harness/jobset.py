"""The JobSet controller (sigs.k8s.io/jobset, built by ``hack/jobset-controller.sh``) run
against the local control plane, so that a JobSet lives as on a cluster: its Jobs made from
its replicated job templates as stored, its status following theirs.

Its own admission webhooks are not registered with the API server (only its controllers are
wanted): the JobSet CRD's defaults stand in for its defaulting webhook, and its webhook server
listens on loopback with a throwaway certificate that nothing calls. Leader election and
certificate management are off; metrics are off.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from harness import REPO
from harness.controlplane import ControlPlane
from harness.pki import write_serving_tls
from harness.processes import Component, ComponentExited, free_port, http_status, wait_until

SCRIPT = REPO / "hack" / "jobset-controller.sh"
READY_TIMEOUT = 60.0


class JobSetControllerError(RuntimeError):
    """The controller could not be built or did not become ready; the message says why."""


def binary() -> Path:
    """What ``hack/jobset-controller.sh`` finds or builds."""
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise JobSetControllerError(
            f"hack/jobset-controller.sh failed ({proc.returncode}):\n{tail}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def start(cp: ControlPlane, work: Path) -> Component:
    """The controller running against ``cp`` (the JobSet CRD installed first), once ready."""
    work.mkdir(parents=True, exist_ok=True)
    tls = write_serving_tls(work, ["127.0.0.1"])
    health = free_port()
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(tls.cert.parent)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
    }
    config_file = work / "jobset-config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    argv = [str(binary()), f"--config={config_file}", f"--kubeconfig={cp.kubeconfig}"]
    controller = Component("jobset-controller", argv, work / "jobset-controller.log")
    controller.start()

    def ready() -> bool:
        controller.check_alive()
        try:
            return http_status(health, "/readyz") == 200
        except OSError:
            return False

    try:
        wait_until(ready, timeout=READY_TIMEOUT, what="the JobSet controller to be ready")
    except (TimeoutError, ComponentExited):
        tail = controller.log_tail(40)
        controller.stop()
        raise JobSetControllerError(f"the JobSet controller did not start:\n{tail}") from None
    return controller
