"""``intake.Gathering``: a whole request goes to the parser, a request still coming in waits.

Requests are generated (seeded) in the shapes HTTP/1.1 allows: Content-Length or chunked
bodies cut into random chunks, with extensions and trailers, header names in any case,
Expect: 100-continue. gunicorn's own parser reads each generated request, so a generator bug
cannot make the two agree by accident.
"""

from __future__ import annotations

import io
import random

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from webhook.server.intake import MAX_CHUNKS, MAX_HEAD_BYTES, Gathering, Next

LIMIT = 7 * 1024 * 1024


def next_step(data: bytes, max_body: int) -> Next:
    """What a fresh look at ``data``, the bytes of a request so far, says to do."""
    gathering = Gathering(max_body)
    gathering.add(data)
    return gathering.step()


def _case(rng: random.Random, name: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in name)


def request(rng: random.Random) -> tuple[bytes, bytes]:
    """A well-formed request and its body."""
    body = rng.randbytes(rng.choice([0, 1, 17, 700, 5000, 70_000]))
    headers = [("Host", "127.0.0.1"), ("Content-Type", "application/json")]
    headers += [(f"X-Extra-{i}", "v" * rng.randrange(40)) for i in range(rng.randrange(4))]
    if rng.random() < 0.3:
        headers.append(("Expect", "100-continue"))
    chunked = rng.random() < 0.4
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
        wire = _chunked(rng, body)
    else:
        if body or rng.random() < 0.5:
            headers.append(("Content-Length", str(len(body))))
        wire = body
    rng.shuffle(headers)
    head = "POST /mutate?timeout=3s HTTP/1.1\r\n"
    head += "".join(f"{_case(rng, k)}:{rng.choice(['', ' '])}{v}\r\n" for k, v in headers)
    return head.encode() + b"\r\n" + wire, body


def _chunked(rng: random.Random, body: bytes) -> bytes:
    out, at = b"", 0
    while at < len(body):
        size = rng.randint(1, max(1, len(body) - at))
        ext = b";name=value" if rng.random() < 0.2 else b""
        out += b"%x%s\r\n%s\r\n" % (size, ext, body[at : at + size])
        at += size
    trailers = b"X-Trailer: t\r\n" if rng.random() < 0.3 else b""
    return out + b"0\r\n" + trailers + b"\r\n"


def parsed_body(wire: bytes) -> bytes:
    """The body gunicorn's parser reads from ``wire``, which it must find whole."""
    parser = RequestParser(Config(), io.BytesIO(wire), ("127.0.0.1", 1))
    req = next(parser)
    data: bytes = req.body.read()
    return data


@pytest.mark.parametrize("seed", range(6))
def test_a_whole_request_is_parsed_and_every_part_of_one_waits(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        wire, body = request(rng)
        assert parsed_body(wire) == body
        assert next_step(wire, LIMIT) is Next.PARSE, wire[:300]
        # Followed by the start of the next request (pipelined), still whole.
        assert next_step(wire + b"POST /mut", LIMIT) is Next.PARSE
        continues = b"expect:" in wire[: wire.find(b"\r\n\r\n")].lower()
        head_end = wire.find(b"\r\n\r\n") + 4
        cuts = {rng.randrange(len(wire)) for _ in range(40)} | {0, head_end - 1, len(wire) - 1}
        for cut in sorted(cuts):
            step = next_step(wire[:cut], LIMIT)
            if continues and cut >= head_end:
                assert step is Next.CONTINUE, (cut, wire[:300])
            else:
                assert step is Next.WAIT, (cut, wire[:300])


@pytest.mark.parametrize(
    "head",
    [
        # Framings gunicorn refuses at once: the parser says why, nothing waits.
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.1\r\n folded\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.1\nContent-Length: 5\n\n",
        # A body larger than the limit: the app refuses it unread.
        b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (LIMIT + 1),
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (LIMIT + 1),
        # A chunk size that is not hexadecimal.
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_what_the_parser_refuses_goes_to_it_at_once(head: bytes) -> None:
    assert next_step(head, LIMIT) is Next.PARSE


def test_headers_that_never_end_go_to_the_parser_past_its_limits() -> None:
    start = b"POST / HTTP/1.1\r\n" + b"X-A: b\r\n" * 10
    assert next_step(start, LIMIT) is Next.WAIT
    assert next_step(start + b"X" * MAX_HEAD_BYTES, LIMIT) is Next.PARSE


def test_an_http_1_0_client_is_not_told_to_continue() -> None:
    """It sends its body without waiting for the 100 (RFC 9110 section 10.1.1)."""
    head = b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
    assert next_step(head, LIMIT) is Next.WAIT
    assert next_step(head.replace(b"1.0", b"1.1"), LIMIT) is Next.CONTINUE


@pytest.mark.parametrize("seed", range(3))
def test_any_bytes_get_an_answer(seed: int) -> None:
    """Mutated requests: no exception, whatever the bytes."""
    rng = random.Random(seed)
    for _ in range(300):
        wire = bytearray(request(rng)[0][:6000])
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(len(wire))
            wire[at : at + rng.randrange(4)] = rng.choice(
                [b"", b"\r\n", b"\n", b":", b";", b"0", b"f" * 20, rng.randbytes(3)]
            )
        assert next_step(bytes(wire), LIMIT) in set(Next)


@pytest.mark.parametrize("seed", range(4))
def test_gathering_piece_by_piece_says_what_the_whole_prefix_says(seed: int) -> None:
    """Each step reads only what arrived since the last; its answers are those of a fresh
    look at all the bytes so far."""
    rng = random.Random(100 + seed)
    for _ in range(40):
        wire = request(rng)[0] * rng.choice([1, 2])
        gathering, at = Gathering(LIMIT), 0
        while at < len(wire):
            size = rng.choice([1, 3, 50, 700, 9000])
            gathering.add(wire[at : at + size])
            at += size
            assert gathering.step() is next_step(wire[:at], LIMIT), (at, wire[:200])


def test_a_body_in_too_many_chunks_is_refused_saying_why() -> None:
    head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"1\r\nx\r\n" * MAX_CHUNKS
    assert next_step(head + body + b"0\r\n\r\n", LIMIT) is Next.PARSE
    gathering = Gathering(LIMIT)
    gathering.add(head + body + b"1\r\nx\r\n")
    assert gathering.step() is Next.REFUSE
    assert gathering.why() == (
        f"a chunked body in more than {MAX_CHUNKS} chunks is not read; send it whole"
    )
