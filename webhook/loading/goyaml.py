"""YAML scalars read as kubectl reads them, so that ``check`` judges what the API server gets.

kubectl turns YAML into JSON with sigs.k8s.io/yaml, which reads it with go-yaml v2, not by
YAML 1.1 as PyYAML does. Where they differ, a manifest would be judged as something else than
it is: ``2024-01-01`` and ``1:30`` are strings to kubectl (PyYAML: a date, the number 90),
``y`` and ``N`` are booleans, ``0o17`` and ``1e2`` numbers, ``=`` and ``<<`` as values and
scalars under a tag of one's own (``!foo bar``) strings. Numbers follow Go's parsers (an
integer in 64 bits, else a float; a float too large for 64 bits stays text), and a whole float
below 1e21 is an integer, as the JSON kubectl sends writes it. Keys that are not strings are
written as JSON keys (``true:`` is ``"true"``).
"""

from __future__ import annotations

import base64
import binascii
import decimal
import math
import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.constructor import ConstructorError

STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"
BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
MERGE_TAG = "tag:yaml.org,2002:merge"
BINARY_TAG = "tag:yaml.org,2002:binary"
# A plain scalar that may be a number: Go's parsers decide (see ``number``).
NUMBER_TAG = "tag:preemptguard,2026:number"

_TRUE = frozenset(["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"])
_FALSE = frozenset(["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"])
_INFINITE = {".inf": math.inf, ".Inf": math.inf, ".INF": math.inf}
_SPECIAL_FLOATS: dict[str, float] = {
    **_INFINITE,
    **{"+" + k: v for k, v in _INFINITE.items()},
    **{"-" + k: -v for k, v in _INFINITE.items()},
    ".nan": math.nan,
    ".NaN": math.nan,
    ".NAN": math.nan,
}
# go-yaml's yamlStyleFloat, on the text without its underscores.
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_BASES = {"0x": 16, "0o": 8, "0b": 2}
_DIGITS = {
    2: frozenset("01"),
    8: frozenset("01234567"),
    10: frozenset("0123456789"),
    16: frozenset("0123456789abcdefABCDEF"),
}
_INT64 = range(-(2**63), 2**63)
_UINT64 = range(2**64)

# (tag, regular expression, the first characters it may match) for every implicit type;
# any other plain scalar is a string.
IMPLICIT: list[tuple[str, re.Pattern[str], list[str]]] = [
    (NULL_TAG, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]),
    (BOOL_TAG, re.compile(r"^(?:" + "|".join(sorted(_TRUE | _FALSE)) + r")$"), list("yYnNtTfFoO")),
    (
        FLOAT_TAG,
        re.compile(r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        ["-", "+", "."],
    ),
    (
        NUMBER_TAG,
        # What Go's parsers could read, with go-yaml's underscores; "500m" and "1.2.3" are
        # left out here (text, read at once), the rest is decided by ``number``.
        re.compile(r"^[-+]?(?:0[xXoObB][0-9a-fA-F_]+|[0-9_]*\.?[0-9_]*(?:[eE][-+]?[0-9_]+)?)$"),
        list("-+.0123456789"),
    ),
    (MERGE_TAG, re.compile(r"^<<$"), ["<"]),
]


# The plain scalars of letters that are not text, by their tag; the only ones, so a plain
# scalar starting with any other character than NUMERIC_FIRST is text when not among these.
WORD_TAGS: dict[str, str] = {
    **dict.fromkeys(_TRUE | _FALSE, BOOL_TAG),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), NULL_TAG),
}
NUMERIC_FIRST = frozenset("-+.0123456789<")


def number(loader: Any, node: yaml.ScalarNode) -> int | float | str:
    """A plain scalar that looks like a number, as go-yaml reads it: an integer of 64 bits
    (signed, or unsigned), else a float of YAML's form that fits 64 bits, else text."""
    text = node.value
    # go-yaml drops underscores, but for text starting with a point, which it gives to
    # ParseFloat as written: an underscore there is not a number.
    dotted = text.startswith(".")
    plain = ("" if "_" in text else text) if dotted else text.replace("_", "")
    whole = _go_integer(plain)
    if whole is not None:
        return whole
    if _GO_FLOAT.fullmatch(plain):
        value = float(plain)
        if not math.isinf(value):
            return whole_float(value)
    return str(text)


