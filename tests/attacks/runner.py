"""One attack against a running server, with ordinary reviews probing it before, during and
after: what share of them was answered in time, and how soon after the attack the server
answered in time again."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.attacks import floods
from tests.attacks.floods import Attack, Counts, Target
from tests.attacks.probe import Answer, Probe

# The probe runs alone this long before the attack starts, and on this long after it stops.
LEAD = 1.0
AFTER = 6.0
# Reviews sent this soon after the attack starts are not counted as under attack: the
# attacker's processes are still starting.
SETTLE = 0.5


@dataclass
class Report:
    attack: str
    seconds: float
    # The probe's reviews sent while the attack ran.
    during: list[Answer]
    # Seconds from the attack's end to the first in-time answer completed after it.
    recovery: float | None
    attacker: Counts = field(default_factory=dict)
    # CPU seconds the server's processes used while the attack ran.
    server_cpu: float | None = None

    @property
    def in_time(self) -> int:
        return sum(a.in_time for a in self.during)

    @property
    def share(self) -> float:
        return self.in_time / len(self.during) if self.during else 0.0

    def seconds_at(self, quantile: float) -> float:
        times = sorted(a.seconds for a in self.during)
        if not times:
            return float("nan")
        return times[min(len(times) - 1, int(quantile * len(times)))]

    def line(self) -> str:
        fresh = [a for a in self.during if a.fresh]
        kept = [a for a in self.during if not a.fresh]
        recovery = "never" if self.recovery is None else f"{self.recovery:.2f}"
        cpu = "" if self.server_cpu is None else f"{self.server_cpu / self.seconds:.2f}"
        done = ", ".join(f"{k} {v}" for k, v in sorted(self.attacker.items()))
        return (
            f"| {self.attack} | {self.in_time}/{len(self.during)} ({100 * self.share:.1f} %) "
            f"| {_share(kept)} | {_share(fresh)} | {1000 * self.seconds_at(0.5):.1f} "
            f"| {1000 * self.seconds_at(0.99):.1f} | {recovery} | {cpu} | {done} |"
        )


HEADER = (
    "| attack | in time | kept-alive | fresh | p50 ms | p99 ms | back in time after (s) "
    "| server CPU/s | attacker |\n|---|---|---|---|---|---|---|---|---|"
)


def _share(answers: Sequence[Answer]) -> str:
    if not answers:
        return "-"
    return f"{100 * sum(a.in_time for a in answers) / len(answers):.1f} %"


def assault(
    target: Target,
    ca: Path,
    review: dict[str, Any],
    attack: Attack,
    *,
    seconds: float,
    seed: int,
    probe_rate: float = 20.0,
    server_pids: Sequence[int] = (),
    after: float = AFTER,
) -> Report:
    """Run ``attack`` for ``seconds`` while probing; the report of the probe's reviews."""
    probe = Probe(target, ca, review, probe_rate)
    probe.start()
    time.sleep(LEAD)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    attacker = context.Process(
        target=_attack, args=(attack, target, seconds, seed, results), daemon=True
    )
    began = time.monotonic() - probe.started
    cpu_before = _cpu(server_pids)
    attacker.start()
    attacker.join(seconds + 60)
    ended = time.monotonic() - probe.started
    cpu_used = _cpu(server_pids) - cpu_before if server_pids else None
    if attacker.is_alive():
        attacker.kill()
    counts: Counts = results.get(timeout=5) if attacker.exitcode == 0 else {"crashed": 1}
    time.sleep(after)
    answers = probe.stop()
    during = [a for a in answers if began + SETTLE <= a.sent < ended]
    return Report(
        attack.spec,
        ended - began,
        during,
        _recovery(answers, ended),
        counts,
        cpu_used,
    )


def _attack(
    attack: Attack, target: Target, seconds: float, seed: int, results: Any
) -> None:  # pragma: no cover - runs in the attacker's process
    results.put(floods.run(attack, target, seconds, seed))


def _recovery(answers: Sequence[Answer], ended: float) -> float | None:
    after = [a.done - ended for a in answers if a.in_time and a.done >= ended]
    return min(after) if after else None


def _cpu(pids: Sequence[int]) -> float:
    """CPU seconds used so far by ``pids`` and their children (living ones)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in _with_children(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _with_children(pids: Sequence[int]) -> list[int]:
    found = list(pids)
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(parent, []).append(int(entry))
    i = 0
    while i < len(found):
        found.extend(parents.get(found[i], []))
        i += 1
    return found
