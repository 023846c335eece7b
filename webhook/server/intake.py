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
    REFUSE = "refuse"  # a request no client of a webhook sends, too costly to parse: see why()


# A chunked body in more pieces than this is refused before it is parsed: gunicorn's parser
# spends microseconds of Python on each chunk, so a 7 MiB body sent a byte per chunk would
# hold the interpreter for seconds. (The API server sends a review with a Content-Length.)
MAX_CHUNKS = 10_000


@dataclass(frozen=True)
class _Head:
    end: int  # offset of the body
    length: int | None  # Content-Length
    chunked: bool
    expects_continue: bool


class Gathering:
    """The bytes of one request as they arrive, and what they say so far.

    Each step reads only what arrived since the last one (the end of the headers is looked for
    from where the last search stopped, chunks from the last whole one), so a request sent in
    many small pieces costs time in proportion to its size, not to its size times its pieces.
    """

    def __init__(self, max_body: int) -> None:
        self.data = bytearray()
        self._max_body = max_body
        self._searched = 0  # the headers do not end before this offset
        self._head: _Head | Next | None = None
        self._chunk_at = 0  # offset of the next chunk-size line
        self._chunks = 0
        self._body = 0  # bytes of chunk data up to _chunk_at

    def __len__(self) -> int:
        return len(self.data)

    def add(self, piece: bytes) -> None:
        self.data += piece

    def step(self) -> Next:
        """What to do with the bytes so far.

        A body declared or sent larger than the limit goes to the parser as soon as that is
        known: the app refuses it without reading it.
        """
        if self._head is None:
            self._head = self._read_head()
            if self._head is None:
                return Next.PARSE if len(self.data) > MAX_HEAD_BYTES else Next.WAIT
        head = self._head
        if isinstance(head, Next):
            return head
        if head.chunked:
            step = self._chunked(head)
        elif head.length is None or head.length > self._max_body:
            step = Next.PARSE
        else:
            step = Next.PARSE if len(self.data) - head.end >= head.length else Next.WAIT
        if step is Next.WAIT and head.expects_continue:
            return Next.CONTINUE
        return step

    def why(self) -> str:
        """Why a request was refused (after ``step`` said REFUSE)."""
        return f"a chunked body in more than {MAX_CHUNKS} chunks is not read; send it whole"

    def _read_head(self) -> _Head | Next | None:
        """The framing of the request; None while its headers are not all in."""
        data, start = self.data, max(0, self._searched - 3)
        end = data.find(b"\r\n\r\n", start, MAX_HEAD_BYTES)
        bare = data.find(b"\n\n", start, MAX_HEAD_BYTES if end == -1 else end)
        self._searched = len(data)
        if bare != -1:
            return Next.PARSE  # a bare LF ends a line: the parser's call (it refuses it)
        if end == -1:
            return None
        self._chunk_at = end + 4
        return _head(data, end)

    def _chunked(self, head: _Head) -> Next:
        """Whether the chunked body is all in: its last chunk, and the empty line that ends
        its trailers."""
        data, at = self.data, self._chunk_at
        while True:
            line_end = data.find(b"\r\n", at, at + _MAX_CHUNK_LINE)
            if line_end == -1:
                return Next.PARSE if len(data) - at > _MAX_CHUNK_LINE else Next.WAIT
            digits = bytes(data[at:line_end]).split(b";", 1)[0].strip(b" \t")
            if not digits or len(digits) > 16 or not _HEX.issuperset(digits):
                return Next.PARSE
            chunk = int(digits, 16)
            if chunk == 0:
                return _trailers(data, line_end + 2)
            self._chunks += 1
            self._body += chunk
            if self._body > self._max_body:
                return Next.PARSE
            if self._chunks > MAX_CHUNKS:
                return Next.REFUSE
            if line_end + 2 + chunk + 2 > len(data):
                # Not all in: the next step reads this chunk's size line again.
                self._chunks -= 1
                self._body -= chunk
                return Next.WAIT
            at = self._chunk_at = line_end + 2 + chunk + 2


def _head(data: bytes | bytearray, end: int) -> _Head | Next:
    """The framing of the request whose headers end at ``end``."""
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


def _trailers(data: bytes | bytearray, at: int) -> Next:
    if data.startswith(b"\r\n", at) or data.find(b"\r\n\r\n", at) != -1:
        return Next.PARSE
    return Next.PARSE if len(data) - at > MAX_HEAD_BYTES else Next.WAIT
