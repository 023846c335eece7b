"""A second kube-scheduler beside the control plane's own, running the packing profile that
``manifests/components/packing-scheduler`` ships, with the component's own identity.

What a local run takes from the component, and what it changes:

- the ``KubeSchedulerConfiguration`` is read from the component's ConfigMap as kustomize renders
  it, and only ``clientConnection.kubeconfig`` is rewritten: in a pod the scheduler uses its
  ServiceAccount's in-cluster credentials (an empty kubeconfig), here there is no pod, so a
  kubeconfig holding a token of that same ServiceAccount stands in for them;
- the leader election stays as shipped (on, the ``preemptguard-packing-scheduler`` Lease in
  ``preemptguard-system``): the scheduler runs as the component's ServiceAccount, with the
  component's ClusterRoleBindings, RoleBindings and Role applied as shipped, so its Lease is
  exactly where the shipped Role lets it write;
- what a Deployment says in flags rather than in the configuration differs as for the control
  plane's scheduler (``harness.controlplane``): a free port on 127.0.0.1, the kubeconfig for
  checking callers of that port, and ``--authentication-skip-lookup`` where the binary has it
  (the local API server has no client CA, so kube-system holds no
  ``extension-apiserver-authentication`` ConfigMap to read; the RoleBinding that grants reading
  it is checked by a SubjectAccessReview instead).

Kubernetes 1.20 predates ``kubescheduler.config.k8s.io/v1`` (1.25). Its scheduler reads
``v1beta1``, where the same scoring is spelled differently: MostAllocated is a score plugin of
its own (``NodeResourcesMostAllocated``, in place of the default ``NodeResourcesLeastAllocated``)
rather than a scoring strategy of ``NodeResourcesFit``, and there is no ``multiPoint``.
``v1beta1_configuration`` translates exactly the constructs the shipped file uses and refuses
anything else, so the 1.20 run cannot silently drift from what is shipped. That release also
serves health checks over plain HTTP on 0.0.0.0:10251 unless told otherwise (gone from ``v1``),
which would collide with any other 1.20 scheduler on the machine: it gets a free port on
127.0.0.1.
"""

from __future__ import annotations

import copy
import http.client
import json
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.controlplane import ControlPlane
from harness.kube import Kube, write_kubeconfig
from harness.manifests import NAMESPACE, Tree, find, kustomize
from harness.processes import (
    Component,
    ComponentExited,
    free_port,
    https_status,
    wait_until,
)

Obj = dict[str, Any]

COMPONENT = "components/packing-scheduler"
SCHEDULER_NAME = "preemptguard-packing"
ACCOUNT = "preemptguard-packing-scheduler"
CONFIG_MAP_PREFIX = "preemptguard-packing-scheduler-config-"
CONFIG_KEY = "config.yaml"
# kubescheduler.config.k8s.io/v1 is served from 1.25 on.
V1_SINCE = 25
START_TIMEOUT = 60.0

# An overlay beside the shipped ones, adding the component as its kustomization says.
_OVERLAY = "packing-scheduler-example"
_KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../cert-manager
components:
  - ../../components/packing-scheduler
"""
_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}
# What the shipped configuration may hold for v1beta1_configuration to translate it.
_TOP_LEVEL = {
    "apiVersion",
    "kind",
    "clientConnection",
    "leaderElection",
    "percentageOfNodesToScore",
    "profiles",
}
_PROFILE = {"schedulerName", "plugins", "pluginConfig"}
# Plugins that only score: disabling them at every extension point (v1 multiPoint) is
# disabling their score in v1beta1.
_SCORE_ONLY = {"NodeResourcesBalancedAllocation", "ImageLocality"}
# Plugin arguments v1beta1 reads in the same shape as v1.
_SAME_ARGS = {"PodTopologySpread"}


class SchedulerError(RuntimeError):
    pass


# --- the component ---------------------------------------------------------------------------


def render_component(tree: Tree) -> list[Obj]:
    """Every object of an install with the component added to an overlay (kustomize)."""
    overlay = tree.root / "overlays" / _OVERLAY
    overlay.mkdir(exist_ok=True)
    (overlay / "kustomization.yaml").write_text(_KUSTOMIZATION)
    proc = subprocess.run(
        [kustomize(), "build", str(overlay)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SchedulerError(f"kustomize build of {COMPONENT} failed:\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def component_objects(objects: list[Obj]) -> list[Obj]:
    """The component's own objects among an install's."""
    return [
        o
        for o in objects
        if o["metadata"]["name"].startswith(ACCOUNT)
        or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "packing-scheduler"
    ]


def shipped_configuration(objects: list[Obj]) -> Obj:
    """The KubeSchedulerConfiguration in the component's ConfigMap."""
    maps = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(CONFIG_MAP_PREFIX)
    ]
    if len(maps) != 1:
        raise SchedulerError(f"expected one ConfigMap {CONFIG_MAP_PREFIX}*, found {len(maps)}")
    config = yaml.safe_load(maps[0]["data"][CONFIG_KEY])
    if not isinstance(config, dict):
        raise SchedulerError(f"{CONFIG_KEY} is not a mapping")
    return config


