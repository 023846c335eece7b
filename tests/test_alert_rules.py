"""The shipped alert rules (manifests/components/prometheus-rules, and the chart's copy): valid
for Prometheus, each linked to its runbook section, and each firing on the series it is about
and quiet without them, as ``promtool test rules`` evaluates them."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from harness.manifests import kustomize, prepare_tree
from webhook.cluster.metrics import ObserverMetrics
from webhook.server.metrics import CertificateMetrics, Metrics

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "manifests" / "components" / "prometheus-rules" / "prometheus-rules.yaml"
CHART_COPY = REPO / "charts" / "preemptguard" / "files" / "monitoring" / "prometheus-rules.yaml"
RUNBOOK = REPO / "docs" / "runbook.md"
DAY = 86400


@cache
def promtool() -> str:
    proc = subprocess.run(
        [str(REPO / "hack" / "promtool.sh")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"hack/promtool.sh found no promtool:\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def _rule_file(tmp_path: Path, *, annotations: bool = True) -> Path:
    """The rules as Prometheus reads them; without annotations where a test compares the
    labels an alert fires with (promtool compares annotations too when they are present)."""
    groups = yaml.safe_load(RULES.read_text())["spec"]
    if not annotations:
        for group in groups["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(groups))
    return path


def _alerts() -> list[dict[str, Any]]:
    spec = yaml.safe_load(RULES.read_text())["spec"]
    return [rule for group in spec["groups"] for rule in group["rules"]]


def test_the_chart_renders_the_same_rules() -> None:
    assert CHART_COPY.read_text() == RULES.read_text(), (
        "cp manifests/components/prometheus-rules/prometheus-rules.yaml "
        "charts/preemptguard/files/monitoring/"
    )


def test_an_overlay_adds_the_component_as_shipped(tmp_path: Path) -> None:
    tree = prepare_tree(tmp_path)
    overlay = tree.root / "overlays" / "with-alerts"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../cert-manager"],
                "components": ["../../components/prometheus-rules"],
            }
        )
    )
    proc = subprocess.run(
        [kustomize(), "build", str(overlay)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    objects = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    shipped = yaml.safe_load(RULES.read_text())
    assert rule["spec"] == shipped["spec"]
    assert rule["metadata"]["namespace"] == shipped["metadata"]["namespace"]


def test_the_rules_are_valid_for_prometheus(tmp_path: Path) -> None:
    proc = subprocess.run(
        [promtool(), "check", "rules", str(_rule_file(tmp_path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_links_a_section_of_the_runbook() -> None:
    anchors = {
        re.sub(r"[^a-z0-9-]", "", heading.lower().replace(" ", "-"))
        for heading in re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), re.MULTILINE)
    }
    for alert in _alerts():
        url = alert["annotations"]["runbook_url"]
        assert url.endswith(f"docs/runbook.md#{alert['alert'].lower()}"), url
        assert alert["alert"].lower() in anchors, alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning")


# Each alert: the series that make it fire (promtool's notation, one sample a minute), the
# minute it is checked at, and the labels it fires with; the same check with ``quiet`` series
# must find it silent.
CASES: dict[str, dict[str, Any]] = {
    "PreemptguardNoReplicaAnswering": {
        "firing": {'up{job="preemptguard", instance="a"}': "0x10"},
        "quiet": {'up{job="preemptguard", instance="a"}': "1x10"},
        "at": "5m",
        "labels": {"severity": "critical"},
    },
    "PreemptguardReviewsDropped": {
        "firing": {'preemptguard_reviews_dropped_total{hook="mutate", why="late"}': "0 0 0 3 3 3"},
        "quiet": {
            'preemptguard_reviews_dropped_total{hook="mutate", why="body-late"}': "0 0 0 3 3 3"
        },
        "at": "4m",
        "labels": {"severity": "critical", "hook": "mutate", "why": "late"},
    },
    "PreemptguardReviewsFailing": {
        "firing": {
            'preemptguard_admissions_total{hook="validate", outcome="error", workload_class="none"}': "0 0 2 2"
        },
        "quiet": {
            'preemptguard_admissions_total{hook="validate", outcome="allowed", workload_class="none"}': "0 0 2 2"
        },
        "at": "3m",
        "labels": {"severity": "warning", "hook": "validate"},
    },
    "PreemptguardReviewsRefusedBusy": {
        "firing": {
            'preemptguard_admissions_total{hook="mutate", outcome="busy", workload_class="none"}': "0+5x20"
        },
        "quiet": {
            'preemptguard_admissions_total{hook="mutate", outcome="busy", workload_class="none"}': "0x20"
        },
        "at": "15m",
        "labels": {"severity": "warning", "hook": "mutate"},
    },
    "PreemptguardCertificateExpiresSoon": {
        "firing": {"preemptguard_certificate_expiry_timestamp_seconds": f"{10 * DAY}x5"},
        "quiet": {"preemptguard_certificate_expiry_timestamp_seconds": f"{60 * DAY}x5"},
        "at": "2m",
        "labels": {"severity": "warning"},
    },
    "PreemptguardPolicyReloadFailing": {
        "firing": {"preemptguard_policy_reload_failures_total": "0 0 1 1 1"},
        "quiet": {"preemptguard_policy_reload_failures_total": "0 0 0 0 0"},
        "at": "3m",
        "labels": {"severity": "warning"},
    },
    "PreemptguardPodsOnCapacityTheirClassMayNotUse": {
        "firing": {'preemptguard_audit_findings{code="critical-on-preemptible"}': "2x5"},
        "quiet": {'preemptguard_audit_findings{code="critical-on-preemptible"}': "0x5"},
        "at": "2m",
        "labels": {"severity": "critical"},
    },
    "PreemptguardReclaimKilledPodsMidCheckpoint": {
        "firing": {
            'preemptguard_displaced_pods_total{workload_class="interruptible", outcome="grace-expired"}': "0 0 1 1 1"
        },
        "quiet": {
            'preemptguard_displaced_pods_total{workload_class="interruptible", outcome="exited-in-time"}': "0 0 1 1 1"
        },
        "at": "3m",
        "labels": {"severity": "warning", "workload_class": "interruptible"},
    },
}


def _exported_names() -> set[str]:
    """Every series name the webhook's workers, its main process and the observer export."""
    registries = [Metrics().registry, ObserverMetrics().registry, CollectorRegistry()]
    CertificateMetrics(registries[-1])
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names = set()
    for registry in registries:
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
    return names


