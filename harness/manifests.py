"""Render ``manifests/`` through a real kustomize, as a user's ``kubectl apply -k`` would.

The self-managed overlay needs certificates a user issues with ``preemptguard certs`` (they are
never committed), so rendering works on a copy of ``manifests/`` with a freshly issued set.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness import REPO
from webhook.server import certs

MANIFESTS = REPO / "manifests"
KUSTOMIZE_SCRIPT = REPO / "hack" / "kustomize.sh"
SERVICE, NAMESPACE = "preemptguard", "preemptguard-system"
CERTIFICATE_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}

# What each renderable kustomization is, relative to manifests/.
VARIANTS = {
    "base": "base",
    "cert-manager": "overlays/cert-manager",
    "self-managed": "overlays/self-managed",
    "self-managed+fail-closed": "overlays/fail-closed-example",
}
_FAIL_CLOSED_EXAMPLE = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../self-managed
components:
  - ../../components/fail-closed
"""


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


@dataclass(frozen=True)
class Tree:
    """A copy of manifests/ with certificates issued for the self-managed overlay."""

    root: Path

    @property
    def ca_cert(self) -> bytes:
        return (self.root / "overlays/self-managed/certs/ca.crt").read_bytes()

    def render(self, variant: str) -> list[dict[str, Any]]:
        path = self.root / VARIANTS[variant]
        proc = subprocess.run(
            [kustomize(), "build", str(path)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RenderError(f"kustomize build {VARIANTS[variant]} failed:\n{proc.stderr}")
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def prepare_tree(directory: Path) -> Tree:
    root = directory / "manifests"
    shutil.copytree(MANIFESTS, root, ignore=shutil.ignore_patterns("certs"))
    # What `preemptguard certs --service preemptguard --namespace preemptguard-system` writes.
    certs.write(
        certs.issue(certs.service_hosts(SERVICE, NAMESPACE)), root / "overlays/self-managed/certs"
    )
    example = root / VARIANTS["self-managed+fail-closed"]
    example.mkdir(parents=True)
    (example / "kustomization.yaml").write_text(_FAIL_CLOSED_EXAMPLE)
    return Tree(root)


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
