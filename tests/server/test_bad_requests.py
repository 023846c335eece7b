"""Malformed requests get HTTP 400 with one line saying why, from the running server."""

from __future__ import annotations

import copy
import gzip
import json
import re
import socket
import ssl
from typing import Any

import pytest

from tests.server.helpers import ServerProcess, client_context, fixture, wait_for

pytestmark = pytest.mark.slow

POD = fixture("create-pod-sweep-mutate")
LIMIT = 7 * 1024 * 1024


def without(path: tuple[str, ...]) -> dict[str, Any]:
    review = copy.deepcopy(POD)
    node = review
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return review


def replaced(path: tuple[str, ...], value: object) -> dict[str, Any]:
    review = copy.deepcopy(POD)
    node = review
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return review


CASES: list[tuple[str, bytes | dict[str, Any], str, str]] = [
    ("wrong content type", b"{}", "text/plain", "content type must be application/json"),
    ("not JSON", b"{not json", "application/json", "body is not JSON"),
    ("empty body", b"", "application/json", "body is empty: send an AdmissionReview as JSON"),
    (
        "JSON array",
        b"[1, 2]",
        "application/json",
        "not an AdmissionReview: the body is a JSON array",
    ),
    ("deep and unterminated", b"[" * 100_000, "application/json", "body is not JSON"),
    (
        "deep but not a review",
        b"[" * 10_000 + b"]" * 10_000,
        "application/json",
        "not an AdmissionReview: the body is a JSON array",
    ),
    ("wrong kind", replaced(("kind",), "Pod"), "application/json", "not an AdmissionReview"),
    (
        "wrong apiVersion",
        replaced(("apiVersion",), "v1"),
        "application/json",
        "expected admission.k8s.io/v1 AdmissionReview",
    ),
    ("no request", without(("request",)), "application/json", "has no request"),
    ("no uid", without(("request", "uid")), "application/json", "request.uid is missing"),
    ("empty uid", replaced(("request", "uid"), ""), "application/json", "request.uid is missing"),
]


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
@pytest.mark.parametrize("hook", ["mutate", "validate"])
def test_bad_request_gets_400_with_one_line(
    server: ServerProcess, hook: str, body: bytes | dict[str, Any], content_type: str, reason: str
) -> None:
    client = server.client()
    reply = client.post(f"/{hook}", body, content_type)
    # The same connection keeps serving: a bad request costs nothing else.
    healthy = client.get("/healthz")
    client.close()
    assert reply.status == 400
    assert reply.headers["content-type"].startswith("text/plain")
    text = reply.body.decode()
    assert reason in text
    assert text.endswith("\n")
    assert text.count("\n") == 1
    assert "Traceback" not in text
    assert healthy.status == 200


# Reviews whose uid can be echoed but whose request cannot be read: refused with HTTP 200, since
# the API server takes an HTTP error for no answer and applies the failurePolicy.
UNREADABLE: list[tuple[str, dict[str, Any], str]] = [
    ("no object", without(("request", "object")), "request.object is missing"),
    ("null object", replaced(("request", "object"), None), "request.object is missing"),
    (
        "object not a mapping",
        replaced(("request", "object"), [1]),
        "request.object is a JSON array, not an object",
    ),
    (
        "unknown operation",
        replaced(("request", "operation"), "create"),
        "request.operation 'create' is not one of",
    ),
    (
        "dryRun not a boolean",
        replaced(("request", "dryRun"), "true"),
        "request.dryRun is a JSON string, not a boolean",
    ),
    (
        "namespace a number",
        replaced(("request", "namespace"), 7),
        "request.namespace is a JSON number, not a string",
    ),
    (
        "a username as the parser writes an unreadable value",
        replaced(
            ("request", "userInfo", "username"), "<not read: a number of more than 4300 digits>"
        ),
        "request.userInfo.username is a number of more than 4300 digits, not a string",
    ),
]