def whole_float(value: float) -> int | float:
    """A number as the API server reads it from kubectl: kubectl sends a manifest as JSON, in
    which Go writes a whole float below 1e21 without a fraction (``300.0`` as ``300``), and an
    integer field takes it. Read as a float, ``terminationGracePeriodSeconds: 300.0`` would be
    refused where the API server takes it."""
    if not value.is_integer() or abs(value) >= 1e21:
        return value
    # Go writes the shortest digits that read back as the value (2**64 as
    # 18446744073709552000): the integer the API server reads is those digits.
    return int(value) if abs(value) < 2**53 else int(decimal.Decimal(repr(value)))


def _go_integer(plain: str) -> int | None:
    """``strconv.ParseInt(plain, 0, 64)``, then ``ParseUint``: None where both fail."""
    sign, digits = (plain[0], plain[1:]) if plain[:1] in ("-", "+") else ("", plain)
    base = _BASES.get(digits[:2].lower())
    if base is not None:
        digits = digits[2:]
    elif len(digits) > 1 and digits[0] == "0":
        base = 8
    else:
        base = 10
    # Digits of the base only (Python's int() would take a second prefix, "0b0b1"), and no
    # more than 64 bits' worth: out of range anyway.
    if not digits or not set(digits) <= _DIGITS[base] or len(digits.lstrip("0")) > 64:
        return None
    value = int(digits, base)
    value = -value if sign == "-" else value
    if value in _INT64 or (not sign and value in _UINT64):
        return value
    return None


def boolean(loader: Any, node: yaml.ScalarNode) -> bool:
    if node.value in _TRUE:
        return True
    if node.value in _FALSE:
        return False
    raise _cannot(node, "a boolean")


def null(loader: Any, node: yaml.ScalarNode) -> None:
    if node.value not in ("", "~", "null", "Null", "NULL"):
        raise _cannot(node, "null")


def tagged_int(loader: Any, node: yaml.ScalarNode) -> int:
    """``!!int``: an integer as Go's parsers read one (``1.0`` is a float: refused)."""
    value = _go_integer(node.value.replace("_", ""))
    if value is not None:
        return value
    raise _cannot(node, "an integer")


def tagged_float(loader: Any, node: yaml.ScalarNode) -> int | float:
    """``!!float`` and the implicit .inf and .nan."""
    special = _SPECIAL_FLOATS.get(node.value)
    if special is not None:
        return special
    value = number(loader, node)
    if isinstance(value, int | float):
        return value
    raise _cannot(node, "a number")


def binary(loader: Any, node: yaml.ScalarNode) -> str:
    """``!!binary``: its bytes, as the JSON string kubectl sends."""
    try:
        data = base64.b64decode("".join(node.value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise _cannot(node, "base64") from None
    return data.decode("utf-8", "replace")


def as_written(loader: Any, node: yaml.ScalarNode) -> str:
    """A scalar under a tag go-yaml does not know (``!foo``, ``!!timestamp``): its text.
    (Lists and mappings are read whatever their tag: see ``manifests._Values``.)"""
    return str(node.value)


def json_key(key: object) -> str | None:
    """A mapping key that is not a string as it is in the JSON kubectl sends; None for a
    key no JSON object can have (a list or a mapping)."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _go_float_text(key)
    if isinstance(key, str):
        return key
    return None


def _go_float_text(value: float) -> str:
    # The shortest text that reads back as the value, as Go writes the usual ones (1.5).
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value).removesuffix(".0")


def _cannot(node: yaml.ScalarNode, what: str) -> ConstructorError:
    shown = node.value if len(node.value) <= 40 else node.value[:40] + "…"
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    problem = f"{shown!r} (tagged {tag}) is not {what}; quote it, or drop the tag"
    return ConstructorError(None, None, problem, node.start_mark)


def merge_as_value(loader: Any, node: yaml.ScalarNode) -> str:
    """``<<`` where a value stands is text; as a key it merges (see ``manifests._Values``)."""
    return "<<"


# The constructor of each tag, None for a tag go-yaml does not know.
CONSTRUCTORS: dict[str | None, Callable[[Any, Any], Any]] = {
    NUMBER_TAG: number,
    INT_TAG: tagged_int,
    FLOAT_TAG: tagged_float,
    BOOL_TAG: boolean,
    NULL_TAG: null,
    BINARY_TAG: binary,
    MERGE_TAG: merge_as_value,
    "tag:yaml.org,2002:timestamp": as_written,
    None: as_written,
}
