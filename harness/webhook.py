"""The real ``preemptguard serve`` as a subprocess, and the shipped webhook configurations
pointed at it. Shared by the end-to-end fixtures and ``benchmarks/e2e_bench.py``."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from urllib3.exceptions import InsecureRequestWarning

from harness import cluster
from harness.controlplane import ControlPlane
from harness.kube import Kube, KubeError, write_kubeconfig
from harness.manifests import NAMESPACE, SERVICE, find
from harness.processes import free_port, wait_until

HOOK_PATHS = {"/mutate", "/validate"}
CONFIG_KINDS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


class ServerError(RuntimeError):
    pass


@dataclass
class WebhookServer:
    url: str
    ca_file: Path
    metrics_url: str
    log_path: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def all_admissions(self) -> list[dict[str, Any]]:
        """The server's log records of every review it answered, in order. A review refused
        before it was read (too many large ones at once: outcome ``busy``) has no namespace
        or name."""
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "admission":
                records.append(record)
        return records

    def admissions(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        """The server's log records of reviews it answered for objects in ``namespace``."""
        return [
            record
            for record in self.all_admissions()
            if record.get("namespace") == namespace and (name is None or record.get("name") == name)
        ]

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ServerError(
                f"preemptguard serve exited with {self.proc.returncode}:\n{self.log_tail()}"
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# Installs webhook configurations in place of the session's (the replace_configurations fixture).
Replace = Callable[[list[dict[str, Any]]], None]


def service_account_kubeconfig(
    kube: Kube, control_plane: ControlPlane, base: list[dict[str, Any]], path: Path
) -> Path:
    """A kubeconfig holding a token of the shipped ServiceAccount, bound by the shipped RBAC.

    The server then reads namespaces with exactly the rights an install grants it.
    """
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        obj = find(base, kind)
        api = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
        plural = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts"}.get(
            kind, kind.lower() + "s"
        )
        ns = obj["metadata"].get("namespace")
        collection = f"{api}/namespaces/{ns}/{plural}" if ns else f"{api}/{plural}"
        try:
            kube.create(collection, obj)
        except KubeError as exc:
            if exc.status != 409:
                raise
    token = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ).body["status"]["token"]
    return write_kubeconfig(path, control_plane.server, control_plane.ca_file, token, SERVICE)


def _serve_command() -> list[str]:
    """``preemptguard serve`` as users run it (``python -m webhook`` is the same console entry)."""
    return [sys.executable, "-m", "webhook", "serve"]


def start_server(
    work: Path,
    base: list[dict[str, Any]],
    kubeconfig: Path,
    *,
    log_level: str = "info",
    certificates: list[str] | None = None,
) -> WebhookServer:
    """``preemptguard serve`` on 127.0.0.1 with the policy the base's ConfigMap ships; returns
    once /readyz answers. ``certificates``: serve's certificate options, instead of a
    self-signed pair in ``work/certs`` (/readyz is then polled without checking the server's
    certificate: it comes from the cluster)."""
    policies = work / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    for key, text in find(base, "ConfigMap")["data"].items():
        (policies / key).write_text(text)
    port, metrics_port = free_port(), free_port()
    certs = work / "certs"
    log_path = work / "server.log"
    # Unbuffered, so that its log lines are in the file by the time a test reads them.
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    argv = [
        *_serve_command(),
        *(certificates if certificates is not None else ["--self-signed", str(certs)]),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--policies",
        str(policies),
        "--log-level",
        log_level,
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = WebhookServer(
        url=f"https://127.0.0.1:{port}",
        ca_file=certs / "ca.crt",
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
        log_path=log_path,
        proc=proc,
    )

    def ready() -> bool:
        server.check_alive()
        verify: str | bool = False if certificates is not None else str(server.ca_file)
        if verify and not server.ca_file.exists():
            return False
        with requests.Session() as s, warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureRequestWarning)
            s.trust_env = False
            try:
                return s.get(f"{server.url}/readyz", verify=verify, timeout=2).ok
            except requests.ConnectionError:
                if certificates is None:
                    raise
                return False  # still waiting for its certificate from the cluster

    try:
        wait_until(
            ready,
            timeout=60,
            what="preemptguard serve /readyz",
            interval=0.2,
            fatal=(ServerError,),
        )
    except (TimeoutError, ServerError) as exc:
        server.stop()
        raise ServerError(f"{exc}\n{server.log_tail()}") from None
    return server


