"""Whether the engine runs compiled (mypyc) or interpreted, and a guard against a stale build.

``hack/compile-engine.sh`` compiles the engine's modules in place, as ``setup.py`` does for
a wheel with ``PREEMPTGUARD_COMPILE=1``, and records the SHA-256 of every engine source in
``webhook/engine/native.sha256``. Python imports a module's extension before its source, so
an engine module edited after that would go on running as it was compiled: importing the
package refuses that instead, naming the modules and the commands that mend it. An installed
wheel carries no record and is not checked: its sources and extensions are installed together.
"""

from __future__ import annotations

import hashlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent / "engine"
RECORD_NAME = "native.sha256"


class StaleEngineError(ImportError):
    """Engine sources changed since the engine was compiled in place."""


def stale_sources(engine_dir: Path = ENGINE_DIR) -> list[str]:
    """The engine sources whose content differs from the in-place build's record (none
    without a record)."""
    try:
        lines = (engine_dir / RECORD_NAME).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    stale = []
    for line in lines:
        digest, _, name = line.partition("  ")
        try:
            now = hashlib.sha256((engine_dir / name).read_bytes()).hexdigest()
        except FileNotFoundError:
            now = ""
        if now != digest:
            stale.append(name)
    return stale


def refuse_stale_engine(engine_dir: Path = ENGINE_DIR) -> None:
    stale = stale_sources(engine_dir)
    if stale:
        raise StaleEngineError(
            f"{', '.join(stale)} in {engine_dir} changed since the engine was compiled, "
            "and Python would run the compiled modules: run `make compile` to compile "
            "them again, or `make clean-compiled` to run the engine interpreted"
        )


def engine_build() -> str:
    """``compiled`` when the engine's modules are mypyc extensions, else ``interpreted``."""
    from webhook.engine import evaluation

    origin = evaluation.__file__ or ""
    return "compiled" if origin.endswith(tuple(EXTENSION_SUFFIXES)) else "interpreted"