@pytest.mark.parametrize(
    ("body", "reason"), [case[1:] for case in UNREADABLE], ids=[case[0] for case in UNREADABLE]
)
@pytest.mark.parametrize("hook", ["mutate", "validate"])
def test_a_review_that_cannot_be_read_is_refused_echoing_its_uid(
    server: ServerProcess, hook: str, body: dict[str, Any], reason: str
) -> None:
    client = server.client()
    reply = client.post(f"/{hook}", body, "application/json")
    healthy = client.get("/healthz")
    client.close()
    assert reply.status == 200
    answer = reply.json()
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = answer["response"]
    assert response["uid"] == POD["request"]["uid"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert response["status"]["message"].startswith("preemptguard cannot read this review: ")
    assert reason in response["status"]["message"]
    assert healthy.status == 200


def test_a_numeric_uid_is_named_as_such(server: ServerProcess) -> None:
    client = server.client()
    reply = client.post("/mutate", replaced(("request", "uid"), 12), "application/json")
    client.close()
    assert reply.status == 400
    assert reply.body == b"request.uid is a JSON number, not a string\n"


def test_body_over_the_limit_is_refused_before_it_is_read(server: ServerProcess) -> None:
    client = server.client()
    client.conn.putrequest("POST", "/mutate")
    client.conn.putheader("Content-Type", "application/json")
    client.conn.putheader("Content-Length", str(LIMIT + 1))
    client.conn.endheaders(b"{")
    resp = client.conn.getresponse()
    body = resp.read()
    client.close()
    assert resp.status == 400
    assert body == b"body of 7340033 bytes is over the 7 MiB limit\n"


def test_chunked_body_over_the_limit(server: ServerProcess) -> None:
    chunks = (b" " * 1024 * 1024 for _ in range(8))
    client = server.client()
    client.conn.request(
        "POST", "/validate", chunks, {"Content-Type": "application/json"}, encode_chunked=True
    )
    resp = client.conn.getresponse()
    body = resp.read()
    client.close()
    assert resp.status == 400
    assert body == b"body is over the 7 MiB limit\n"


def test_bad_requests_are_counted_and_logged(server: ServerProcess) -> None:
    before = server.metric('preemptguard_bad_requests_total{hook="validate"}')
    client = server.client()
    assert client.post("/validate", b"nope").status == 400
    client.close()
    after = server.metric('preemptguard_bad_requests_total{hook="validate"}')
    assert after == before + 1
    reasons = [r["reason"] for r in server.log_events("bad_request")]
    assert any(r.startswith("body is not JSON") for r in reasons)


def raw_exchange(server: ServerProcess, request: bytes, *, half_close: bool = False) -> bytes:
    """Send ``request`` as it is over TLS; what the server sends until it closes."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    conn = client_context(server.ca).wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(request)
    if half_close:
        # TCP FIN under the TLS session, which stays usable for reading the answer.
        socket.socket.shutdown(conn, socket.SHUT_WR)
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except (ssl.SSLError, ConnectionResetError):
        pass
    conn.close()
    return data


def test_bad_chunk_is_a_400_saying_the_body_could_not_be_read(server: ServerProcess) -> None:
    answer = raw_exchange(
        server,
        b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\nZZ\r\n',
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert body.startswith(b"body could not be read: "), answer
    assert b"chunked framing is broken" in body, answer
    assert body.count(b"\n") == 1
    assert "Traceback" not in server.logs()
    assert not [r for r in server.log_events("request_failed") if r["level"] == "error"]


def test_body_shorter_than_its_content_length(server: ServerProcess) -> None:
    # The client ends its side of the connection mid-body. TLS cannot carry an answer back
    # after that, so the reason is checked where it is kept: the log.
    raw_exchange(
        server,
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"apiVersion"',
        half_close=True,
    )
    expected = "body could not be read: the connection ended before the end of the body"
    wait_for(
        lambda: any(r["reason"].startswith(expected) for r in server.log_events("bad_request"))
    )


HUGE = "x" * 5_000_000
# A reason names what is wrong; echoing a value only needs its start.
ECHO_LIMIT = 400


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (replaced(("apiVersion",), HUGE), "not an AdmissionReview: apiVersion 'xxx"),
        (replaced(("kind",), HUGE), "kind 'xxx"),
        (replaced(("request", "operation"), HUGE), "request.operation 'xxx"),
        (replaced(("request", "operation"), {"op": [HUGE]}), "request.operation {'op': ['xxx"),
    ],
    ids=["apiVersion", "kind", "operation", "operation object"],
)
def test_reasons_cut_echoed_values(
    server: ServerProcess, body: dict[str, Any], reason: str
) -> None:
    client = server.client()
    reply = client.post("/mutate", body)
    client.close()
    if reply.status == 200:  # a review refused: the reason is its message
        message = reply.json()["response"]["status"]["message"]
        text = message.removeprefix("preemptguard cannot read this review: ") + "\n"
    else:
        assert reply.status == 400
        text = reply.body.decode()
    assert reason in text, text[:200]
    assert "…" in text
    assert len(text) < ECHO_LIMIT, text[:200]
    logged = server.log_events("bad_request")[-1]["reason"]
    assert logged == text.rstrip("\n")


def test_log_fields_cut_request_values(server: ServerProcess) -> None:
    review = replaced(("request", "userInfo", "username"), HUGE)
    review["request"]["uid"] = "u" * 1_000_000
    client = server.client()
    reply = client.post("/mutate", review)
    client.close()
    # The answer echoes the uid whole: the API server matches it.
    assert reply.status == 200
    assert reply.response["uid"] == review["request"]["uid"]
    record = next(r for r in server.log_events("admission") if r["uid"].startswith("uuuuuuuuuu"))
    for field in ("uid", "user"):
        assert record[field].endswith("…"), record[field][:200]
        assert len(record[field]) < ECHO_LIMIT, record[field][:200]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/mutate", 405), ("POST", "/nowhere", 404), ("PUT", "/validate", 405)],
)
def test_wrong_route_or_method(server: ServerProcess, method: str, path: str, status: int) -> None:
    client = server.client()
    client.conn.request(method, path, b"{}", {"Content-Type": "application/json"})
    resp = client.conn.getresponse()
    body = resp.read()
    client.close()
    assert resp.status == status
    assert body.count(b"\n") == 1


def _post(body: bytes) -> bytes:
    head = (
        "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def test_a_bad_request_read_to_its_end_leaves_the_connection_serving(
    server: ServerProcess,
) -> None:
    """Pipelined: a review, a body that is not JSON, a review; the last one is answered too,
    then the connection closes when the client is done (``Connection: close``)."""
    good = json.dumps(POD).encode()
    last = _post(good).replace(b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nConnection: close\r\n")
    answer = raw_exchange(server, _post(good) + _post(b"{not json") + last)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert statuses == [b"200", b"400", b"200"], answer[:500]
    assert answer.count(b'"allowed":true') == 2


def test_a_compressed_body_is_refused_saying_so(server: ServerProcess) -> None:
    body = gzip.compress(json.dumps(POD).encode())
    client = server.client()
    client.conn.request(
        "POST",
        "/mutate",
        body,
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    resp = client.conn.getresponse()
    text = resp.read()
    client.close()
    assert resp.status == 400
    assert text == (
        b"Content-Encoding 'gzip' is not read here: send the review uncompressed, "
        b"as the API server does\n"
    )