def test_the_rules_and_the_runbook_name_only_series_that_exist() -> None:
    exported = _exported_names()
    for text in (RULES.read_text(), RUNBOOK.read_text()):
        named = set(re.findall(r"\bpreemptguard_[a-z_]+[a-z]", text))
        # The runbook writes the watch caches' counters with a wildcard.
        named.discard("preemptguard_")
        assert named, "no series named"
        assert named <= exported, sorted(named - exported)


def test_every_alert_has_a_case() -> None:
    assert sorted(CASES) == sorted(a["alert"] for a in _alerts())


@pytest.mark.parametrize("alert", sorted(CASES))
def test_each_alert_fires_on_its_series_and_not_without(alert: str, tmp_path: Path) -> None:
    case = CASES[alert]
    rules = _rule_file(tmp_path, annotations=False)

    def test(series: dict[str, str], expected: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": [{"series": k, "values": v} for k, v in series.items()],
            "alert_rule_test": [
                {"eval_time": case["at"], "alertname": alert, "exp_alerts": expected}
            ],
        }

    spec = {
        "rule_files": [rules.name],
        "tests": [
            test(case["firing"], [{"exp_labels": case["labels"]}]),
            test(case["quiet"], []),
        ],
    }
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(spec))
    proc = subprocess.run(
        [promtool(), "test", "rules", tests.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
