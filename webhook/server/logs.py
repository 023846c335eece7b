"""Structured JSON logs: one line per event, the server's own and granian's alike."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from typing import Any, TextIO

import orjson
import structlog

LEVELS = ("debug", "info", "warning", "error")


# Tracebacks as JSON fields, without the frames' local variables: those hold the request
# (pod fields, user names) uncut, where every other logged value is cut short.
_TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


def _shared_processors() -> list[structlog.types.Processor]:
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """Send structlog events to ``stream`` (stdout) as JSON lines, at ``level`` and above."""
    global _generation, _lines
    _generation += 1
    least = _level_number(level)
    factory, line_logger = _logger_factory(stream or sys.stdout)
    _lines = line_logger if least <= logging.INFO else None
    structlog.configure(
        processors=[
            *_shared_processors(),
            # A traceback becomes a JSON field: the event stays one line.
            _TRACEBACKS,
            structlog.processors.JSONRenderer(serializer=_json_line),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(least),
        logger_factory=factory,
        # Not cached by structlog: reconfiguring (tests, a level change) must reach loggers
        # made at import; Logger binds once per configuration instead.
        cache_logger_on_first_use=False,
    )


def _logger_factory(stream: TextIO) -> tuple[Any, _LineLogger | None]:
    """Lines written to ``stream``'s file descriptor one ``write`` call each, when it has one.

    structlog's own logger holds a lock across the write and the flush, so the threads of a
    worker queue behind whichever one is in the write system call; a line written in one call
    needs no lock (the kernel does not interleave one write on a file with another, which is
    also what keeps the worker processes, sharing stdout, from mixing lines; on a pipe, that
    holds for lines up to PIPE_BUF, 4 KiB, which only a long traceback passes). A stream
    without a descriptor (a test's StringIO) gets structlog's logger.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return structlog.WriteLoggerFactory(stream), None
    stream.flush()
    logger = _LineLogger(fd)
    return (lambda *args: logger), logger


class _LineLogger:
    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def msg(self, message: str) -> None:
        self.write((message + "\n").encode("utf-8", "backslashreplace"))

    def write(self, data: bytes) -> None:
        while data:
            data = data[os.write(self._fd, data) :]

    debug = info = warning = error = critical = exception = msg


def stdlib_config(level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` that renders stdlib records (granian's) as the same JSON."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "()": structlog.stdlib.ProcessorFormatter,
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    _TRACEBACKS,
                    structlog.processors.JSONRenderer(sort_keys=False),
                ],
                "foreign_pre_chain": [*_shared_processors(), _component],
            }
        },
        "handlers": {
            "stdout": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stdout",
            }
        },
        "root": {"handlers": ["stdout"], "level": level.upper()},
        "loggers": {
            "_granian": {"handlers": ["stdout"], "level": level.upper(), "propagate": False},
            "granian.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
        },
    }


# Counts calls of ``configure``: a logger binds itself again after each (see Logger).
_generation = 0
# Where ``Logger.info_line`` writes its lines itself: the configured descriptor, while info
# lines are wanted and the output has one; otherwise structlog writes them.
_lines: _LineLogger | None = None


def get_logger(name: str) -> Logger:
    """A structlog logger tagged with ``component=name``; configured on first use, not on import."""
    return Logger(name)


class Logger:
    """A structlog logger bound once per configuration.

    structlog's own lazy proxy binds a new logger on every call unless told to cache it for
    good, which would keep loggers made at import on the first configuration (tests and a
    level change reconfigure). Binding costs more than writing the line, and the server
    writes one per review, so this proxy binds again only after ``configure``.
    """

    __slots__ = ("_bound", "_generation", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._generation = -1
        self._bound: Any = None

    def __getattr__(self, method: str) -> Any:
        if self._generation != _generation:
            self._bound = structlog.get_logger(component=self._name).bind()
            self._generation = _generation
        return getattr(self._bound, method)

    def info_line(self, event: str, fields: dict[str, Any]) -> None:
        """``info(event, **fields)``, written as the configured processors write it, for an
        event logged once per review: rendered here in one step instead of passing through
        structlog's chain, which costs several times more on a server whose caches the
        network and TLS work keep cold. ``fields`` must not hold ``event``, ``level``,
        ``timestamp`` or ``component``; it is changed."""
        lines = _lines
        if lines is None:
            self.info(event, **fields)
            return
        fields["event"] = event
        fields["level"] = "info"
        fields["timestamp"] = _utc_now()
        lines.write(_json_bytes({"component": self._name, **fields}, repr, newline=True))


def _utc_now() -> str:
    # As structlog's TimeStamper(fmt="iso", utc=True) writes it.
    return datetime.datetime.now(tz=datetime.UTC).isoformat().replace("+00:00", "Z")


def _component(
    logger: logging.Logger, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    record = event.get("_record")
    if isinstance(record, logging.LogRecord):
        event["component"] = record.name
    return event


def _json_line(event: Any, **options: Any) -> str:
    """structlog's serializer: one log line of JSON (see ``_json_bytes``)."""
    return _json_bytes(event, options.get("default")).decode()


def _json_bytes(event: Any, default: Any, *, newline: bool = False) -> bytes:
    """One log line of JSON: orjson, or the standard encoder for what orjson refuses (lone
    surrogates in a value read from a request), which escapes it."""
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_APPEND_NEWLINE * newline)
    except TypeError:
        return (json.dumps(event, default=default) + "\n" * newline).encode()


def _level_number(level: str) -> int:
    if level.lower() not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    return int(logging.getLevelName(level.upper()))
