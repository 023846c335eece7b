"""Engine speed and `check` against a bare YAML parse, in one run; prints figures, asserts none.

    .venv/bin/python benchmarks/engine_bench.py [--objects N] [--repeats R] [--rss-objects M]

1. Per recorded pod (the CREATE pod reviews in tests/fixtures/admission-reviews/, and the sweep
   pod once placed, as the validating hook sees it): microseconds for ``evaluate`` alone, for
   ``evaluate`` + ``make_patch`` (what ``admission.core.judge`` does), and for the mutating hook's
   whole answer (``core.answer``: judge, response, base64 patch), each on fresh copies of the
   object as the server gets them. Goals: evaluate + patch <= 2x evaluate; evaluate <= 30 us on
   a quiet machine. Then the whole review of the sweep pod through the server's WSGI app (the
   body read, decoded and judged, the answer encoded, the log line written to /dev/null, the
   metrics counted), back to back and with 8 MiB written between reviews, which leaves the
   caches about as cold as the TLS and network work between a serving worker's reviews does:
   the second is nearer what a review costs in the server.
2. ``preemptguard check -o json`` (the installed console script, start-up included) on a
   generated file of N objects against a bare ``yaml.load_all(..., Loader=yaml.CSafeLoader)`` of
   the same file in a fresh interpreter (start-up included too), alternated, median of
   ``--repeats``. Goal: <= 1.5x.
3. Peak RSS of ``check`` on N objects and on ``--rss-objects`` (one file, and the same objects
   split into files of N), beside the bare parse: memory flat in the number of objects when
   the input is streamed.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

import webhook
from webhook.admission import core, review
from webhook.engine.decision import Context, NamespaceMeta, Obj
from webhook.engine.evaluation import evaluate
from webhook.engine.patch import make_patch
from webhook.engine.policy import Policy
from webhook.loading.manifests import MAX_INPUT_BYTES
from webhook.loading.policies import builtin_policy
from webhook.native import engine_build
from webhook.server import logs
from webhook.server.app import create_app
from webhook.server.metrics import Metrics

REPO = Path(__file__).resolve().parents[1]
REVIEWS = REPO / "tests" / "fixtures" / "admission-reviews"
# The recorded CREATE reviews of pods (the dry-run copies carry the same pods).
POD_REVIEWS = (
    "create-pod-sweep-mutate.json",
    "create-pod-sweep-validate.json",
    "create-pod-coordinator-0-mutate.json",
    "create-pod-coordinator-0-validate.json",
)
EXAMPLES = ("serving.yaml", "finetune-pod.yaml")
BARE_PARSE = (
    "import sys, yaml\n"
    "n = 0\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, 'rb') as f:\n"
    "        n += sum(d is not None for d in yaml.load_all(f, Loader=yaml.CSafeLoader))\n"
    "print(n)\n"
)


def preemptguard_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m webhook``."""
    script = Path(sys.executable).with_name("preemptguard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]


# --- 1. the engine per recorded pod -------------------------------------------------------


class Case:
    """A recorded pod review: its body, and the request parsed as the server parses it."""

    def __init__(self, label: str, body: bytes) -> None:
        self.label = label
        self.body = body
        self.request = review.parse_review(review.loads(body))
        self.context = Context(
            operation=self.request.operation,
            namespace=self.request.namespace,
            requester=self.request.requester,
        )

    def fresh_objects(self, count: int) -> list[Obj]:
        """``count`` independent copies of the pod, decoded from the body as the server does."""
        out = []
        for _ in range(count):
            request = review.parse_review(review.loads(self.body))
            assert request.object is not None
            out.append(request.object)
        return out

    def fresh_requests(self, count: int) -> list[review.Request]:
        return [review.parse_review(review.loads(self.body)) for _ in range(count)]


def cases(policy: Policy) -> list[Case]:
    found = [Case(f.removesuffix(".json"), (REVIEWS / f).read_bytes()) for f in POD_REVIEWS]
    # The sweep pod as the validating hook sees it: already placed by the mutating hook.
    sweep = found[0]
    assert sweep.request.object is not None
    placed = jsonpatch.apply_patch(
        sweep.request.object, make_patch(sweep.request.object, _decide(sweep, policy))
    )
    doc = json.loads(sweep.body)
    doc["request"]["object"] = placed
    found.append(Case("sweep pod, already placed", json.dumps(doc).encode()))
    return found


def _decide(case: Case, policy: Policy) -> Obj:
    assert case.request.object is not None
    return evaluate(case.request.object, policy, case.context).mutated


def per_call_us(
    make_inputs: Callable[[int], list[Any]], call: Callable[[Any], object], *, rounds: int,
    number: int,
) -> float:  # fmt: skip
    """The least, over ``rounds``, of the mean CPU microseconds of ``call`` on ``number``
    fresh inputs.

    CPU time of this thread, so that other processes on a shared machine count less; the
    least round, as ``timeit`` advises, because what else runs only ever adds to it (on a
    shared virtual machine even CPU time moves by half from one round to the next). The
    inputs are moved out of the garbage collector's sight while they are timed: a server
    holds one review at a time, and collections walking a thousand held copies would time
    the bench, not the engine (what each call makes and drops is still collected).
    """
    samples = []
    for _ in range(rounds):
        inputs = make_inputs(number)
        gc.collect()
        gc.freeze()
        try:
            start = time.thread_time()
            for item in inputs:
                call(item)
            samples.append((time.thread_time() - start) / number * 1e6)
        finally:
            gc.unfreeze()
    return min(samples)


def bench_engine(policy: Policy, rounds: int, number: int) -> None:
    def no_namespaces(name: str) -> NamespaceMeta:
        return NamespaceMeta()

    print(f"## engine, per recorded pod (CPU us per call: least of {rounds} rounds of {number} "
          "fresh copies)")  # fmt: skip
    header = f"{'pod':38} {'evaluate':>9} {'+ patch':>9} {'ratio':>6} {'answer':>9}  patch ops"
    print(header)
    ratios, evals = [], []
    for case in cases(policy):
        ctx = case.context

        def alone(obj: Obj, ctx: Context = ctx) -> object:
            return evaluate(obj, policy, ctx)

        def patched(obj: Obj, ctx: Context = ctx) -> object:
            return make_patch(obj, evaluate(obj, policy, ctx).mutated)

        only = per_call_us(case.fresh_objects, alone, rounds=rounds, number=number)
        both = per_call_us(case.fresh_objects, patched, rounds=rounds, number=number)
        whole = per_call_us(
            case.fresh_requests,
            lambda r: core.answer(core.Hook.MUTATE, r, policy, no_namespaces),
            rounds=rounds,
            number=number,
        )
        obj = case.fresh_objects(1)[0]
        ops = len(make_patch(obj, evaluate(obj, policy, ctx).mutated))
        ratios.append(both / only)
        evals.append(only)
        print(f"{case.label:38} {only:9.1f} {both:9.1f} {both / only:5.2f}x {whole:9.1f}  {ops}")
    print(
        f"worst: evaluate {max(evals):.1f} us (goal <= 30 us, quiet machine); "
        f"evaluate + patch {max(ratios):.2f}x evaluate (goal <= 2x)"
    )


def _start_response(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
    return None


# Four times the L2 cache of a core here: the caches left about as cold as a serving worker
# finds them, its TLS, socket and kernel work having run since its last review (timed inside
# a worker under hey, a review costs 2.2-2.4x its back-to-back cost; this gives 1.4-1.9x).
EVICT_BYTES = 8 * 2**20


def bench_review_caches(policy: Policy, rounds: int, number: int) -> None:
    app = create_app(lambda: policy, metrics=Metrics())
    body = (REVIEWS / POD_REVIEWS[0]).read_bytes()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mutate",
        "query_string": b"timeout=10s",
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    message = {"type": "http.request", "body": body, "more_body": False}
    loop = asyncio.new_event_loop()

    async def receive() -> dict[str, Any]:
        return message

    async def send(_: Any) -> None:
        return None

    def review_once() -> float:
        # The transport's whole path for one call, on an event loop, as a worker runs it.
        call = app(scope, receive, send)
        start = time.thread_time()
        loop.run_until_complete(call)
        return time.thread_time() - start

    evict, zeros = bytearray(EVICT_BYTES), bytes(EVICT_BYTES)

    def evicted_once() -> float:
        evict[:] = zeros
        return review_once()

    with open(os.devnull, "w") as devnull:
        logs.configure("info", devnull)  # a descriptor: the line the server writes, to nowhere
        try:
            warm = min(sum(review_once() for _ in range(number)) for _ in range(rounds))
            cold = min(sum(evicted_once() for _ in range(number)) for _ in range(rounds))
        finally:
            logs.configure("info")
    warm_us, cold_us = warm / number * 1e6, cold / number * 1e6
    loop.close()
    print(f"\n## the sweep pod's whole review through the ASGI app (CPU us per review, least of "
          f"{rounds} rounds of {number})")  # fmt: skip
    print(f"{'back to back':38} {warm_us:9.1f}")
    print(f"{f'{EVICT_BYTES // 2**20} MiB written between reviews':38} {cold_us:9.1f}   "
          f"{cold_us / warm_us:.2f}x, nearer what a review costs a serving worker")  # fmt: skip


# --- 2 and 3. check against a bare libyaml parse ------------------------------------------


def _documents() -> list[str]:
    return [
        yaml.safe_dump(doc)
        for name in EXAMPLES
        for doc in yaml.safe_load_all((REPO / "examples" / name).read_text())
    ]


def write_objects(path: Path, count: int, start: int = 0) -> None:
    docs = _documents()
    with path.open("w") as out:
        for i in range(start, start + count):
            out.write(docs[i % len(docs)].replace("name: ", f"name: o{i}-", 1) + "---\n")
    if path.stat().st_size > MAX_INPUT_BYTES:
        raise SystemExit(f"{path}: {path.stat().st_size} bytes, over check's input limit")


def run_timed(argv: list[str], stdout: Any) -> float:
    """Run ``argv``; seconds from start to exit. Exit 0 or 1 (something refused) only."""
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        err = proc.stderr.decode(errors="replace")
        raise SystemExit(f"{argv[:3]} exited {proc.returncode}: {err[-2000:]}")
    return elapsed


# A process's peak RSS as wait4() reports it counts what it held before exec: a child forked
# (or vforked) from this benchmark would start from this process's size. So the command is
# started by a bare interpreter (about 8 MiB), which reports its child's peak in KiB.
PEAK_RSS = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "with open(sys.argv[1], 'w') as out:\n"
    "    out.write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def peak_rss_kib(argv: list[str], tmp: Path) -> int:
    report = tmp / "peak-rss"
    run_timed([sys.executable, "-S", "-c", PEAK_RSS, str(report), *argv], subprocess.DEVNULL)
    return int(report.read_text())


def check_argv(paths: list[Path]) -> list[str]:
    files = [arg for path in paths for arg in ("-f", str(path))]
    return [*preemptguard_command(), "check", *files, "-o", "json"]


def bare_argv(paths: list[Path]) -> list[str]:
    return [sys.executable, "-c", BARE_PARSE, *map(str, paths)]


def timed_check(paths: list[Path], out: Path, objects: int) -> float:
    with out.open("wb") as sink:
        elapsed = run_timed(check_argv(paths), sink)
    counted = json.loads(out.read_bytes())["summary"]["objects"]
    if counted != objects:
        raise SystemExit(f"check counted {counted} objects, expected {objects}")
    return elapsed


def timed_bare(paths: list[Path], out: Path, objects: int) -> float:
    with out.open("wb") as sink:
        elapsed = run_timed(bare_argv(paths), sink)
    counted = int(out.read_text())
    if counted != objects:
        raise SystemExit(f"the bare parse read {counted} documents, expected {objects}")
    return elapsed


def compile_package() -> None:
    """Write the package's bytecode, as installing it does (pip compiles what it installs, as
    it did PyYAML's): in a source checkout installed editable, with PYTHONDONTWRITEBYTECODE
    set, every run of check would compile the package again, about 0.1 s of its start-up."""
    package = Path(webhook.__file__).parent
    compileall.compile_dir(str(package), quiet=1)


@contextmanager
def workdir() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="pg-engine-bench-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_check(objects: int, repeats: int, tmp: Path) -> None:
    path = tmp / f"objects-{objects}.yaml"
    write_objects(path, objects)
    size = path.stat().st_size
    print(f"\n## check on {objects} objects in one file ({size / 2**20:.1f} MiB), start-up "
          f"included, median of {repeats} alternated runs")  # fmt: skip
    print(f"# {check_argv([path])[0]} check -f FILE -o json   vs   python -c "
          "'yaml.load_all(f, Loader=yaml.CSafeLoader)'")  # fmt: skip
    compile_package()
    startup = run_timed([*preemptguard_command(), "--version"], subprocess.DEVNULL)
    checks, bares = [], []
    for i in range(repeats):
        # Alternate which goes first, so drift in the machine's load falls on both.
        order = ("check", "bare") if i % 2 == 0 else ("bare", "check")
        for which in order:
            if which == "check":
                checks.append(timed_check([path], tmp / "out.json", objects))
            else:
                bares.append(timed_bare([path], tmp / "out.txt", objects))
    check_s, bare_s = statistics.median(checks), statistics.median(bares)
    print(f"{'preemptguard check':28} {check_s:7.2f} s  {objects / check_s:8.0f} objects/s   "
          f"runs: {', '.join(f'{s:.2f}' for s in checks)}")  # fmt: skip
    print(f"{'bare CSafeLoader parse':28} {bare_s:7.2f} s  {objects / bare_s:8.0f} objects/s   "
          f"runs: {', '.join(f'{s:.2f}' for s in bares)}")  # fmt: skip
    print(f"check / bare parse: {check_s / bare_s:.2f}x (goal <= 1.5x); "
          f"`preemptguard --version` alone: {startup:.2f} s")  # fmt: skip


def bench_memory(small: int, large: int, tmp: Path) -> None:
    print("\n## peak RSS (one run each; stdout to /dev/null)")
    small_file = tmp / f"rss-{small}.yaml"
    write_objects(small_file, small)
    large_file = tmp / f"rss-{large}.yaml"
    write_objects(large_file, large)
    parts = []
    for i in range(0, large, small):
        part = tmp / f"rss-part-{i // small:03d}.yaml"
        write_objects(part, min(small, large - i), start=i)
        parts.append(part)
    rows = [
        (f"{small} objects, one file", [small_file]),
        (f"{large} objects, one file", [large_file]),
        (f"{large} objects, {len(parts)} files of {small}", parts),
    ]
    print(f"{'input':34} {'MiB':>6} {'check':>12} {'bare parse':>12}")
    peaks = {}
    for label, paths in rows:
        size = sum(p.stat().st_size for p in paths) / 2**20
        check_kib = peak_rss_kib(check_argv(paths), tmp)
        bare_kib = peak_rss_kib(bare_argv(paths), tmp)
        peaks[label] = check_kib
        print(f"{label:34} {size:6.1f} {check_kib / 1024:8.1f} MiB {bare_kib / 1024:8.1f} MiB")
    first, one_file, split = (peaks[label] for label, _ in rows)
    print(f"check peak RSS, {large} vs {small} objects: {one_file / first:.2f}x in one file, "
          f"{split / first:.2f}x split into files of {small} (flat: ~1.0x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000, help="objects in the check file")
    parser.add_argument("--repeats", type=int, default=5, help="runs of check and of the parse")
    parser.add_argument(
        "--rss-objects", type=int, default=100_000, help="the larger input for peak RSS; 0: skip"
    )
    parser.add_argument("--rounds", type=int, default=7, help="engine timing rounds")
    parser.add_argument("--number", type=int, default=1000, help="engine calls per round")
    args = parser.parse_args()
    print(f"# {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"# engine {engine_build()} (make compile / make clean-compiled)")
    bench_engine(builtin_policy(), args.rounds, args.number)
    bench_review_caches(builtin_policy(), args.rounds, args.number)
    with workdir() as tmp:
        bench_check(args.objects, args.repeats, tmp)
        if args.rss_objects:
            bench_memory(args.objects, args.rss_objects, tmp)
    print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
