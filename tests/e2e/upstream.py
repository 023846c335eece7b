"""The GPU operators' own CustomResourceDefinitions, installed for real from their upstream
files (``hack/upstream-crds.sh`` fetches them once from the Go module proxy).

Unlike the stand-ins in ``tests/fixtures/upstream/crds/`` (schemas that keep every field),
these are the projects' structural schemas: what the API server prunes, defaults and validates
(CEL rules included) is what a cluster running the operator would. They are large (up to
1.5 MB each, all but a few over the 256 KiB a client-side apply can keep in its annotation), so
they are installed by server-side apply. They need Kubernetes 1.25 or later: 1.20 refuses
most of them (it reads the ``default: ""`` of their name fields as null) and drops the CEL
rules (``x-kubernetes-validations``) of the rest.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness import REPO
from harness.kube import Kube, KubeError
from harness.processes import wait_until

SCRIPT = REPO / "hack" / "upstream-crds.sh"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIELD_MANAGER = "preemptguard-e2e-upstream-crds"
INSTALL_TIMEOUT = 60.0

Obj = dict[str, Any]


class UpstreamError(RuntimeError):
    """The upstream CRDs could not be had or installed; the message says why."""


@cache
def directory() -> Path:
    """Where ``hack/upstream-crds.sh`` keeps the files (fetching them the first time)."""
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise UpstreamError(f"hack/upstream-crds.sh failed with exit {proc.returncode}:\n{tail}")
    found = Path(proc.stdout.strip().splitlines()[-1])
    if not (found / "SOURCES.tsv").is_file():
        raise UpstreamError(f"hack/upstream-crds.sh printed {found}, which has no SOURCES.tsv")
    return found


@cache
def _parsed(path: Path) -> Obj:
    loaded = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    if not isinstance(loaded, dict) or loaded.get("kind") != "CustomResourceDefinition":
        raise UpstreamError(f"{path} is not a CustomResourceDefinition")
    return loaded


def crds(*projects: str) -> list[Obj]:
    """The CRDs of ``projects`` (folder names: ``kuberay``, ``jobset``, ``lws``, ...; all of
    them when none is named), as upstream wrote them. Each call gets its own copies."""
    root = directory()
    chosen = projects or tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
    found: list[Obj] = []
    for project in chosen:
        files = sorted((root / project).glob("*.yaml"))
        if not files:
            raise UpstreamError(f"no CRDs of {project!r} in {root}")
        found += [copy.deepcopy(_parsed(f)) for f in files]
    return found


def served_path(crd: Obj) -> str:
    """The collection of ``crd``'s kind at its storage version, across all namespaces."""
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    return f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"


def install(kube: Kube, chosen: Iterable[Obj]) -> list[Obj]:
    """Server-side apply each CRD, then wait until each kind is served and its CRD
    Established; returns the CRDs as the API server stored them (status included)."""
    names = []
    for crd in chosen:
        name = crd["metadata"]["name"]
        try:
            kube.call(
                "PATCH",
                f"{CRDS}/{name}",
                crd,
                params={"fieldManager": FIELD_MANAGER, "force": "true"},
                content_type="application/apply-patch+yaml",
                timeout=120,
            )
        except KubeError as exc:
            raise UpstreamError(f"the API server refused CRD {name}: {exc}") from None
        names.append((name, served_path(crd)))
    stored = []
    for name, collection in names:
        # A list of the kind answers once the API server serves it (404, then 429 while its
        # storage starts): cheaper to poll than the CRD itself, up to 1.5 MB each.
        def served(collection: str = collection) -> bool:
            return kube.exists(collection)

        wait_until(served, timeout=INSTALL_TIMEOUT, what=f"the kind of CRD {name} to be served")
        crd = kube.get(f"{CRDS}/{name}")
        conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        if conditions.get("Established") != "True" or conditions.get("NamesAccepted") != "True":
            raise UpstreamError(f"CRD {name} is served but not established: {conditions}")
        stored.append(crd)
    return stored


_installed: dict[str, list[Obj]] = {}


def installed(kube: Kube) -> list[Obj]:
    """Every upstream CRD installed on ``kube``'s API server, once per API server (a minute or
    so): they stay for the rest of the session, whose control plane is thrown away after it."""
    if kube.server not in _installed:
        _installed[kube.server] = install(kube, crds())
    return _installed[kube.server]