def local_webhook_configurations(
    base: list[dict[str, Any]], server_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """The base's webhook configurations with each Service reference replaced by a URL on
    127.0.0.1 (same path) and the local CA: every other field is the shipped one."""
    configs = []
    ca_bundle = base64.b64encode(ca_pem).decode()
    for kind in CONFIG_KINDS:
        config = copy.deepcopy(find(base, kind))
        for hook in config["webhooks"]:
            service = hook["clientConfig"].pop("service")
            if service["path"] not in HOOK_PATHS:
                raise ServerError(f"{hook['name']}: unexpected path {service['path']}")
            hook["clientConfig"] = {"url": server_url + service["path"], "caBundle": ca_bundle}
        configs.append(config)
    return configs


def config_path(config: dict[str, Any], *, item: bool = False) -> str:
    path = f"/apis/admissionregistration.k8s.io/v1/{CONFIG_KINDS[config['kind']]}"
    return f"{path}/{config['metadata']['name']}" if item else path


def register(kube: Kube, server: WebhookServer, base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply the configurations and wait until the API server calls every hook.

    The base's PriorityClasses go first: the default policy gives batch pods one of them, and
    the webhook refuses a class whose PriorityClass the cluster does not have."""
    for obj in base:
        if obj.get("kind") == "PriorityClass":
            name = obj["metadata"]["name"]
            kube.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", obj)
    configs = local_webhook_configurations(base, server.url, server.ca_file.read_bytes())
    for config in configs:
        kube.apply(config_path(config, item=True), config)
    probe_ns = cluster.unique("probe")
    cluster.create_namespace(kube, probe_ns)
    wait_until_active(kube, probe_ns, server)
    return configs


def unregister(kube: Kube, configs: list[dict[str, Any]]) -> None:
    for config in configs:
        kube.delete(config_path(config, item=True), grace_seconds=None)


def wait_until_active(kube: Kube, namespace: str, server: WebhookServer) -> None:
    """The API server loads new configurations asynchronously: probe each hook with dry runs."""
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def both_pod_hooks() -> bool:
        # A pod both hooks allow: the mutation shows in the answer, the validation only in the
        # server's log (a refusal would come from the mutating hook first).
        server.check_alive()
        body = kube.create(pods, cluster.pod("probe", workload="interruptible"), dry_run=True).body
        mutated = cluster.PLACEMENT in body["metadata"].get("annotations", {})
        validated = any(
            r["hook"] == "validate" and r["kind"] == "Pod" for r in server.admissions(namespace)
        )
        return mutated and validated

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "probe"},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": cluster.pod_template({"app": "probe"}, workload="flexible"),
        },
    }

    def workload_hook() -> bool:
        # One the hook allows: an admission policy that refuses first (an install's own
        # ValidatingAdmissionPolicy) would keep a refused one from reaching the webhook.
        server.check_alive()
        kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment, dry_run=True)
        return any(
            r["hook"] == "validate" and r["kind"] == "Deployment"
            for r in server.admissions(namespace)
        )

    try:
        wait_until(
            both_pod_hooks,
            timeout=30,
            what="both pod webhooks",
            interval=0.2,
            fatal=(ServerError,),
        )
        wait_until(
            workload_hook, timeout=30, what="the workload validating webhook", fatal=(ServerError,)
        )
    except TimeoutError as exc:
        raise ServerError(f"{exc}\n{server.log_tail()}") from None
