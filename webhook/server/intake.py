"""Whether the bytes received on a connection hold a whole HTTP/1.1 request yet.

The server gathers a request's bytes as they arrive, a thread reading only what is there, and
hands them to gunicorn's parser once this says they are all in. gunicorn's parser reads until
it has what it needs, holding its thread while a client trickles bytes; gathered first, a
request costs a thread only for the bytes it sends, however slowly it sends them.

This is not a parser. It answers "wait" only where the request so far is well formed and
more bytes are due; wherever it cannot tell (a header it does not understand, a size out of
range, a framing gunicorn refuses) it answers "parse", and the parser decides, at once, on
the same bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# Longer than any request line and header block gunicorn accepts (its limits: a 4,094-byte
# line, 100 fields of 8,190 bytes): past this without the end of the headers, the parser
# refuses the request.
MAX_HEAD_BYTES = 1024 * 1024
# A chunk-size line longer than this is not one gunicorn reads.
_MAX_CHUNK_LINE = 1024


class Next(enum.Enum):
    PARSE = "parse"  # the parser has what it needs: a whole request, or one it will refuse
    WAIT = "wait"  # more bytes are due
    CONTINUE = "continue"  # more bytes are due once the client is told to send its body


@dataclass(frozen=True)
class _Head:
    end: int  # offset of the body
    length: int | None  # Content-Length
    chunked: bool
    expects_continue: bool


def next_step(data: bytes | bytearray, max_body: int) -> Next:
    """What to do with ``data``, the bytes of a connection from the start of a request.

    A body declared or sent larger than ``max_body`` goes to the parser as soon as that is
    known: the app refuses it without reading it.
    """
    head = _head(data)
    if head is None:
        return Next.PARSE if len(data) > MAX_HEAD_BYTES else Next.WAIT
    if isinstance(head, Next):
        return head
    if head.chunked:
        step = _chunked(data, head.end, max_body)
    elif head.length is None or head.length > max_body or len(data) - head.end >= head.length:
        step = Next.PARSE
    else:
        step = Next.WAIT
    if step is Next.WAIT and head.expects_continue:
        return Next.CONTINUE
    return step


def _head(data: bytes | bytearray) -> _Head | Next | None:
    """The framing of the request in ``data``; None while its headers are not all in."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if data.find(b"\n\n", 0, MAX_HEAD_BYTES if end == -1 else end) != -1:
        return Next.PARSE  # a bare LF ends a line: the parser's call
    if end == -1:
        return None
    lengths: list[bytes | bytearray] = []
    codings: list[bytes | bytearray] = []
    expects_continue = False
    for line in data[:end].split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            return Next.PARSE  # a line the parser refuses (or folds): let it say so
        name, value = name.lower(), value.strip(b" \t")
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            codings.append(value)
        elif name == b"expect":
            if value.lower() != b"100-continue":
                return Next.PARSE  # refused with a 417
            # An HTTP/1.0 client does not wait for the 100 (RFC 9110 section 10.1.1).
            expects_continue = data[: data.find(b"\r\n")].endswith(b" HTTP/1.1")
    if codings:
        if lengths or [c.lower() for c in codings] != [b"chunked"]:
            return Next.PARSE
        return _Head(end + 4, None, True, expects_continue)
    if len(lengths) > 1:
        return Next.PARSE
    length = _length(lengths[0]) if lengths else None
    if lengths and length is None:
        return Next.PARSE
    return _Head(end + 4, length, False, expects_continue)


def _length(value: bytes | bytearray) -> int | None:
    if not value.isdigit() or len(value) > 18:
        return None
    return int(value)


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _chunked(data: bytes | bytearray, at: int, max_body: int) -> Next:
    """Whether a chunked body from ``at`` is all in: its last chunk, and the empty line that
    ends its trailers."""
    size = 0
    while True:
        line_end = data.find(b"\r\n", at, at + _MAX_CHUNK_LINE)
        if line_end == -1:
            return Next.PARSE if len(data) - at > _MAX_CHUNK_LINE else Next.WAIT
        digits = data[at:line_end].split(b";", 1)[0].strip(b" \t")
        if not digits or len(digits) > 16 or not _HEX.issuperset(digits):
            return Next.PARSE
        chunk = int(digits, 16)
        at = line_end + 2
        if chunk == 0:
            return _trailers(data, at)
        size += chunk
        if size > max_body:
            return Next.PARSE
        at += chunk + 2
        if at > len(data):
            return Next.WAIT


def _trailers(data: bytes | bytearray, at: int) -> Next:
    if data.startswith(b"\r\n", at) or data.find(b"\r\n\r\n", at) != -1:
        return Next.PARSE
    return Next.PARSE if len(data) - at > MAX_HEAD_BYTES else Next.WAIT
