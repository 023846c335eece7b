"""Seeded HTTP/1.1 framing cases for the server's worker: reviews cut into pieces, pipelined,
chunked, stalled, half-closed, with their framing broken in the ways clients break it.

Each case is a list of pieces to send on one TLS connection, whether the client then closes
its sending side, and what the server must do: answer every whole review with a 200, and
answer or close the connection within the request deadline whatever it was sent.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

REVIEW = (
    Path(__file__).resolve().parents[1] / "fixtures/admission-reviews/create-pod-sweep-mutate.json"
)


@dataclass(frozen=True)
class FramingCase:
    number: int
    mutation: str
    pieces: tuple[bytes, ...]
    half_close: bool
    # Whole, well-formed reviews in the bytes sent: each must be answered with a 200, in order.
    whole_reviews: int


def _request(body: bytes, *, chunked: bool, rng: random.Random, extra: bytes = b"") -> bytes:
    head = (
        b"POST /mutate?timeout=3s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    )
    if chunked:
        sizes, at, wire = [], 0, b""
        while at < len(body):
            sizes.append(rng.choice([1, 9, 300, 4096, 20_000]))
            wire += b"%x\r\n%s\r\n" % (len(body[at : at + sizes[-1]]), body[at : at + sizes[-1]])
            at += sizes[-1]
        return head + b"Transfer-Encoding: chunked\r\n" + extra + b"\r\n" + wire + b"0\r\n\r\n"
    return head + b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


def _cut(wire: bytes, rng: random.Random) -> tuple[bytes, ...]:
    pieces, at = [], 0
    while at < len(wire):
        size = rng.choice([1, 5, 64, 700, 3000, 16_384, 70_000])
        pieces.append(wire[at : at + size])
        at += size
    return tuple(pieces)


def framing_case(seed: int, number: int) -> FramingCase:
    """Case ``number`` of the campaign ``seed``: the same bytes every time."""
    rng = random.Random(f"{seed}:{number}")
    body = json.dumps(json.loads(REVIEW.read_text())).encode()
    chunked = rng.random() < 0.3
    whole = _request(body, chunked=chunked, rng=rng)
    mutation = rng.choice(
        [
            "whole",
            "pipelined",
            "stalled",
            "half-closed",
            "content-length-short",
            "content-length-long",
            "two-content-lengths",
            "bad-chunk-size",
            "bare-lf",
            "flipped-byte",
            "long-header",
            "expect-continue-whole",
        ]
    )
    wire, half_close, reviews = whole, False, 1
    if mutation == "pipelined":
        wire, reviews = whole + _request(body, chunked=not chunked, rng=rng), 2
    elif mutation == "stalled":
        wire, reviews = whole[: rng.randrange(1, len(whole))], 0
    elif mutation == "half-closed":
        wire, half_close, reviews = whole[: rng.randrange(1, len(whole))], True, 0
    elif mutation == "content-length-short":
        wire = _request(body, chunked=False, rng=rng).replace(
            b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) // 2)
        )
        reviews = 0
    elif mutation == "content-length-long":
        wire = _request(body, chunked=False, rng=rng).replace(
            b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 100)
        )
        reviews = 0
    elif mutation == "two-content-lengths":
        wire, reviews = _request(body, chunked=False, rng=rng, extra=b"Content-Length: 7\r\n"), 0
    elif mutation == "bad-chunk-size":
        wire = _request(body, chunked=True, rng=rng)
        at = wire.index(b"\r\n\r\n") + 4
        wire, reviews = wire[:at] + b"zz" + wire[at:], 0
    elif mutation == "bare-lf":
        wire, reviews = whole.replace(b"\r\n", b"\n", rng.randrange(1, 4)), 0
    elif mutation == "flipped-byte":
        at = rng.randrange(len(whole))
        wire, reviews = (
            whole[:at] + bytes([whole[at] ^ (1 << rng.randrange(8))]) + whole[at + 1 :],
            0,
        )
    elif mutation == "long-header":
        wire = _request(body, chunked=chunked, rng=rng, extra=b"X-Long: " + b"a" * 20_000 + b"\r\n")
        reviews = 0
    elif mutation == "expect-continue-whole":
        wire = _request(body, chunked=chunked, rng=rng, extra=b"Expect: 100-continue\r\n")
    return FramingCase(number, mutation, _cut(wire, rng), half_close, reviews)
