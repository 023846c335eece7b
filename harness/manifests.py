"""Render ``manifests/`` through a real kustomize, as a user's ``kubectl apply -k`` would.

The self-managed overlay needs certificates a user issues with ``preemptguard certs`` (they are
never committed), so rendering works on a copy of ``manifests/`` with a freshly issued set, and
with kustomizations beside the shipped overlays that add the components as the README says.

The manifests target Kubernetes 1.30 and later. A ``Tree`` made for an older API server
(``prepare_tree(..., server_minor=20)``) renders them without the fields that server predates
(``for_server``), so that the end-to-end suite can apply them on 1.20; what is left out there is
schema-checked against current releases in tests/test_manifests.py instead.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness import REPO
from harness.kube import Kube
from webhook.server import certs

MANIFESTS = REPO / "manifests"
KUSTOMIZE_SCRIPT = REPO / "hack" / "kustomize.sh"
SERVICE, NAMESPACE = "preemptguard", "preemptguard-system"
CERTIFICATE_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}

CERT_MANAGER_CRDS_SCRIPT = REPO / "hack" / "cert-manager-crds.sh"

# What each renderable install of the webhook is, relative to manifests/.
VARIANTS = {
    "base": "base",
    "cert-manager": "overlays/cert-manager",
    "self-managed": "overlays/self-managed",
    "self-rotating": "overlays/self-rotating",
    "self-managed+fail-closed": "overlays/fail-closed-example",
    "cert-manager+fail-closed": "overlays/cert-manager+fail-closed",
    "cert-manager+observer": "overlays/cert-manager+observer",
    "self-managed+before-1.30": "overlays/before-1.30-example",
    "cert-manager+network-policy": "overlays/cert-manager+network-policy",
    "cert-manager+mutating-admission-policy": "overlays/cert-manager+mutating-admission-policy",
}
# Kustomizations written beside the shipped overlays: (overlay, component), as the README adds a
# component to an overlay.
_EXAMPLES = {
    "self-managed+fail-closed": ("self-managed", "fail-closed"),
    "cert-manager+fail-closed": ("cert-manager", "fail-closed"),
    "cert-manager+observer": ("cert-manager", "observer"),
    "self-managed+before-1.30": ("self-managed", "before-1.30"),
    "cert-manager+network-policy": ("cert-manager", "network-policy"),
    "cert-manager+mutating-admission-policy": ("cert-manager", "mutating-admission-policy"),
}
# Components rendered on their own, as a component's objects alone (every overlay lists the
# first; the second is opt-in): not installs of the webhook, so not among VARIANTS.
ADMISSION_POLICIES = "components/admission-policies"
MUTATING_ADMISSION_POLICY = "components/mutating-admission-policy"
RENDERABLE = {
    **VARIANTS,
    "admission-policies": ADMISSION_POLICIES,
    "mutating-admission-policy": MUTATING_ADMISSION_POLICY,
}

# The first minor release that serves each field the manifests use beyond what 1.20 serves.
# matchConditions on webhooks: beta and on by default from 1.28 (GA in 1.30).
MATCH_CONDITIONS_SINCE = 28
# lifecycle.preStop.sleep (PodLifecycleSleepAction): from 1.29 (on by default from 1.30).
PRESTOP_SLEEP_SINCE = 29


class RenderError(RuntimeError):
    pass


@cache
def kustomize() -> str:
    """A kustomize v5 binary (see hack/kustomize.sh); fails loudly when there is none."""
    proc = subprocess.run(
        [str(KUSTOMIZE_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO
    )
    if proc.returncode != 0:
        raise RenderError(
            f"hack/kustomize.sh found no kustomize v5 (exit {proc.returncode}); install one or "
            f"set KUSTOMIZE:\n{proc.stderr.strip()}"
        )
    return proc.stdout.strip().splitlines()[-1]


def server_minor(kube: Kube) -> int:
    """The minor release of the API server ``kube`` talks to (``20`` for 1.20.2)."""
    return int(kube.get("/version")["minor"].rstrip("+"))


@cache
def cert_manager_crds() -> list[dict[str, Any]]:
    """cert-manager's CustomResourceDefinitions from upstream's own schemas (see
    hack/cert-manager-crds.sh); fails loudly when they cannot be had."""
    proc = subprocess.run(
        [str(CERT_MANAGER_CRDS_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO
    )
    if proc.returncode != 0:
        raise RenderError(
            f"hack/cert-manager-crds.sh could not provide cert-manager's CRDs "
            f"(exit {proc.returncode}):\n{proc.stderr.strip()}"
        )
    folder = Path(proc.stdout.strip().splitlines()[-1])
    crds = [
        doc
        for path in sorted(folder.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    if not crds or any(c.get("kind") != "CustomResourceDefinition" for c in crds):
        raise RenderError(f"{folder} holds something other than CustomResourceDefinitions")
    return crds


def for_server(obj: dict[str, Any], minor: int) -> dict[str, Any]:
    """``obj`` without the fields an API server of release 1.``minor`` predates.

    Such a server refuses them under server-side apply ("field not declared in schema") and
    drops them from a plain create; tests/test_manifests.py validates them against current
    schemas instead. Anything else is returned as it is.
    """
    kind = obj.get("kind")
    if minor < MATCH_CONDITIONS_SINCE and kind in (
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ):
        # Without matchConditions the API server calls the pod hooks for genuine DaemonSet
        # pods too, and the engine leaves them alone (webhook/engine/trust.py): the same
        # outcome, one call more per pod.
        obj = copy.deepcopy(obj)
        for hook in obj.get("webhooks", []):
            hook.pop("matchConditions", None)
    if minor < PRESTOP_SLEEP_SINCE and kind == "Deployment":
        # Older servers refuse lifecycle.preStop.sleep: server-side apply as a field not in
        # the schema, a plain create as a preStop without a handler once the field is dropped.
        # An exec preStop (components/before-1.30) is kept: those servers take it.
        obj = copy.deepcopy(obj)
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if "sleep" in (container.get("lifecycle") or {}).get("preStop", {}):
                container.pop("lifecycle")
    return obj


@dataclass(frozen=True)
class Tree:
    """A copy of manifests/ with certificates issued for the self-managed overlay.

    ``server_minor``: the API server the renders are for (see ``for_server``); None renders
    the manifests as shipped.
    """

    root: Path
    server_minor: int | None = None

    @property
    def ca_cert(self) -> bytes:
        return (self.root / "overlays/self-managed/certs/ca.crt").read_bytes()

    def render(self, variant: str) -> list[dict[str, Any]]:
        """The objects of a VARIANTS install, or of ``admission-policies``."""
        path = self.root / RENDERABLE[variant]
        proc = subprocess.run(
            [kustomize(), "build", str(path)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RenderError(f"kustomize build {RENDERABLE[variant]} failed:\n{proc.stderr}")
        objects = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
        if self.server_minor is None:
            return objects
        return [for_server(obj, self.server_minor) for obj in objects]


def prepare_tree(directory: Path, *, server_minor: int | None = None) -> Tree:
    root = directory / "manifests"
    shutil.copytree(MANIFESTS, root, ignore=shutil.ignore_patterns("certs"))
    # What `preemptguard certs --service preemptguard --namespace preemptguard-system` writes.
    certs.write(
        certs.issue(certs.service_hosts(SERVICE, NAMESPACE)), root / "overlays/self-managed/certs"
    )
    for variant, (overlay, component) in _EXAMPLES.items():
        example = root / VARIANTS[variant]
        example.mkdir(parents=True)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [f"../{overlay}"],
            "components": [f"../../components/{component}"],
        }
        (example / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return Tree(root, server_minor)


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    if len(matches) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(matches)}")
    return matches[0]


def webhooks(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every webhook of both configurations, by name."""
    out: dict[str, dict[str, Any]] = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in find(objects, kind)["webhooks"]:
            out[hook["name"]] = hook
    return out
