"""The JobSet controller (sigs.k8s.io/jobset, built by ``hack/jobset-controller.sh``) run
against the local control plane, so that a JobSet lives as on a cluster: defaulted and
validated by its own webhooks, its Jobs made from its replicated job templates as stored, its
status following theirs.

Its webhook server listens on loopback with a throwaway certificate; upstream's JobSet
webhooks (``webhooks.yaml`` beside the binary) are registered with the API server pointing
there. Its pod webhooks are not: they would take part in every pod create of the session's
shared control plane, for features (exclusive placement, startup order) these tests do not
use. Leader election, certificate management and metrics are off.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import yaml

from harness import REPO
from harness.controlplane import ControlPlane
from harness.kube import Kube
from harness.pki import write_serving_tls
from harness.processes import Component, ComponentExited, free_port, http_status, wait_until

SCRIPT = REPO / "hack" / "jobset-controller.sh"
READY_TIMEOUT = 60.0
PREFIX = "jobset-"  # of the webhook configurations' names

Obj = dict[str, Any]


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


def start(cp: ControlPlane, kube: Kube, work: Path) -> Component:
    """The controller running against ``cp`` (the JobSet CRD installed first), once ready,
    and its JobSet webhooks registered."""
    work.mkdir(parents=True, exist_ok=True)
    tls = write_serving_tls(work, ["127.0.0.1"])
    health, port = free_port(), free_port()
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(tls.cert.parent)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
    }
    config_file = work / "jobset-config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    program = binary()
    argv = [str(program), f"--config={config_file}", f"--kubeconfig={cp.kubeconfig}"]
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
    ca = base64.b64encode(tls.ca.read_bytes()).decode()
    manifest = program.parent.parent / "webhooks.yaml"
    if not manifest.is_file():
        controller.stop()
        raise JobSetControllerError(
            f"no {manifest}: the JobSet webhooks of the controller's release (upstream's "
            "config/components/webhook/manifests.yaml) go there, beside its bin/ folder"
        )
    for configuration in webhooks(manifest, port, ca):
        kube.apply(_configuration_path(configuration), configuration)
    return controller


def stop(controller: Component, kube: Kube) -> None:
    """The JobSet webhooks unregistered, then the controller stopped."""
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        name = f"{PREFIX}{kind.removesuffix('WebhookConfiguration').lower()}-webhook-configuration"
        kube.delete(_configuration_path({"kind": kind, "metadata": {"name": name}}))
    controller.stop()


def _configuration_path(configuration: Obj) -> str:
    kind = configuration["kind"].lower() + "s"
    return f"/apis/admissionregistration.k8s.io/v1/{kind}/{configuration['metadata']['name']}"


def webhooks(manifest: Path, port: int, ca_bundle: str) -> list[Obj]:
    """Upstream's webhook configurations, with only the JobSet webhooks, each sent to
    ``https://127.0.0.1:port`` at its own path and named after the release."""
    made = []
    for configuration in yaml.safe_load_all(manifest.read_text()):
        if not configuration:
            continue
        kept = []
        for hook in configuration["webhooks"]:
            if not any("jobsets" in rule["resources"] for rule in hook["rules"]):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            kept.append(hook)
        configuration["metadata"]["name"] = PREFIX + configuration["metadata"]["name"]
        configuration["webhooks"] = kept
        made.append(configuration)
    return made
