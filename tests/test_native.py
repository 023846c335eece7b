"""The compiled engine: what is imported says which build it is, and a stale build is refused."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from webhook import native
from webhook.native import RECORD_NAME, StaleEngineError, refuse_stale_engine, stale_sources


def _engine_with_record(tmp_path: Path) -> Path:
    engine = tmp_path / "engine"
    engine.mkdir()
    for name, text in (("a.py", "A = 1\n"), ("b.py", "B = 2\n")):
        (engine / name).write_text(text)
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}"
        for p in sorted(engine.glob("*.py"))
    ]
    (engine / RECORD_NAME).write_text("\n".join(lines) + "\n")
    return engine


def test_sources_as_recorded_are_not_stale(tmp_path: Path) -> None:
    engine = _engine_with_record(tmp_path)
    assert stale_sources(engine) == []
    refuse_stale_engine(engine)


def test_without_a_record_nothing_is_checked(tmp_path: Path) -> None:
    engine = _engine_with_record(tmp_path)
    (engine / RECORD_NAME).unlink()
    (engine / "a.py").write_text("A = 3\n")
    assert stale_sources(engine) == []


def test_an_edited_or_removed_source_is_stale_and_refused(tmp_path: Path) -> None:
    engine = _engine_with_record(tmp_path)
    (engine / "a.py").write_text("A = 3\n")
    (engine / "b.py").unlink()
    assert stale_sources(engine) == ["a.py", "b.py"]
    with pytest.raises(StaleEngineError, match=r"a\.py, b\.py .*make compile.*make clean-compiled"):
        refuse_stale_engine(engine)


def test_the_build_reported_is_the_one_imported() -> None:
    from webhook.engine import evaluation

    compiled = Path(evaluation.__file__ or "").name.endswith(tuple(EXTENSION_SUFFIXES))
    assert native.engine_build() == ("compiled" if compiled else "interpreted")
    # The record is written only by a finished in-place build, so where it is the engine
    # imported must be that build (else the suite would pass on what does not ship).
    if (native.ENGINE_DIR / RECORD_NAME).exists():
        assert native.engine_build() == "compiled"


def test_importing_the_package_refuses_a_stale_build(tmp_path: Path) -> None:
    package = tmp_path / "webhook"
    shutil.copytree(native.ENGINE_DIR.parent, package, ignore=shutil.ignore_patterns("*.so"))
    record = package / "engine" / RECORD_NAME
    record.write_text(f"{'0' * 64}  grace.py\n")
    run = subprocess.run(
        [sys.executable, "-c", "import webhook"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode != 0
    assert "StaleEngineError: grace.py" in run.stderr
    assert "make compile" in run.stderr
    record.unlink()
    again = subprocess.run(
        [
            sys.executable,
            "-c",
            "import webhook.engine.grace, webhook.native as n; print(n.engine_build())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "interpreted"


# The inputs `check` reads in both builds: every shipped example, upstream sample and recorded
# review, and fuzzed manifests (tests/fuzz: wrong types, nulls, deep and huge values...).
DIFFERENTIAL_SEED = 20261205
DIFFERENTIAL_CASES = 200


def _check_json(package_root: Path, inputs: list[Path]) -> tuple[int, str, str]:
    args = [arg for path in inputs for arg in ("-f", str(path))]
    run = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-o", "json", *args],
        cwd=package_root,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        timeout=600,
    )
    return run.returncode, run.stdout, run.stderr


def test_the_compiled_engine_decides_as_the_interpreted_one(tmp_path: Path) -> None:
    if native.engine_build() != "compiled":
        pytest.skip("the engine runs interpreted here: `make compile` builds the compiled one")
    from tests.fuzz.mutators import manifest_case

    interpreted = tmp_path / "interpreted"
    shutil.copytree(
        native.ENGINE_DIR.parent,
        interpreted / "webhook",
        ignore=shutil.ignore_patterns("*.so", RECORD_NAME, "__pycache__"),
    )
    fuzzed = tmp_path / "fuzzed"
    for index in range(DIFFERENTIAL_CASES):
        folder = fuzzed / f"case-{index:03d}"
        folder.mkdir(parents=True)
        for name, data in manifest_case(DIFFERENTIAL_SEED, index).files.items():
            (folder / name).write_bytes(data)
    repo = native.ENGINE_DIR.parents[1]
    inputs = [
        repo / "examples",
        *sorted((repo / "tests" / "fixtures" / "upstream").glob("*/*.yaml")),
        repo / "tests" / "fixtures" / "admission-reviews",
        *sorted(fuzzed.iterdir()),
    ]
    compiled_run = _check_json(repo, inputs)
    interpreted_run = _check_json(interpreted, inputs)
    assert _check_json(interpreted, inputs[:1])[0] in (0, 1)  # the copy runs at all
    assert compiled_run[1].count('"allowed"') > 500  # enough decisions to compare
    assert compiled_run == interpreted_run


def _compile_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    repo = native.ENGINE_DIR.parents[1]
    copy = tmp_path / "repo"
    shutil.copytree(repo / "hack", copy / "hack")
    shutil.copytree(
        repo / "webhook", copy / "webhook", ignore=shutil.ignore_patterns("*.so", RECORD_NAME)
    )
    shutil.copy(repo / "setup.py", copy)
    return subprocess.run(
        ["bash", str(copy / "hack" / "compile-engine.sh"), *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "CC": "/nonexistent/cc"},
    )


def test_without_a_compiler_the_build_fails_saying_why(tmp_path: Path) -> None:
    run = _compile_script(tmp_path)
    assert run.returncode == 1
    assert "cannot compile the engine without a C compiler (/nonexistent/cc)" in run.stderr


def test_make_run_goes_on_interpreted_without_a_compiler(tmp_path: Path) -> None:
    run = _compile_script(tmp_path, "--if-possible")
    assert run.returncode == 0, run.stderr
    assert "without a C compiler (/nonexistent/cc) the engine runs interpreted" in run.stderr
    engine = tmp_path / "repo" / "webhook" / "engine"
    assert not (engine / RECORD_NAME).exists()
    assert not list(engine.glob("*.so"))
