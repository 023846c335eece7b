"""Long fuzzing runs of the admission app and the CLI, with the oracle of tests/fuzz.

    python benchmarks/fuzz.py --reviews 100000 --seed 7
    python benchmarks/fuzz.py --reviews 0 --cli 2000 --seed 7
    python benchmarks/fuzz.py --seed 7 --case 1234 --show        # one case, its body and answer
    python benchmarks/fuzz.py --seed 7 --case 1234 --save tests/fuzz/reproducers/mutate--x.json

Prints progress, the count of each outcome, and every failure with the seed and case number
that make it again. Exits 1 when anything failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz import known  # noqa: E402
from tests.fuzz.mutators import manifest_case, review_case  # noqa: E402
from tests.fuzz.runner import (  # noqa: E402
    Found,
    Report,
    ReviewRunner,
    describe,
    run_cli,
    run_cli_reviews,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=10_000, help="review cases to run")
    parser.add_argument("--cli", type=int, default=0, help="CLI cases to run (in process)")
    parser.add_argument(
        "--cli-reviews",
        type=int,
        default=0,
        help="review cases given to `check -o json`, compared with the server's answers",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--case", type=int, default=None, help="run only this review case")
    parser.add_argument("--cli-case", type=int, default=None, help="run only this CLI case")
    parser.add_argument("--show", action="store_true", help="print the case and its answer")
    parser.add_argument("--save", type=Path, default=None, help="write the case's body here")
    parser.add_argument("--every", type=int, default=5_000, help="progress every N cases")
    args = parser.parse_args()

    if args.case is not None:
        return _one_review(args.seed, args.case, args.show, args.save)
    if args.cli_case is not None:
        return _one_cli(args.seed, args.cli_case, args.show, args.save)

    total = Report()
    if args.reviews:
        print(f"reviews: seed {args.seed}, cases {args.start}..{args.start + args.reviews - 1}")
        with ReviewRunner() as runner:
            report = runner.run(
                args.seed,
                range(args.start, args.start + args.reviews),
                progress=_progress(args.every, "reviews"),
            )
        _summary("reviews", report)
        total.add(report)
    if args.cli:
        print(f"cli: seed {args.seed}, cases {args.start}..{args.start + args.cli - 1}")
        report = run_cli(
            args.seed, range(args.start, args.start + args.cli), progress=_progress(500, "cli")
        )
        _summary("cli", report)
        total.add(report)
    if args.cli_reviews:
        print(f"cli reviews: seed {args.seed}, cases {args.start}..")
        with ReviewRunner() as runner:
            report = run_cli_reviews(
                runner,
                args.seed,
                range(args.start, args.start + args.cli_reviews),
                progress=_progress(500, "cli reviews"),
            )
        _summary("cli reviews", report)
        total.add(report)
    _failures(total.found)
    return 1 if total.found else 0


def _progress(every: int, what: str):  # type: ignore[no-untyped-def]
    def show(n: int, report: Report) -> None:
        if n % every == 0:
            rate = n / report.seconds if report.seconds else 0.0
            print(
                f"  {what}: {n} cases, {report.seconds:.0f} s ({rate:.0f}/s), "
                f"{len(report.found)} failures",
                flush=True,
            )

    return show


def _summary(what: str, report: Report) -> None:
    print(f"{what}: {describe(report)}")
    print(f"  outcomes: {dict(sorted(report.outcomes.items()))}")
    print(f"  mutations applied: {dict(sorted(report.mutations.items()))}")


def _failures(found: list[Found]) -> None:
    if not found:
        print("no failures")
        return
    by_check = Counter(f.failure.check for f in found)
    print(f"{len(found)} failures: {dict(by_check.most_common())}")
    for f in found:
        bug = known.match(f)
        tag = f" (known: {bug.name})" if bug is not None else ""
        print(f"FAIL{tag} {f}")


def _one_review(seed: int, index: int, show: bool, save: Path | None) -> int:
    case = review_case(seed, index)
    print(f"{case.ref}: /{case.hook} from {case.origin}; {case.mutations}")
    print(f"  {len(case.body)} bytes, content type {case.content_type!r}, warn={case.warn_mode}")
    if save is not None:
        save.write_bytes(case.body)
        print(f"  body written to {save}")
    with ReviewRunner() as runner:
        replies = []
        post = runner.poster("warn" if case.warn_mode else "enforce")

        def recorded(hook: str, body: bytes, content_type: str):  # type: ignore[no-untyped-def]
            reply = post(hook, body, content_type)
            replies.append((hook, reply))
            return reply

        runner.poster = lambda mode: recorded  # type: ignore[method-assign]
        started = time.perf_counter()
        verdict = runner.run_case(case)
        seconds = time.perf_counter() - started
    if show:
        print(f"  body: {case.body[:2000].decode('utf-8', 'backslashreplace')}")
        for hook, reply in replies:
            text = reply.data[:2000].decode("utf-8", "backslashreplace")
            print(f"  /{hook} -> {reply.status} in {reply.seconds * 1000:.1f} ms: {text}")
    print(f"  outcome {verdict.outcome} in {seconds * 1000:.1f} ms")
    for failure in verdict.failures:
        print(f"  FAIL {failure}")
    return 1 if verdict.failures else 0


def _one_cli(seed: int, index: int, show: bool, save: Path | None) -> int:
    case = manifest_case(seed, index)
    print(f"{case.ref}: preemptguard {' '.join(case.args)}; {case.mutations}")
    if save is not None:
        data = case.stdin if case.stdin is not None else next(iter(case.files.values()))
        save.write_bytes(data)
        print(f"  manifest written to {save}")
    if show:
        for name, data in case.files.items():
            print(f"  {name}: {data[:2000].decode('utf-8', 'backslashreplace')}")
    report = run_cli(seed, [index])
    print(f"  {describe(report)}")
    for f in report.found:
        print(f"  FAIL {f.failure}")
    return 1 if report.found else 0


if __name__ == "__main__":
    sys.exit(main())
