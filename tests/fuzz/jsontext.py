"""JSON text for fuzzing: documents of any depth, raw tokens and duplicate keys.

The fuzzer builds documents as Python values, plus two markers Python's ``json`` cannot
express: ``Raw`` (a token written as is, such as an integer of 5,000 digits) and ``DupKeys``
(an object that writes a key more than once). ``dumps`` writes such a document as compact
JSON, as the API server does, without recursion; ``parse`` reads a body independently of
the webhook's own reader, for the oracle.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

# Python refuses to convert longer digit strings (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = 4300


class Raw:
    """A JSON token written verbatim (a number too long for Python's ``int``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:20]}...{len(self.text)} chars)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Raw) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


class DupKeys:
    """A JSON object written with its keys in order, repeats included; the last one wins."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def dumps(doc: Any) -> str:
    """Compact JSON text of ``doc`` (ASCII, lone surrogates escaped).

    Python's encoder writes the document, with a placeholder string for each marker that is
    then replaced by the marker's text; only a document nested too deeply for the encoder is
    written piece by piece, which is much slower.
    """
    texts: dict[str, str] = {}

    def marker(value: Any) -> str:
        if isinstance(value, Raw):
            text = value.text
        elif isinstance(value, DupKeys):
            text = "{" + ",".join(json.dumps(k) + ":" + dumps(v) for k, v in value.pairs) + "}"
        else:
            raise TypeError(f"not JSON: {type(value).__name__}")
        token = f"\x00fuzz-marker-{len(texts)}\x00"
        texts[json.dumps(token)] = text
        return token

    try:
        out = json.dumps(doc, separators=(",", ":"), default=marker)
    except RecursionError:
        return "".join(_pieces(doc))
    for token, text in texts.items():
        out = out.replace(token, text, 1)
    return out


def nested_text(depth: int, leaf: str = "{}", key: str | None = "f:x") -> str:
    """JSON text of a value nested ``depth`` levels: objects under ``key``, or arrays."""
    if key is None:
        return "[" * depth + leaf + "]" * depth
    return ("{" + json.dumps(key) + ":") * depth + leaf + "}" * depth


def encode(doc: Any) -> bytes:
    return dumps(doc).encode("ascii")


class _Text:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _pieces(doc: Any) -> Iterator[str]:
    stack: list[Any] = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text | Raw):
            yield item.text
        elif isinstance(item, dict | DupKeys):
            entries = list(item.items()) if isinstance(item, dict) else list(item.pairs)
            stack.append(_Text("}"))
            for i in range(len(entries) - 1, -1, -1):
                key, value = entries[i]
                stack.append(value)
                stack.append(_Text(("," if i else "") + json.dumps(key) + ":"))
            stack.append(_Text("{"))
        elif isinstance(item, list):
            stack.append(_Text("]"))
            for i in range(len(item) - 1, -1, -1):
                stack.append(item[i])
                if i:
                    stack.append(_Text(","))
            stack.append(_Text("["))
        else:
            yield json.dumps(item)


def deep_copy(doc: Any) -> Any:
    """A copy of every container in ``doc`` (``DupKeys`` read as their last keys), without
    recursion."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(doc, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, DupKeys):
            item = dict(item.pairs)
        if isinstance(item, dict):
            copy = dict(item)
            parent[key] = copy
            stack.extend((v, copy, k) for k, v in item.items() if _container(v))
        elif isinstance(item, list):
            items = list(item)
            parent[key] = items
            stack.extend((v, items, i) for i, v in enumerate(item) if _container(v))
        else:
            parent[key] = item
    return root[0]


def _container(value: Any) -> bool:
    return isinstance(value, dict | list | DupKeys)


class NotJSON(ValueError):
    """The body is not JSON text (RFC 8259): ``str()`` says why."""


class TooDeep(ValueError):
    """The body is nested too deeply to read here without a document to compare with."""


def _int(text: str) -> int | Raw:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else Raw(text)


def _constant(name: str) -> Any:
    raise NotJSON(f"{name} is not JSON")


def parse(body: bytes) -> Any:
    """The JSON value in ``body``: UTF-8 (a byte order mark ignored), no NaN or Infinity, the last
    of duplicate keys kept, integers too long for Python kept as ``Raw``.

    Deep documents are read in a thread with a stack and a recursion limit large enough for
    the 10,000 levels the API server allows.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJSON(f"not UTF-8 (byte {exc.start})") from None
    # RFC 8259 section 8.1: a parser MAY ignore a byte order mark.
    text = text.removeprefix("\ufeff")
    try:
        return json.loads(text, parse_int=_int, parse_constant=_constant)
    except RecursionError:
        pass
    except NotJSON:
        raise
    except ValueError as exc:
        raise NotJSON(str(exc)) from None
    return _parse_deep(text)


_DEEP_LOCK = threading.Lock()


def _parse_deep(text: str) -> Any:

    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = json.loads(text, parse_int=_int, parse_constant=_constant)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            out["error"] = exc

    with _DEEP_LOCK:
        old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
        sys.setrecursionlimit(max(old_limit, 60_000))
        threading.stack_size(512 * 2**20)
        try:
            thread = threading.Thread(target=run, name="deep-json")
            thread.start()
            thread.join()
        finally:
            threading.stack_size(old_stack)
            sys.setrecursionlimit(old_limit)
    error = out.get("error")
    if isinstance(error, RecursionError):
        raise TooDeep("nested more deeply than this reader goes")
    if isinstance(error, NotJSON):
        raise error
    if isinstance(error, ValueError):
        raise NotJSON(str(error))
    if error is not None:
        raise error
    return out["value"]


def type_name(value: Any) -> str:
    """The JSON type of ``value``: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Raw):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
