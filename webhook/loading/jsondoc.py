"""JSON documents of any depth and any number size, read without recursion limits or tracebacks.

Python's decoder recurses in C and gives up about 1,000 levels down, and refuses integers of
more than 4,300 digits; the API server accepts 10,000 levels (in ``metadata.managedFields``
or a custom resource's free-form fields) and keeps such numbers where a field is free-form.
The engine reads no field that deep or that large. So a document the decoder refuses is read
again with those values left unread: each value nested deeper than ``MAX_DEPTH`` becomes the
string ``UNREAD_DEEP``, each overlong integer the string ``UNREAD_NUMBER``. Everything the
engine reads is as it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson

from webhook.engine.unread import MAX_DEPTH, MAX_INT_DIGITS, UNREAD, UNREAD_DEEP, UNREAD_NUMBER

__all__ = [
    "MAX_DEPTH",
    "UNREAD",
    "UNREAD_DEEP",
    "UNREAD_NUMBER",
    "containers",
    "cut_deep_values",
    "dumps",
    "dumps_indented",
    "loads",
]

PairsHook = Callable[[list[tuple[str, Any]]], Any]


def _scanner(nesting: int) -> re.Pattern[bytes]:
    """A pattern that skips strings, anything but brackets, and whole containers nested up to
    ``nesting`` levels, then captures the next bracket.

    The regex engine does the skipping in C, so the loop below turns once per bracket it
    captures: a body made of small containers costs a handful of turns, not one per bracket.
    Atomic groups and possessive repeats keep the engine from backtracking.
    """
    string = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
    level = rb"(?>" + string + rb'|[^"\[\]{}])'
    for _ in range(nesting):
        # Either bracket opens and either closes: the pattern stays linear in ``nesting``
        # (one copy of the level below, not two). The decoder checks the kinds wherever it
        # reads; only within a value too deep to read does a mismatch go unnoticed.
        container = rb"[\[{]" + level + rb"*+[\]}]"
        level = rb"(?>" + string + rb'|[^"\[\]{}]|' + container + rb")"
    return re.compile(level + rb"*+([\[\]{}])")


# Containers skipped whole by the fast scanner; it runs only where skipping that deep cannot
# pass the depth at which values are cut.
_SKIPPED_NESTING = 16
_FAST = _scanner(_SKIPPED_NESTING)
_EXACT = _scanner(0)


def loads(
    data: bytes | str,
    *,
    object_pairs_hook: PairsHook | None = None,
    parse_float: Callable[[str], Any] | None = None,
) -> Any:
    """The JSON value in ``data``; raises ``ValueError`` for text that is not JSON (bytes
    that are not UTF-8 included: RFC 8259 section 8.1).

    orjson reads it when it can, several times faster; what it refuses (lone surrogates, NaN),
    what it reads deeper than ``MAX_DEPTH`` and what holds an integer it would read as a float
    are read again as above.
    Decoding a large document makes many containers; see ``gcpause.paused`` for keeping the
    garbage collector from walking them again and again.
    """
    if object_pairs_hook is None and parse_float is None and not _long_integer(data):
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
        else:
            if containers(data) > MAX_DEPTH:
                _cut_deep_containers(value, MAX_DEPTH)
            return value
    return _loads(data, object_pairs_hook, parse_float)


# orjson reads an integer beyond 64 bits as a float (10**30 as 1e+30) where Python's decoder
# keeps it whole: a field's type would then depend on which read it. Such a number has 19
# digits or more, so a document with a run of 19 digits goes to the exact decoder (a string
# holding one only costs that document the slower read). With every digit turned into 0 the
# run is one substring search: a few microseconds for a review, where a regular expression
# takes ten times as long.
_LONG_RUN = 19
_DIGITS_AS_ZERO = bytes(ord("0") if chr(i) in "0123456789" else i for i in range(256))
_DIGITS_AS_ZERO_TEXT = str.maketrans(dict.fromkeys("123456789", "0"))


def _long_integer(data: bytes | str) -> bool:
    if isinstance(data, str):
        return "0" * _LONG_RUN in data.translate(_DIGITS_AS_ZERO_TEXT)
    return b"0" * _LONG_RUN in data.translate(_DIGITS_AS_ZERO)


def containers(data: bytes | str) -> int:
    """How many containers ``data`` opens at most (brackets in strings count too): no deeper
    nesting is possible. Counting is far cheaper than walking, and an ordinary review opens a
    few dozen."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def _cut_deep_containers(value: Any, limit: int) -> None:
    """Replace, in ``value``, every container nested deeper than ``limit`` by ``UNREAD_DEEP``,
    as ``cut_deep_values`` does in the text: one walk over what orjson made (no recursion),
    where cutting the text would scan it bracket by bracket and parse it again."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        deep = []
        for key, child in items:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    deep.append(key)
                else:
                    stack.append((child, depth + 1))
        for key in deep:
            node[key] = UNREAD_DEEP


def dumps_indented(value: Any) -> str:
    """JSON of ``value`` indented by two spaces, as ``json.dumps(value, indent=2)`` writes it
    (non-ASCII characters as they are)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return json.dumps(value, indent=2)


