"""JSON of any depth and any number size is read, with what the engine never reads left unread."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from webhook.loading import jsondoc
from webhook.loading.jsondoc import MAX_DEPTH, UNREAD_DEEP, UNREAD_NUMBER, cut_deep_values


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 25 or roll < 0.25:
        # Strings that look like brackets and escapes, to trip a scanner that ignores strings.
        return rng.choice([1, -2.5, None, True, "a[b", 'x"]{', "\\", "", '\\"[', "é"])
    if roll < 0.62:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["k", "[", '{"', "z]", "\\"]
    return {
        rng.choice(keys) + str(i): random_value(rng, depth + 1) for i in range(rng.randint(0, 3))
    }


def cut_by_hand(value: Any, depth: int, max_depth: int) -> Any:
    if isinstance(value, dict | list):
        if depth >= max_depth:
            return UNREAD_DEEP
        if isinstance(value, dict):
            return {k: cut_by_hand(v, depth + 1, max_depth) for k, v in value.items()}
        return [cut_by_hand(v, depth + 1, max_depth) for v in value]
    return value


def test_cutting_matches_a_cut_made_by_hand_on_thousands_of_documents() -> None:
    rng = random.Random(20261203)
    for _ in range(3000):
        value = random_value(rng)
        max_depth = rng.randint(0, 24)
        text = json.dumps(value, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        got = json.loads(cut_deep_values(text.encode(), max_depth))
        assert got == cut_by_hand(value, 0, max_depth), (text, max_depth)


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"f:x": value}
    return value


def test_a_document_deeper_than_the_decoder_goes_is_read_with_the_deep_part_unread() -> None:
    doc = {"metadata": {"name": "p", "managedFields": [{"fieldsV1": None}]}, "spec": {"a": [1, 2]}}
    text = json.dumps(doc).replace("null", json.dumps(nested(1)).replace("1", "X"))
    deep = "{" + '"f:x":{' * 10_000 + "}" * 10_000 + "}"
    body = text.replace('{"f:x": X}', deep)
    value = jsondoc.loads(body.encode())
    assert value["spec"] == {"a": [1, 2]}
    assert value["metadata"]["name"] == "p"
    chain = value["metadata"]["managedFields"][0]["fieldsV1"]
    for _ in range(MAX_DEPTH - 4):
        chain = chain["f:x"]
    assert UNREAD_DEEP in json.dumps(value)


def test_overlong_integers_are_left_unread() -> None:
    value = jsondoc.loads(b'{"a": ' + b"7" * 5000 + b', "b": -' + b"1" * 4300 + b', "c": "ok"}')
    assert value["a"] == UNREAD_NUMBER
    assert value["b"] == -int("1" * 4300)
    assert value["c"] == "ok"


@pytest.mark.parametrize(
    "text",
    [
        b"[" * 100_000,
        b"[" * 5000 + b"]" * 4999 + b"}",
        b'{"a": ' + b"[" * 3000 + b"1" + b"]" * 3000 + b",",
    ],
)
def test_broken_deep_documents_are_refused(text: bytes) -> None:
    with pytest.raises(ValueError, match="nested deeper than 200 levels"):
        jsondoc.loads(text)


def test_ordinary_documents_are_read_as_json_reads_them() -> None:
    text = '{"a": [1, 2.5, "\\ud800", null], "b": {"c": true}}'
    assert jsondoc.loads(text) == json.loads(text)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 1000, 1024])
def test_values_deeper_than_the_limit_are_cut_whichever_decoder_reads_them(depth: int) -> None:
    """orjson reads up to 1,024 levels; what it reads past ``MAX_DEPTH`` is cut all the same,
    so nothing downstream (``repr`` in a message, a copy) meets a value Python cannot walk."""
    text = b'{"kind": ' + b"[" * depth + b"]" * depth + b', "a": [1, {"b": 2}]}'
    value = jsondoc.loads(text)
    assert value["a"] == [1, {"b": 2}]
    node, levels = value["kind"], 1
    while isinstance(node, list):
        node, levels = node[0], levels + 1
    assert node == UNREAD_DEEP
    assert levels == MAX_DEPTH
    repr(value)  # no RecursionError


def test_many_shallow_containers_are_read_whole() -> None:
    text = json.dumps({"items": [{"a": [i]} for i in range(2000)]}).encode()
    assert jsondoc.loads(text) == json.loads(text)


@pytest.mark.parametrize(
    "body",
    [
        '{"a": 1}'.encode("utf-16"),
        '{"a": 1}'.encode("utf-32"),
        b'{"a": "\xed\xa0\x80"}',  # a surrogate written as UTF-8 bytes
        b'{"a": "\xff"}',
    ],
    ids=["utf-16", "utf-32", "surrogate-bytes", "invalid-byte"],
)
def test_bodies_that_are_not_utf8_are_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="not UTF-8"):
        jsondoc.loads(body)


def test_a_byte_order_mark_is_ignored_and_escaped_surrogates_are_read() -> None:
    assert jsondoc.loads(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    assert jsondoc.loads(b'{"a": "\\ud800"}') == {"a": "\ud800"}


@pytest.mark.parametrize("digits", [18, 19, 20, 21, 31, 60])
@pytest.mark.parametrize("sign", ["", "-"])
def test_integers_past_64_bits_stay_integers_as_pythons_decoder_reads_them(
    digits: int, sign: str
) -> None:
    number = f"{sign}{'9' * digits}"
    for text in (
        f'{{"spec": {{"terminationGracePeriodSeconds": {number}}}}}',
        f"[1, {number}, 2]",
        f'{{"a":{number}}}',
        f'{{"a": "a string", "b": [{number}]}}',
    ):
        for data in (text, text.encode()):
            value = jsondoc.loads(data)
            assert value == json.loads(text), text
            assert repr(value) == repr(json.loads(text)), text  # an int stays an int, not 1e+30


def test_a_run_of_digits_inside_a_string_reads_the_same() -> None:
    text = '{"metadata": {"annotations": {"at": "1700000000000000000000"}}, "n": 5}'
    assert jsondoc.loads(text.encode()) == json.loads(text)
