"""Engine speed: microseconds per evaluation, per evaluation plus patch, and `check` throughput.

Run: python benchmarks/engine_bench.py [--objects 10000]
Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from webhook.engine.decision import Context
from webhook.engine.evaluation import evaluate
from webhook.engine.patch import make_patch
from webhook.loading.policies import builtin_policy

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "admission-reviews" / "create-pod-sweep-mutate.json"


def realistic_pod() -> dict[str, Any]:
    """A pod as the API server hands it to the webhook (recorded from a real one)."""
    obj: dict[str, Any] = json.loads(FIXTURE.read_text())["request"]["object"]
    return obj


def per_call_us(
    func: Callable[[], object], *, rounds: int = 7, number: int = 2000
) -> tuple[float, float]:
    """Median and best of ``rounds`` timings of ``number`` calls, in microseconds per call."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            func()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples), min(samples)


def check_throughput(objects: int) -> tuple[float, float]:
    docs = [
        yaml.safe_dump(doc)
        for name in ("serving.yaml", "finetune-pod.yaml")
        for doc in yaml.safe_load_all((REPO / "examples" / name).read_text())
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as out:
        for i in range(objects):
            out.write(docs[i % len(docs)].replace("name: ", f"name: o{i}-", 1) + "---\n")
        path = out.name
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-f", path, "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    Path(path).unlink()
    counted = json.loads(proc.stdout)["summary"]["objects"]
    assert counted == objects, (counted, proc.stderr[-500:])
    return objects / elapsed, elapsed


def report(label: str, median: float, best: float) -> None:
    print(f"{label + ':':40} median {median:7.1f} us/pod   best {best:7.1f} us/pod")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()
    policy = builtin_policy()
    pod = realistic_pod()
    ctx = Context(namespace="team-a")

    med, best = per_call_us(lambda: evaluate(pod, policy, ctx))
    report("evaluate (recorded sweep pod)", med, best)

    def with_patch() -> object:
        return make_patch(pod, evaluate(pod, policy, ctx).mutated)

    med, best = per_call_us(with_patch)
    report("evaluate + JSON Patch", med, best)
    rate, elapsed = check_throughput(args.objects)
    print(
        f"preemptguard check, {args.objects} objects in one file: "
        f"{rate:8.0f} objects/s ({elapsed:.2f} s incl. start-up)"
    )


if __name__ == "__main__":
    main()