def dumps(value: Any) -> bytes:
    """Compact JSON of ``value`` (orjson; the standard encoder, escaping, for the strings
    orjson refuses: lone surrogates read from a request)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _loads(
    data: bytes | str, object_pairs_hook: PairsHook | None, parse_float: Callable[[str], Any] | None
) -> Any:
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")  # strict: no UTF-16, no surrogates written as bytes
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    else:
        text = data
    deep = containers(text) > MAX_DEPTH
    try:
        value = json.loads(
            text,
            parse_int=_bounded_int,
            parse_float=parse_float,
            object_pairs_hook=object_pairs_hook,
        )
    except RecursionError:
        pass  # nested deeper than the decoder goes: cut in the text, then read
    else:
        if deep:
            _cut_deep_containers(value, MAX_DEPTH)
        return value
    raw = text.encode("utf-8", "surrogatepass")
    try:
        return json.loads(
            cut_deep_values(raw),
            parse_int=_bounded_int,
            parse_float=parse_float,
            object_pairs_hook=object_pairs_hook,
        )
    except json.JSONDecodeError as exc:
        # Positions in the shortened text mean nothing in the original.
        raise ValueError(
            f"{exc.msg} (in a document nested deeper than {MAX_DEPTH} levels)"
        ) from None


def _bounded_int(text: str) -> int | str:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else UNREAD_NUMBER


def cut_deep_values(data: bytes, max_depth: int = MAX_DEPTH) -> bytes:
    """``data`` with every value nested deeper than ``max_depth`` replaced by ``UNREAD_DEEP``.

    Brackets inside strings do not count. Text that is not JSON stays not JSON: the decoder
    that reads the result reports it.
    """
    marker = json.dumps(UNREAD_DEEP).encode()
    pieces: list[bytes] = []
    depth, cut_from, kept_until, pos = 0, -1, 0, 0
    while True:
        scanner = _FAST if depth + _SKIPPED_NESTING <= max_depth else _EXACT
        match = scanner.match(data, pos)
        if match is None:
            break
        at = match.start(1)
        pos = at + 1
        if data[at] in b"[{":
            depth += 1
            if depth == max_depth + 1:
                cut_from = at
        else:
            if depth == max_depth + 1 and cut_from >= 0:
                pieces += [data[kept_until:cut_from], marker]
                kept_until, cut_from = at + 1, -1
            depth -= 1
    if cut_from >= 0:  # unbalanced: leave the rest for the decoder to refuse
        pieces += [data[kept_until:cut_from], marker]
        kept_until = len(data)
    pieces.append(data[kept_until:])
    return b"".join(pieces)
