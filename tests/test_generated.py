"""Every derived file is up to date: ``hack/generate.py --check`` (``make generate`` writes them).

The check itself is tested on a copy of the files: it names each stale file and writes nothing,
and generating mends every one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GENERATE = REPO / "hack" / "generate.py"
# What the generator reads and writes, copied for the test of the check itself.
COPIED = ("policies", "manifests", "charts", "docs")
SCHEMA = "webhook/data/placementpolicy.schema.json"


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATE), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def test_every_derived_file_is_up_to_date() -> None:
    proc = generate("--check")
    assert proc.returncode == 0, (
        f"derived files are out of date: run `make generate`\n{proc.stdout}{proc.stderr}"
    )
    assert proc.stdout == ""


def copy_tree(root: Path) -> None:
    for name in COPIED:
        shutil.copytree(REPO / name, root / name, symlinks=True)
    (root / SCHEMA).parent.mkdir(parents=True)
    shutil.copy(REPO / SCHEMA, root / SCHEMA)


def test_the_check_names_each_stale_file_and_generate_mends_them(tmp_path: Path) -> None:
    copy_tree(tmp_path)
    root = ["--root", str(tmp_path)]
    assert generate("--check", *root).returncode == 0
    chart_policy = tmp_path / "charts/preemptguard/files/policies/policy.yaml"
    chart_policy.write_text(chart_policy.read_text() + "# edited by hand\n")
    extra = tmp_path / "manifests/base/policies/extra.yaml"
    extra.write_text("kind: PlacementPolicy\n")
    mutating = (
        tmp_path / "charts/preemptguard/files/admission-policies/mutating-admission-policy.yaml"
    )
    mutating.unlink()
    webhooks = tmp_path / "manifests/base/webhooks.yaml"
    webhooks.write_text(webhooks.read_text().replace("rayclusters, ", "", 1))
    rules = tmp_path / "manifests/components/prometheus-rules/prometheus-rules.yaml"
    rules.write_text(rules.read_text() + "# a new rule\n")
    cli = tmp_path / "docs/cli.md"
    cli.write_text(
        "\n".join(line for line in cli.read_text().split("\n") if "`daemonset`" not in line)
    )
    reference = tmp_path / "docs/policy-reference.md"
    reference.unlink()
    readme = tmp_path / "charts/preemptguard/README.md"
    readme.write_text(readme.read_text().replace("| `replicas` |", "| `replica` |", 1))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    proc = generate("--check", *root)

    assert proc.returncode == 1, proc.stderr
    stale = sorted(line.split()[1] for line in proc.stdout.splitlines())
    assert stale == sorted(
        [
            "charts/preemptguard/files/policies/policy.yaml",
            "manifests/base/policies/extra.yaml",
            "charts/preemptguard/files/admission-policies/mutating-admission-policy.yaml",
            "manifests/base/webhooks.yaml",
            "charts/preemptguard/files/monitoring/prometheus-rules.yaml",
            "docs/cli.md",
            "docs/policy-reference.md",
            "charts/preemptguard/README.md",
        ]
    ), proc.stdout
    assert "run `make generate`" in proc.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before

    assert generate(*root).returncode == 0
    assert generate("--check", *root).returncode == 0
    assert not extra.exists()
    for path in (chart_policy, mutating, webhooks, cli, reference, readme):
        assert path.read_bytes() == (REPO / path.relative_to(tmp_path)).read_bytes(), path
    assert (
        tmp_path / "charts/preemptguard/files/monitoring/prometheus-rules.yaml"
    ).read_bytes() == (rules.read_bytes())


def test_a_finding_code_without_a_description_stops_the_generator() -> None:
    """The list of finding codes in docs/cli.md cannot silently miss one: the generator refuses
    to write it while hack/generate.py lacks a description of every code."""
    source = GENERATE.read_text()
    assert '"reserved-priority-class": (' in source
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy, sys; sys.argv = ['generate.py', '--check'];"
            f"g = runpy.run_path({str(GENERATE)!r}, run_name='generate');"
            "del g['FINDING_CODES']['reserved-priority-class'];"
            "sys.exit(g['main'](['--check']))",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "add reserved-priority-class" in proc.stderr


def test_the_chart_values_table_is_the_values_comments(tmp_path: Path) -> None:
    """The values table in the chart's README is generated from the `# --` comments in its
    values.yaml: a changed comment makes it stale, and a value without one stops the generator."""
    copy_tree(tmp_path)
    root = ["--root", str(tmp_path)]
    values = tmp_path / "charts/preemptguard/values.yaml"
    readme = tmp_path / "charts/preemptguard/README.md"
    text = values.read_text()
    assert "\n# -- Webhook replicas, spread across standard nodes;" in text
    values.write_text(
        text.replace("# -- Webhook replicas, spread", "# -- How many replicas, spread")
    )

    proc = generate("--check", *root)

    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [
        "stale: charts/preemptguard/README.md (from charts/preemptguard/values.yaml (its `# --` "
        "comments))"
    ], proc.stdout
    assert generate(*root).returncode == 0
    assert "| `replicas` | int | `2` | How many replicas, spread across standard nodes;" in (
        readme.read_text()
    )

    values.write_text(values.read_text() + "\n# Not a description.\nnewValue:\n  inner: 1\n")
    proc = generate("--check", *root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no `# --` description for newValue.inner" in proc.stderr