def local_configuration(
    shipped: Obj, *, kubeconfig: Path, minor: int, insecure_port: int | None = None
) -> Obj:
    """The shipped configuration for a scheduler of release 1.``minor`` run here (see the
    module): the kubeconfig rewritten, and on releases before 1.25 translated to v1beta1."""
    config = copy.deepcopy(shipped)
    config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
    if minor >= V1_SINCE:
        return config
    if insecure_port is None:
        raise SchedulerError(f"a 1.{minor} scheduler needs a port for its plain-HTTP health checks")
    return v1beta1_configuration(config, insecure_port)


def v1beta1_configuration(config: Obj, insecure_port: int) -> Obj:
    """``config`` (kubescheduler.config.k8s.io/v1) as its 1.20 equivalent; refuses anything
    it does not know how to translate."""
    if config.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        raise SchedulerError(f"not a v1 configuration: {config.get('apiVersion')}")
    _only(config, _TOP_LEVEL, "the configuration")
    out = {k: copy.deepcopy(v) for k, v in config.items() if k not in {"apiVersion", "profiles"}}
    out["apiVersion"] = "kubescheduler.config.k8s.io/v1beta1"
    address = f"127.0.0.1:{insecure_port}"
    out["healthzBindAddress"] = address
    out["metricsBindAddress"] = address
    out["profiles"] = [_v1beta1_profile(p) for p in config.get("profiles", [])]
    return out


def _v1beta1_profile(profile: Obj) -> Obj:
    _only(profile, _PROFILE, "a profile")
    score: dict[str, list[Obj]] = {"enabled": [], "disabled": []}
    plugins = profile.get("plugins", {})
    _only(plugins, {"multiPoint"}, "plugins")
    multi_point = plugins.get("multiPoint", {})
    _only(multi_point, {"disabled"}, "plugins.multiPoint")
    for plugin in multi_point.get("disabled", []):
        if plugin.get("name") not in _SCORE_ONLY:
            raise SchedulerError(f"cannot translate disabling {plugin!r} to v1beta1")
        score["disabled"].append({"name": plugin["name"]})
    plugin_config = []
    for entry in profile.get("pluginConfig", []):
        name, args = entry["name"], entry.get("args", {})
        if name in _SAME_ARGS:
            plugin_config.append(copy.deepcopy(entry))
        elif name == "NodeResourcesFit":
            _only(args, {"scoringStrategy"}, "NodeResourcesFit args")
            strategy = args["scoringStrategy"]
            _only(strategy, {"type", "resources"}, "NodeResourcesFit scoringStrategy")
            if strategy["type"] != "MostAllocated":
                raise SchedulerError(f"cannot translate scoring strategy {strategy['type']}")
            # NodeResourcesFit scores with weight 1 by default in v1; so does its stand-in.
            score["disabled"].append({"name": "NodeResourcesLeastAllocated"})
            score["enabled"].append({"name": "NodeResourcesMostAllocated", "weight": 1})
            plugin_config.append(
                {
                    "name": "NodeResourcesMostAllocated",
                    "args": {"resources": copy.deepcopy(strategy["resources"])},
                }
            )
        else:
            raise SchedulerError(f"cannot translate the arguments of {name} to v1beta1")
    out: Obj = {"schedulerName": profile["schedulerName"], "pluginConfig": plugin_config}
    out["plugins"] = {"score": {k: v for k, v in score.items() if v}}
    return out


def _only(mapping: Obj, allowed: set[str], what: str) -> None:
    extra = set(mapping) - allowed
    if extra:
        raise SchedulerError(f"cannot translate {what} to v1beta1: {sorted(extra)}")


# --- running it ------------------------------------------------------------------------------


def _path(obj: Obj) -> str:
    api = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    ns = obj["metadata"].get("namespace")
    where = f"{api}/namespaces/{ns}" if ns else api
    return f"{where}/{_PLURALS[obj['kind']]}/{obj['metadata']['name']}"


def install_identity(kube: Kube, objects: list[Obj]) -> None:
    """The component's ServiceAccount, bindings and Lease Role as shipped (and the namespace
    they live in, as the base ships it)."""
    kube.apply(_path(find(objects, "Namespace")), find(objects, "Namespace"))
    for obj in component_objects(objects):
        if obj["kind"] in _PLURALS:
            kube.apply(_path(obj), obj)


