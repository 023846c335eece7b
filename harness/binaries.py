"""The Kubernetes releases the harness runs, and where their binaries come from.

Two releases: the main one (1.37, current) and the oldest one still supported (1.20). Each has
a script in ``hack/`` that prints the folder holding ``etcd``, ``kube-apiserver``,
``kube-scheduler`` and ``kube-controller-manager``, building them once into
``~/.cache/preemptguard/`` (``PREEMPTGUARD_CACHE`` moves it) when needed.
``KUBEBUILDER_ASSETS`` (the envtest convention) stands in for the main release only: it names
one set of binaries, and the oldest release must stay the oldest.

What a binary accepts is read from its ``--help`` and ``--version`` rather than assumed from
the release's name, so that binaries from ``KUBEBUILDER_ASSETS`` of another version work too.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harness import REPO

NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"


class ControlPlaneError(RuntimeError):
    """The control plane could not be obtained or started; the message says what to do."""


@dataclass(frozen=True)
class Release:
    """A Kubernetes release the harness knows: its name (``1.37``) and its binaries script."""

    name: str
    version: str
    script: Path
    honours_assets: bool

    @property
    def id(self) -> str:
        """The test id of this release: ``k8s-1.37``."""
        return f"k8s-{self.name}"


MAIN = Release(
    "1.37", "v1.37.2", REPO / "hack" / "control-plane-binaries-1.37.sh", honours_assets=True
)
OLDEST = Release(
    "1.20", "v1.20.2", REPO / "hack" / "control-plane-binaries.sh", honours_assets=False
)
RELEASES = {release.name: release for release in (MAIN, OLDEST)}


def release(name: str) -> Release:
    """The release called ``name`` (``1.37`` or ``1.20``, with or without ``k8s-``)."""
    found = RELEASES.get(name.removeprefix("k8s-"))
    if found is None:
        raise ControlPlaneError(
            f"unknown Kubernetes release {name!r}; known: {', '.join(RELEASES)}"
        )
    return found


@dataclass(frozen=True)
class Binaries:
    """The four binaries of one release, in one folder."""

    release: Release
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    def help(self, name: str) -> str:
        """What ``name --help`` prints: which flags this build has."""
        return _output(self.path(name), "--help")

    def has_flag(self, name: str, flag: str) -> bool:
        """Whether ``name`` documents ``flag`` (``--port``): a whole flag, not a prefix."""
        return (
            re.search(rf"(?m)^\s+(?:-\w, )?{re.escape(flag)}(?:[ =]|$)", self.help(name))
            is not None
        )

    def minor(self) -> int:
        """The minor version of kube-apiserver (20 for v1.20.2)."""
        text = _output(self.path("kube-apiserver"), "--version")
        match = re.search(r"v1\.(\d+)\.", text)
        if match is None:
            raise ControlPlaneError(f"cannot read a version from kube-apiserver: {text.strip()!r}")
        return int(match.group(1))


@cache
def _output(binary: Path, flag: str) -> str:
    proc = subprocess.run([str(binary), flag], capture_output=True, text=True, check=False)
    return proc.stdout + proc.stderr


def binaries(which: Release = MAIN) -> Binaries:
    """The binaries of ``which``: from its script (which may build them: 10 to 15 minutes on a
    fresh machine, once) or, for the main release, from ``KUBEBUILDER_ASSETS``."""
    env = dict(os.environ)
    if not which.honours_assets:
        env.pop(ASSETS_VARIABLE, None)
    proc = subprocess.run(
        [str(which.script)], capture_output=True, text=True, check=False, cwd=REPO, env=env
    )
    script = which.script.relative_to(REPO)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        hint = (
            f"set {ASSETS_VARIABLE} to a folder with {', '.join(NAMES)} or fix the build"
            if which.honours_assets
            else "fix the build"
        )
        raise ControlPlaneError(
            f"{script} (Kubernetes {which.name}) failed with exit {proc.returncode}; "
            f"{hint}:\n{tail}"
        )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ControlPlaneError(f"{script} printed no folder")
    directory = Path(lines[-1])
    missing = [name for name in NAMES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{directory} lacks executable {', '.join(missing)}")
    return Binaries(which, directory)
