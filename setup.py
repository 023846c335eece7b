"""Packaging beside pyproject.toml: the placement engine, optionally compiled with mypyc.

``PREEMPTGUARD_COMPILE=1`` compiles the engine's modules to C extensions (mypy and a C
compiler needed, so build without isolation); otherwise the package is pure Python. Both run
the same source: the compiled modules are those modules, type-checked and translated.
``hack/compile-engine.sh`` builds them in place for the source tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

# Interpreted either way: the package's __init__ (it imports the rest), and the policy's
# frozen dataclasses, which the server pickles to its offload process and mypyc cannot unpickle.
INTERPRETED = {"__init__.py", "policy.py"}


def compiled_engine_modules() -> list[str]:
    engine = Path(__file__).resolve().parent / "webhook" / "engine"
    return sorted(
        f"webhook/engine/{p.name}" for p in engine.glob("*.py") if p.name not in INTERPRETED
    )


def ext_modules() -> list[object]:
    if os.environ.get("PREEMPTGUARD_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return list(
        mypycify(compiled_engine_modules(), opt_level="3", group_name="webhook.engine.native")
    )


setup(ext_modules=ext_modules())
