"""Kubernetes node-selection semantics for one label key, and taint toleration.

A node is described only by the value of the compute-class label (``None`` when the
label is absent); other keys of a pod's constraints may match or not, so they never
make a term exclude a kind of node.

Every question here costs time linear in the pod: each required term is read once into a
``TermView`` (sets and bounds), and a view answers for one label value in constant time.
The questions asked of a pod range over the label values it names, so their number is
capped (``MAX_LABEL_VALUES``), as is the number of terms (``MAX_TERMS``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, final

from webhook.engine.findings import Code, Finding, finding
from webhook.engine.policy import Taint
from webhook.engine.workloads import mapping_at

LabelState = str | None

# A label value no constraint names (not even a valid label value), standing for all of them.
UNNAMED_VALUE = "\x00unnamed"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

# A cluster has two values of the compute-class label; a pod naming more than this many is
# not describing one, and answering for each would let its size decide the review's cost.
MAX_LABEL_VALUES = 100
# Kubernetes sets no limit, but real pods carry a handful of terms.
MAX_TERMS = 1000


@final
class TermView:
    """What one nodeSelectorTerm allows for the values of one label key.

    ``one_of`` is the intersection of its ``In`` lists (``None``: no ``In``), ``none_of``
    the union of its ``NotIn`` lists; ``present`` is True when the label must exist, False
    when it must be absent, ``None`` when either will do. ``above``/``below`` are the
    tightest ``Gt``/``Lt`` bounds. ``empty`` marks a term that matches no node at all.
    """

    __slots__ = ("above", "bad_bound", "below", "empty", "none_of", "one_of", "present")

    def __init__(
        self,
        *,
        empty: bool = False,
        one_of: frozenset[str] | None = None,
        none_of: frozenset[str] = frozenset(),
        present: bool | None = None,
        above: int | None = None,
        below: int | None = None,
        bad_bound: bool = False,
    ) -> None:
        self.empty: Final = empty
        self.one_of: Final = one_of
        self.none_of: Final = none_of
        self.present: Final = present
        self.above: Final = above
        self.below: Final = below
        self.bad_bound: Final = bad_bound

    def admits(self, value: LabelState) -> bool:
        """Whether a node whose label is ``value`` satisfies every expression of the term."""
        if self.empty or self.bad_bound:
            return False
        if value is None:
            return self.present is not True and self.one_of is None and not self._bounded
        if self.present is False or value in self.none_of:
            return False
        if self.one_of is not None and value not in self.one_of:
            return False
        return not self._bounded or self._within(value)

    @property
    def _bounded(self) -> bool:
        return self.above is not None or self.below is not None

    def _within(self, value: str) -> bool:
        number = _integer(value)
        if number is None:
            return False
        if self.above is not None and not number > self.above:
            return False
        return self.below is None or number < self.below


def view(term: Any, key: str) -> TermView:
    """Read one nodeSelectorTerm once; expressions on other keys never exclude a node."""
    if not isinstance(term, dict) or not (term.get("matchExpressions") or term.get("matchFields")):
        return TermView(empty=True)
    builder = _ViewBuilder()
    exprs = term.get("matchExpressions")
    for expr in exprs if isinstance(exprs, list) else []:
        if isinstance(expr, dict) and expr.get("key") == key:
            builder.add(expr)
    return builder.build()


class _ViewBuilder:
    def __init__(self) -> None:
        self.one_of: set[str] | None = None
        self.none_of: set[str] = set()
        self.present: bool | None = None
        self.conflict = False
        self.above: int | None = None
        self.below: int | None = None
        self.bad_bound = False

    def add(self, expr: dict[str, Any]) -> None:
        raw = expr.get("values")
        values = [v for v in raw if isinstance(v, str)] if isinstance(raw, list) else []
        op = expr.get("operator")
        if op == "In":
            self.one_of = set(values) if self.one_of is None else self.one_of & set(values)
        elif op == "NotIn":
            self.none_of.update(values)
        elif op in ("Exists", "DoesNotExist"):
            self._require_presence(op == "Exists")
        elif op in ("Gt", "Lt"):
            self._bound(op, raw)

    def _require_presence(self, present: bool) -> None:
        if self.present is not None and self.present is not present:
            self.conflict = True
        self.present = present

    def _bound(self, op: str, raw: Any) -> None:
        bound = _integer(raw[0]) if isinstance(raw, list) and len(raw) == 1 else None
        if bound is None:
            # Kubernetes wants exactly one integer; anything else matches no node.
            self.bad_bound = True
        elif op == "Gt":
            self.above = bound if self.above is None else max(self.above, bound)
        else:
            self.below = bound if self.below is None else min(self.below, bound)

    def build(self) -> TermView:
        return TermView(
            empty=self.conflict,
            one_of=None if self.one_of is None else frozenset(self.one_of),
            none_of=frozenset(self.none_of),
            present=self.present,
            above=self.above,
            below=self.below,
            bad_bound=self.bad_bound,
        )


# Longer digit strings are no label value (63 characters at most) and stay clear of
# Python's limit on converting digit strings.
_MAX_DIGITS = 64
_INT64 = (-(2**63), 2**63 - 1)


def _integer(value: Any) -> int | None:
    """``value`` as Kubernetes reads a Gt/Lt bound or label value (Go's ``ParseInt(s, 10,
    64)``): a sign and decimal digits, nothing else (Python's ``int`` also takes ``1_0``
    and surrounding spaces), within 64 bits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str) or len(value) > _MAX_DIGITS:
        return None
    digits = value[1:] if value[:1] in ("+", "-") else value
    if not (digits.isascii() and digits.isdigit()):
        return None
    number = int(value)
    return number if _INT64[0] <= number <= _INT64[1] else None


