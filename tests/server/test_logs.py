"""Log lines written by many threads at once stay whole, one JSON object per line; the line
written for each review is the line structlog would write."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from webhook.server import logs

pytestmark = pytest.mark.slow


def test_lines_from_many_threads_are_whole(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with path.open("w") as stream:
        logs.configure("info", stream)
        try:
            log = logs.get_logger("test")

            def write(thread: int) -> None:
                for i in range(200):
                    log.info("line", thread=thread, i=i, pad="x" * 1000, odd="\udcff")

            threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            logs.configure("info")
    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert len(events) == 8 * 200
    assert sorted((e["thread"], e["i"]) for e in events) == [
        (t, i) for t in range(8) for i in range(200)
    ]
    assert all(e["component"] == "test" and e["level"] == "info" for e in events)


def _lines_written(
    tmp_path: Path, level: str, write: Callable[[logs.Logger], None]
) -> list[dict[str, Any]]:
    path = tmp_path / f"log-{level}"
    with path.open("w") as stream:
        logs.configure(level, stream)
        try:
            write(logs.get_logger("webhook.server.app"))
        finally:
            logs.configure("info")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


REVIEW_FIELDS: dict[str, Any] = {
    "uid": "89e071a2",
    "hook": "mutate",
    "namespace": "team-\udcff",  # a lone surrogate read from a request
    "duration_ms": 0.653,
    "dry_run": False,
    "workload_class": None,
    "patch_ops": 7,
    "detail": 'say "why"\n',
}


@pytest.mark.parametrize("odd", [False, True])
def test_the_review_line_is_the_line_structlog_writes(tmp_path: Path, odd: bool) -> None:
    fields = dict(REVIEW_FIELDS)
    if not odd:
        fields["namespace"] = "team-a"

    def both(log: logs.Logger) -> None:
        log.info_line("admission", dict(fields))
        log.info("admission", **fields)

    direct, chained = _lines_written(tmp_path, "info", both)
    assert direct.keys() == chained.keys()
    assert list(direct) == list(chained)  # the same order of keys, too
    stamps = direct.pop("timestamp"), chained.pop("timestamp")
    assert direct == chained
    assert direct["namespace"] == fields["namespace"]
    for stamp in stamps:
        assert stamp.endswith("Z")
        assert datetime.fromisoformat(stamp).utcoffset() is not None


def test_the_review_line_follows_the_level(tmp_path: Path) -> None:
    assert _lines_written(tmp_path, "warning", lambda log: log.info_line("admission", {})) == []


def test_the_review_line_reaches_a_stream_without_a_descriptor() -> None:
    stream = io.StringIO()
    logs.configure("info", stream)
    try:
        logs.get_logger("test").info_line("admission", {"uid": "u"})
    finally:
        logs.configure("info")
    (event,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (event["event"], event["uid"], event["component"]) == ("admission", "u", "test")
