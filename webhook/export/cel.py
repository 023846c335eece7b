"""CEL text for the policy's rules, as Kubernetes' admission policies evaluate it.

Each function returns an expression as a string. The expressions target the CEL environment
of the API server (Kubernetes 1.36 and later): optional fields (``a.?b``, ``m[?k]``), the
strings and lists extensions, two-variable comprehensions and the regex ``find``. CEL has no
functions of its own, so what the engine calls as a function (does this term admit a node
whose label is ``v``?) is written out where it is used; the ``variables`` of a policy hold
what is computed once.

The semantics mirror the engine: ``constraints.TermView.admits`` for one node-selector term,
``NodeConstraints.admits`` for the pod, ``classify`` for the class, ``placement._refusals``
and ``grace.grace_budget`` for the refusals, with the engine's messages.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable


def lit(value: str) -> str:
    """A CEL string literal for ``value`` (in double quotes when it holds a single quote)."""
    quote = '"' if "'" in value and '"' not in value else "'"
    out = []
    for char in value:
        if char in ("\\", quote):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return quote + "".join(out) + quote


def literal_value(expr: str) -> str | None:
    """The string a CEL literal made by ``lit`` stands for; None for any other expression."""
    for quote in ("'", '"'):
        if len(expr) >= 2 and expr[0] == quote == expr[-1]:
            body = expr[1:-1]
            if "\\" not in body and quote not in body:
                return body
    return None


def lits(values: Iterable[str]) -> str:
    """A CEL list of string literals."""
    return "[" + ", ".join(lit(v) for v in values) + "]"


def any_of(parts: Iterable[str], empty: str = "false", separator: str = " || ") -> str:
    found = [p for p in parts if p]
    if not found:
        return empty
    return found[0] if len(found) == 1 else "(" + separator.join(found) + ")"


def all_of(parts: Iterable[str], empty: str = "true") -> str:
    found = [p for p in parts if p]
    if not found:
        return empty
    return found[0] if len(found) == 1 else "(" + " && ".join(found) + ")"


def concat(parts: Iterable[str], empty: str = "[]") -> str:
    """Lists joined with ``+`` (an empty list when there is none)."""
    found = [p for p in parts if p]
    if not found:
        return empty
    return found[0] if len(found) == 1 else " +\n".join(found)


def when(condition: str, items: str) -> str:
    """``items`` (a list) when ``condition`` holds, else an empty list."""
    return f"({condition} ? {items} : [])"


# --- globs ---------------------------------------------------------------------------------

_RE2_SPECIAL = set(r"\.+*?()|[]{}^$")


def _re2_escape(char: str) -> str:
    return "\\" + char if char in _RE2_SPECIAL else char


def glob_regex(pattern: str) -> str | None:
    """An RE2 regex matching exactly what ``fnmatch.fnmatchcase(name, pattern)`` matches, or
    None when the pattern has no wildcard (compare it as a string)."""
    if not any(c in pattern for c in "*?["):
        return None
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        i += 1
        if char == "*":
            if not out or out[-1] != ".*":
                out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
                continue
            out.append(_bracket(pattern[i - 1 : j + 1]))
            i = j + 1
        else:
            out.append(_re2_escape(char))
    return "^(?s:" + "".join(out) + ")$"


# RE2 has no (?!): a class no character is in.
_NOTHING = "[^\\s\\S]"


def _bracket(expression: str) -> str:
    """A ``[...]`` of a glob as fnmatch reads it (reversed ranges dropped, ``!`` negating,
    a leading ``]`` a member): fnmatch's own translation, which RE2 reads but for (?!)."""
    translated = fnmatch.translate(expression)
    inner = translated[len("(?s:") : -len(")\\Z")]
    if inner == "(?!)":
        return _NOTHING
    # A "]" first in a class is a member; escaped, no reader can take it for the end.
    for start in ("[^]", "[]"):
        if inner.startswith(start):
            return start[:-1] + "\\]" + inner[len(start) :]
    return inner


# --- Python's text helpers, as CEL ---------------------------------------------------------

# What Python's str.strip() removes: every code point whose str.isspace() is true
# (tests/test_export.py checks the list against Python's own).
PY_SPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _char_class(chars: str) -> str:
    return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in chars) + "]"


# grace._whole_seconds: stripped, ASCII digits only, at most 9 of them.
WHOLE_SECONDS_RE = f"^{_char_class(PY_SPACE)}*[0-9]{{1,9}}{_char_class(PY_SPACE)}*$"

# constraints._integer, as far as both Python's int() and CEL's int() agree (a sign and up
# to 18 digits: every value an int64 holds with room for the neighbours either side).
INTEGER_RE = "^[+-]?[0-9]{1,18}$"


def shorten(expr: str, limit: int = 63) -> str:
    """findings.shorten: cut to ``limit`` characters, the last one an ellipsis."""
    return f"(size({expr}) <= {limit} ? {expr} : {expr}.substring(0, {limit - 1}) + '…')"


def py_repr(expr: str) -> str:
    """Python's repr() of a string, for the strings messages quote: single quotes, or double
    quotes when the text holds a single quote and no double quote. (Backslashes and
    characters Python escapes are quoted as they are.)"""
    return (
        f"(({expr}).contains(\"'\") && !({expr}).contains('\"') ? "
        f"'\"' + {expr} + '\"' : \"'\" + {expr} + \"'\")"
    )


def thousands(expr: str) -> str:
    """An int as Python's ``f"{n:,}"`` writes it, for n below 10**9."""
    group = "string({e} / {d} % 1000)"

    def padded(divisor: int) -> str:
        part = group.format(e=expr, d=divisor)
        rest = f"({expr} / {divisor} % 1000)"
        return f"({rest} < 10 ? '00' : {rest} < 100 ? '0' : '') + {part}"

    return (
        f"({expr} < 1000 ? string({expr}) : {expr} < 1000000 ? "
        f"string({expr} / 1000) + ',' + {padded(1)} : "
        f"string({expr} / 1000000) + ',' + {padded(1000)} + ',' + {padded(1)})"
    )


def bounded(expr: str, limit: int = 1024) -> str:
    """findings.bounded: a message cut to ``limit`` characters."""
    return shorten(expr, limit)
