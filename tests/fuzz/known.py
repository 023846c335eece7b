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


KNOWN: tuple[KnownBug, ...] = (
    KnownBug(
        "deep-value-repr-500",
        "since the JSON reader tries orjson first (commit 9c4708c), values nested up to 1,024 "
        "levels are read whole instead of being cut at 200 levels; a value nested about "
        "975-1,020 levels that is then passed to repr() or str() raises RecursionError and "
        "the review is answered HTTP 500: apiVersion, kind or request.operation in "
        "parse_review (webhook/admission/review.py, which should answer 400) and "
        "request.object.kind in the engine's _not_a_workload (webhook/engine/evaluation.py, "
        "a well-formed review that should be answered 200)",
        _deep_value_500,
        (
            "mutate--apiversion-nested-1000-levels.json",
            "mutate--object-kind-nested-1000-levels.json",
        ),
    ),
    KnownBug(
        "overlong-number-read-as-text",
        "a JSON integer of more than 4,300 digits where the review has a string (request.uid, "
        "namespace, name, kind.kind, kind.group, subResource, userInfo.username) is read as "
        "the text '<not read: a number of more than 4300 digits>', so a body that is not an "
        "AdmissionReview is answered HTTP 200 (for request.uid, with that text as the uid) "
        "instead of 400",
        _malformed_answered("a number of more than 4300 digits"),
        ("mutate--uid-is-an-overlong-number.json",),
    ),
    KnownBug(
        "body-not-utf8-accepted",
        "json.loads() on the raw bytes detects UTF-16 and UTF-32 and lets surrogates encoded "
        "as bytes (ED A0 80) through, so a body that is not UTF-8 JSON (RFC 8259 section 8.1) "
        "is answered HTTP 200 instead of 400",
        _malformed_answered("not JSON: not UTF-8"),
        ("validate--body-in-utf-16.json", "mutate--raw-surrogate-bytes.json"),
    ),
)


def match(found: Found) -> KnownBug | None:
    return next((bug for bug in KNOWN if bug.matches(found)), None)


def reproducer_reasons() -> dict[str, str]:
    """Reproducer file name -> why it is expected to fail."""
    return {name: f"{bug.name}: {bug.reason}" for bug in KNOWN for name in bug.reproducers}