def account_kubeconfig(kube: Kube, control_plane: ControlPlane, path: Path) -> Path:
    """A kubeconfig holding a token of the component's ServiceAccount."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    token = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token", request
    ).body["status"]["token"]
    return write_kubeconfig(path, control_plane.server, control_plane.ca_file, token, ACCOUNT)


@dataclass
class PackingScheduler:
    """The running second scheduler: its process, port and the configuration it read."""

    component: Component
    port: int
    config_path: Path
    lease: str

    def check_alive(self) -> None:
        self.component.check_alive()

    def log_tail(self, lines: int = 30) -> str:
        return self.component.log_tail(lines)

    def stop(self) -> None:
        self.component.stop()


def start_packing_scheduler(
    control_plane: ControlPlane, kube: Kube, objects: list[Obj], work: Path
) -> PackingScheduler:
    """The shipped packing scheduler on ``control_plane``, as the component's ServiceAccount;
    returns once it is healthy and holds its Lease. ``objects``: an install with the component
    (``render_component``)."""
    work.mkdir(parents=True, exist_ok=True)
    binaries = control_plane.binaries
    install_identity(kube, objects)
    kubeconfig = account_kubeconfig(kube, control_plane, work / "packing-scheduler.kubeconfig")
    minor = binaries.minor()
    shipped = shipped_configuration(objects)
    config = local_configuration(
        shipped,
        kubeconfig=kubeconfig,
        minor=minor,
        insecure_port=free_port() if minor < V1_SINCE else None,
    )
    config_path = work / "packing-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    election = config["leaderElection"]
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{election['resourceNamespace']}/leases/"
    lease += election["resourceName"]
    port = free_port()
    argv = [
        str(binaries.path("kube-scheduler")),
        f"--config={config_path}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    ]
    if binaries.has_flag("kube-scheduler", "--authentication-skip-lookup"):
        argv.append("--authentication-skip-lookup")
    process = Component("kube-scheduler-packing", argv, work / "packing-scheduler.log")
    process.start()
    scheduler = PackingScheduler(process, port, config_path, lease)

    def ready() -> bool:
        process.check_alive()
        if https_status(port, "/healthz") != 200:
            return False
        held = kube.get(lease)["spec"].get("holderIdentity")
        return bool(held)

    try:
        wait_until(
            ready,
            timeout=START_TIMEOUT,
            what="the packing scheduler to be healthy and hold its Lease",
            interval=0.2,
            fatal=(ComponentExited,),
        )
    except (TimeoutError, ComponentExited) as exc:
        process.stop()
        raise SchedulerError(
            f"{exc}\n--- packing scheduler log ---\n{process.log_tail()}"
        ) from None
    return scheduler


# --- what it runs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scoring:
    """How a scheduler's only profile scores nodes, read from a configuration: as written, or
    the effective one a running scheduler reports (``/configz``)."""

    scheduler_name: str
    # Score plugins the configuration enables and disables by name. 1.37 reports the
    # defaults merged in (``merged``); 1.20 reports only what its file says, the release's
    # defaults (NodeAffinity, TaintToleration, ...) being on unless disabled.
    enabled: frozenset[str]
    disabled: frozenset[str]
    merged: bool
    strategy: str
    resource_weights: dict[str, int]
    spread_defaulting: str


def configz(scheduler: PackingScheduler, token: str) -> Obj:
    """The scheduler's effective configuration, defaults filled in (its ``/configz``; its
    certificate is self-signed, in memory, so it is not checked)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", scheduler.port, timeout=5, context=ctx)
    try:
        conn.request("GET", "/configz", headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise SchedulerError(f"/configz answered {resp.status}: {body[:200]!r}")
    config: Obj = json.loads(body)["componentconfig"]
    return config


def scoring(config: Obj) -> Scoring:
    """The only profile's scoring in a configuration: v1, v1beta1, or what a 1.20 scheduler
    reports at /configz (its internal form: Go field names, no apiVersion)."""
    if "apiVersion" not in config:
        config = _lower_keys(config)
        config["apiVersion"] = "kubescheduler.config.k8s.io/internal"
    (profile,) = config["profiles"]
    plugins = profile.get("plugins") or {}
    args = {c["name"]: c.get("args") or {} for c in profile.get("pluginConfig") or []}
    points = [plugins.get(point) or {} for point in ("multiPoint", "score")]
    enabled = {p["name"] for point in points for p in point.get("enabled") or []}
    disabled = {p["name"] for point in points for p in point.get("disabled") or []}
    merged = bool((plugins.get("multiPoint") or {}).get("enabled"))
    if config["apiVersion"].endswith("/v1"):
        fit = args.get("NodeResourcesFit", {}).get("scoringStrategy") or {}
        strategy = fit.get("type", "LeastAllocated")
        resources = fit.get("resources") or []
    else:
        # Before v1beta2 each strategy is a score plugin of its own; LeastAllocated is on by
        # default.
        most = "NodeResourcesMostAllocated" in enabled
        least = "NodeResourcesLeastAllocated" not in disabled
        strategy = {(True, False): "MostAllocated", (False, True): "LeastAllocated"}.get(
            (most, least), "mixed"
        )
        resources = args.get(f"NodeResources{strategy}", {}).get("resources") or []
    spread = (args.get("PodTopologySpread") or {}).get("defaultingType") or "System"
    return Scoring(
        scheduler_name=profile["schedulerName"],
        enabled=frozenset(enabled - disabled),
        disabled=frozenset(disabled),
        merged=merged,
        strategy=strategy,
        resource_weights={r["name"]: int(r.get("weight") or 1) for r in resources},
        spread_defaulting=spread,
    )


def _lower_keys(value: Any) -> Any:
    """Go field names (``SchedulerName``) as JSON names (``schedulerName``)."""
    if isinstance(value, dict):
        return {k[:1].lower() + k[1:]: _lower_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lower_keys(v) for v in value]
    return value
