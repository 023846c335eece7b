"""Values a request's decoder could not keep, and how a message names them.

The decoder (``webhook.loading.jsondoc``) reads every review, but a value nested deeper than
``MAX_DEPTH`` levels or an integer of more than ``MAX_INT_DIGITS`` digits is kept as one of the
marker strings below. The engine reads no field that deep or that large; where such a marker
stands in a field the engine does read, its messages name what the request held there, not the
marker's type (a 5,000-digit grace period is a number too large to read, not a string).
"""

from __future__ import annotations

from typing import Any

# Far deeper than any field the engine reads (a pod template inside a custom resource is some
# 20 levels down), shallow enough that whatever walks the result stays clear of Python's limit.
MAX_DEPTH = 200
# Python's own limit on converting digit strings (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = 4300

_DEEP = f"a value nested deeper than {MAX_DEPTH} levels"
_LONG = f"a number of more than {MAX_INT_DIGITS} digits"
# Each marker, and what the request held where it stands.
_HELD = {f"<not read: {_DEEP.removeprefix('a value ')}>": _DEEP, f"<not read: {_LONG}>": _LONG}
UNREAD_DEEP, UNREAD_NUMBER = _HELD
UNREAD = frozenset(_HELD)


def held(value: Any) -> str | None:
    """What the request held where ``value`` stands, if ``value`` is a marker; else None."""
    return _HELD.get(value) if type(value) is str else None
