"""Failures the fuzzer finds in ``webhook/`` that are reported and not fixed yet.

Each entry says what goes wrong, which failures it explains, and the reproducers under
``reproducers/`` that show it. The seeded runs set these failures aside (and say how many
there were); the reproducers are strict expected failures, so a fix makes them pass and
fail the build until the entry is removed here, which puts the check back in the runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.fuzz.runner import Found


@dataclass(frozen=True)
class KnownBug:
    name: str
    reason: str
    matches: Callable[[Found], bool]
    reproducers: tuple[str, ...]


def _malformed_answered(words: str) -> Callable[[Found], bool]:
    def matches(found: Found) -> bool:
        failure = found.failure
        return (
            failure.check == "expected-400"
            and words in failure.detail
            and "answered 200" in failure.detail
        )

    return matches


def _deep_value_500(found: Found) -> bool:
    """A 500 (or the error logged with it) for a case that nests a value about 1,000 levels."""
    depths = [label.split(":")[1] for label in found.mutations if label.startswith("deep:")]
    nested = any(d.isdigit() and 950 <= int(d) <= 1030 for d in depths)
    failure = found.failure
    if failure.check == "error-logged":
        return nested and "RecursionError" in failure.detail
    return nested and failure.check in ("expected-400", "http-500") and "500" in failure.detail


def _namespace_default_lost(found: Found) -> bool:
    failure = found.failure
    if failure.check != "cli-format-dependent":
        return False
    written, _, as_list = failure.detail.partition("; as a JSON List: ")
    return "(namespace default)" in as_list and "(namespace default)" not in written


KNOWN: tuple[KnownBug, ...] = ()


def match(found: Found) -> KnownBug | None:
    return next((bug for bug in KNOWN if bug.matches(found)), None)


def reproducer_reasons() -> dict[str, str]:
    """Reproducer file name -> why it is expected to fail."""
    return {name: f"{bug.name}: {bug.reason}" for bug in KNOWN for name in bug.reproducers}
