"""The hashed locks hold what pyproject.toml asks for, and the image starts from an exact release.

``make lock`` writes the locks: ``requirements-dev.lock`` (the runtime and the dev extra, which
``make install`` installs with ``--require-hashes``), ``requirements.lock`` (the image's
runtime) and ``requirements-build.lock`` (what the image compiles the engine with). A lock that
misses a dependency, pins one outside pyproject's range or keeps one pyproject dropped is stale.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

REPO = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = "requirements.lock"
DEV_LOCK = "requirements-dev.lock"
BUILD_LOCK = "requirements-build.lock"
LOCKS = (RUNTIME_LOCK, DEV_LOCK, BUILD_LOCK)
# What setup.py's mypyc build needs beside the C compiler: the Dockerfile's build stage installs
# only this lock before compiling the engine, which imports jsonpointer (through jsonpatch).
BUILD_NEEDS = ("mypy", "setuptools", "jsonpatch")
# How the locks name pyproject.toml among the reasons a package is there.
FROM_PYPROJECT = "preemptguard (pyproject.toml)"
ENTRY = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
BASE_IMAGE = re.compile(
    r"FROM\s+python:3\.12\.\d+-slim-[a-z]+(?:@sha256:[0-9a-f]{64})?(?:\s+AS\s+\S+)?", re.IGNORECASE
)


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: int
    from_pyproject: bool


def lock_pins(name: str) -> dict[NormalizedName, Pin]:
    """The lock's entries: ``name==version [; marker]`` lines continued with ``--hash`` options,
    each followed by comments saying why it is there."""
    pins: dict[NormalizedName, Pin] = {}
    entries: list[tuple[str, list[str]]] = []  # (requirement with its options, its comments)
    continued = False
    for line in (REPO / name).read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            continued = False
        elif stripped.startswith("#"):
            if entries:
                entries[-1][1].append(stripped.lstrip("#").strip())
            continued = False
        elif continued:
            entries[-1] = (entries[-1][0] + " " + stripped.rstrip("\\"), entries[-1][1])
            continued = stripped.endswith("\\")
        else:
            entries.append((stripped.rstrip("\\"), []))
            continued = stripped.endswith("\\")
    for text, comments in entries:
        match = ENTRY.match(text)
        assert match, f"{name}: not a `name==version` entry: {text[:100]!r}"
        key = canonicalize_name(match["name"])
        assert key not in pins, f"{name}: {match['name']} is pinned twice"
        pins[key] = Pin(
            version=match["version"],
            hashes=len(HASH.findall(text)),
            from_pyproject=any(FROM_PYPROJECT in c for c in comments),
        )
    return pins


def pyproject_requirements() -> tuple[list[Requirement], list[Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(r) for r in project["dependencies"]]
    dev = [Requirement(r) for r in project["optional-dependencies"]["dev"]]
    return runtime, dev


@pytest.mark.parametrize(
    ("lock", "extras"), [(RUNTIME_LOCK, False), (DEV_LOCK, True)], ids=["runtime", "dev"]
)
def test_every_dependency_of_pyproject_is_pinned_and_hashed(lock: str, extras: bool) -> None:
    runtime, dev = pyproject_requirements()
    wanted = runtime + dev if extras else runtime
    pins = lock_pins(lock)
    problems = []
    for req in wanted:
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name} is not in it")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req.name}=={pin.version} is outside pyproject's {req}")
        elif not pin.from_pyproject:
            problems.append(f"{req.name} is not there for pyproject.toml")
    # A dependency pyproject dropped (or moved out of the dev extra) stays in the lock until
    # `make lock`, still marked as pyproject's.
    named = {canonicalize_name(r.name) for r in wanted}
    problems += [
        f"{name} is there for pyproject.toml, which no longer names it"
        for name, pin in pins.items()
        if pin.from_pyproject and name not in named
    ]
    assert not problems, f"{lock} is stale: run `make lock`\n" + "\n".join(problems)


@pytest.mark.parametrize("lock", LOCKS)
def test_every_entry_is_pinned_with_a_hash(lock: str) -> None:
    # `pip install --require-hashes` refuses the whole file for one entry without.
    pins = lock_pins(lock)
    assert pins
    assert [name for name, pin in pins.items() if pin.hashes == 0] == []


def test_the_locks_agree_on_every_version() -> None:
    dev = lock_pins(DEV_LOCK)
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        differ = {
            name: (pin.version, dev[name].version if name in dev else None)
            for name, pin in lock_pins(lock).items()
            if name not in dev or dev[name].version != pin.version
        }
        assert differ == {}, f"{lock} against {DEV_LOCK} (run `make lock`)"


def test_the_build_lock_has_what_compiles_the_engine() -> None:
    pins = lock_pins(BUILD_LOCK)
    assert [name for name in BUILD_NEEDS if name not in pins] == []


@pytest.mark.parametrize("lock", LOCKS)
def test_no_lock_names_an_index_or_any_address(lock: str) -> None:
    text = (REPO / lock).read_text()
    assert re.findall(r"[A-Za-z][A-Za-z0-9+.-]*://\S*", text) == [], f"{lock} names an address"
    options = re.findall(
        r"^\s*(--(?:index-url|extra-index-url|find-links|trusted-host)|-[if])\b", text, re.M
    )
    assert options == [], f"{lock} names where to install from"


def test_the_image_starts_from_an_exact_python_release() -> None:
    lines = (REPO / "Dockerfile").read_text().splitlines()
    froms = [line.strip() for line in lines if re.match(r"\s*FROM\s", line, re.IGNORECASE)]
    assert froms, "the Dockerfile has no FROM line"
    assert [f for f in froms if not BASE_IMAGE.fullmatch(f)] == [], (
        "every stage starts from python:3.12.N-slim-<release>, optionally @sha256:<digest>"
    )
    images = {f.split()[1] for f in froms}
    assert len(images) == 1, f"the stages start from different images: {sorted(images)}"


def test_the_image_installs_from_the_locks_with_hashes() -> None:
    dockerfile = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    commands = [c.strip() for c in re.split(r"&&|\n", dockerfile) if "pip install" in c]
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        installs = [c for c in commands if re.search(rf"-r\s+{re.escape(lock)}(\s|$)", c)]
        assert installs, f"the Dockerfile does not install {lock}"
        assert all("--require-hashes" in c for c in installs), installs
    # The package itself comes after, without its dependencies (the locks have them).
    others = [c for c in commands if "-r " not in c]
    assert others
    assert all("--no-deps" in c for c in others), others