def required_terms(spec: dict[str, Any]) -> list[Any] | None:
    """The required nodeSelectorTerms (ORed), or None when the pod has none."""
    terms = mapping_at(spec, "affinity", "nodeAffinity", REQUIRED).get("nodeSelectorTerms")
    return terms if isinstance(terms, list) and terms else None


@final
class NodeConstraints:
    """A pod's nodeSelector and required node affinity, as they bear on one label key.

    ``terms`` is None when the pod has no required terms, or more than MAX_TERMS (see
    ``too_large``).
    """

    __slots__ = ("has_selector", "key", "mentioned", "selector", "term_count", "terms")

    def __init__(
        self,
        *,
        key: str,
        selector: LabelState | None,
        has_selector: bool,
        terms: tuple[TermView, ...] | None,
        term_count: int,
        mentioned: frozenset[str],
    ) -> None:
        self.key: Final = key
        self.selector: Final = selector
        self.has_selector: Final = has_selector
        self.terms: Final = terms
        self.term_count: Final = term_count
        self.mentioned: Final = mentioned

    def admits(self, value: LabelState) -> bool:
        """Whether the pod may run on a node whose label is ``value``."""
        if self.has_selector and self.selector != value:
            return False
        return self.terms is None or any(t.admits(value) for t in self.terms)

    def admits_any(self, values: Iterable[LabelState]) -> bool:
        return any(self.admits(v) for v in values)

    def too_large(self) -> Finding | None:
        """Why these constraints are beyond what the engine answers for, if they are."""
        terms_path = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
        if self.term_count > MAX_TERMS:
            message = (
                f"{terms_path} has {self.term_count:,} terms, more than the {MAX_TERMS:,} "
                "preemptguard checks: merge them into fewer terms"
            )
            return finding(Code.TOO_MANY_TERMS, message, terms_path)
        if len(self.mentioned) > MAX_LABEL_VALUES:
            message = (
                f"the pod's node constraints name {len(self.mentioned):,} values of the label "
                f"{self.key}, more than the {MAX_LABEL_VALUES} preemptguard checks (nodes carry "
                "one of two): name only the values your nodes carry"
            )
            return finding(Code.TOO_MANY_LABEL_VALUES, message, terms_path)
        return None


def read_constraints(spec: dict[str, Any], key: str) -> NodeConstraints:
    """One pass over the pod's node constraints; ask ``too_large`` before anything else."""
    selector = spec.get("nodeSelector")
    has_selector = isinstance(selector, dict) and key in selector
    raw_terms = required_terms(spec) or []
    read = 0 < len(raw_terms) <= MAX_TERMS
    return NodeConstraints(
        key=key,
        selector=selector[key] if isinstance(selector, dict) and has_selector else None,
        has_selector=has_selector,
        terms=tuple(view(t, key) for t in raw_terms) if read else None,
        term_count=len(raw_terms),
        mentioned=frozenset(_mentioned(selector, raw_terms, key) if read or not raw_terms else ()),
    )


def mentioned_values(spec: dict[str, Any], key: str) -> set[str]:
    """Every value of ``key`` the pod's constraints name, so a search over states is complete."""
    return _mentioned(spec.get("nodeSelector"), required_terms(spec) or [], key)


def _mentioned(selector: Any, terms: list[Any], key: str) -> set[str]:
    found: set[str] = set()
    if isinstance(selector, dict) and isinstance(selector.get(key), str):
        found.add(selector[key])
    for term in terms:
        exprs = term.get("matchExpressions") if isinstance(term, dict) else None
        for expr in exprs if isinstance(exprs, list) else []:
            if isinstance(expr, dict) and expr.get("key") == key:
                found.update(_values_and_neighbours(expr))
    return found


def _values_and_neighbours(expr: dict[str, Any]) -> Sequence[str]:
    """The values an expression names; for Gt/Lt, the integers either side of its bound."""
    raw = expr.get("values")
    values = [str(v) for v in raw if isinstance(v, str | int)] if isinstance(raw, list) else []
    if expr.get("operator") in ("Gt", "Lt") and len(values) == 1:
        bound = _integer(values[0])
        if bound is not None:
            return [*values, str(bound - 1), str(bound + 1)]
    return values


def tolerates(toleration: Any, taint: Taint) -> bool:
    """Kubernetes' ToleratesTaint: empty effect matches all; empty key with Exists matches all."""
    if not isinstance(toleration, dict):
        return False
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return key in ("", taint.key)
    return key == taint.key and (toleration.get("value") or "") == taint.value


def tolerated(spec: dict[str, Any], taint: Taint) -> bool:
    tolerations = spec.get("tolerations")
    return isinstance(tolerations, list) and any(tolerates(t, taint) for t in tolerations)
