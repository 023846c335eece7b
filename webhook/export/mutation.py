"""The engine's placement (``placement.place`` and ``evaluation._record``) as one CEL
expression yielding JSON Patch operations, for a MutatingAdmissionPolicy on pods.

Tolerations and node-selector terms are atomic lists in the Pod schema, which server-side
apply (``patchType: ApplyConfiguration``) may not merge into, so every change is a JSON Patch
``add``: appended to an existing list, or the list (or its parent) created when absent. Each
operation is guarded by the same test the engine makes before it changes anything, so the
policy run on its own output yields no operation (``reinvocationPolicy: IfNeeded`` is safe).
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.engine.constraints import REQUIRED
from webhook.engine.evaluation import PLACEMENT_ANNOTATION
from webhook.engine.grace import API_DEFAULT_GRACE
from webhook.engine.placement import PREFERRED
from webhook.engine.policy import Placement, Policy
from webhook.export.cel import all_of, concat, lit, when
from webhook.export.rules import Rules, V

AFFINITY = "Object.spec.affinity"
NODE_AFFINITY = f"{AFFINITY}.nodeAffinity"
REQUIRED_TYPE = f"{NODE_AFFINITY}.{REQUIRED}"
TERM_TYPE = f"{REQUIRED_TYPE}.nodeSelectorTerms"
PREFERRED_TYPE = f"{NODE_AFFINITY}.{PREFERRED}"
AFFINITY_PATH = "/spec/affinity"
NODE_AFFINITY_PATH = f"{AFFINITY_PATH}/nodeAffinity"
REQUIRED_PATH = f"{NODE_AFFINITY_PATH}/{REQUIRED}"
TERMS_PATH = f"{REQUIRED_PATH}/nodeSelectorTerms"
PREFERRED_PATH = f"{NODE_AFFINITY_PATH}/{PREFERRED}"


def _escape(key: str) -> str:
    """A JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _add(path: str, value: str) -> str:
    return f"JSONPatch{{op: 'add', path: {path}, value: {value}}}"


@dataclass(frozen=True)
class Mutation:
    rules: Rules

    @property
    def policy(self) -> Policy:
        return self.rules.policy

    def expression(self) -> str:
        """The JSON Patch operations for the pod under review: none unless it has a class
        and nothing to refuse (the validating policy refuses those as they are)."""
        rules = self.rules
        cls = f"{V}workloadClass"
        preemptible = rules.is_class(cls, Placement.PREEMPTIBLE)
        prefer = rules.is_class(cls, Placement.PREFER_PREEMPTIBLE)
        standard = rules.is_class(cls, Placement.STANDARD)
        may_be_preempted = rules.is_class(cls, Placement.PREEMPTIBLE, Placement.PREFER_PREEMPTIBLE)
        placement = concat(
            [
                when(preemptible, self._required("In")),
                when(prefer, self._preferred()),
                when(standard, self._required("NotIn")),
                when(may_be_preempted, concat([self._toleration(), self._grace()])),
                self._record(),
            ]
        )
        return f"{cls} == '' || size({V}refusals) > 0 ? [] :\n{placement}"

    # --- required node affinity (placement._require) --------------------------------------

    def _expression_object(self, operator: str) -> str:
        rules = self.rules
        return (
            f"{TERM_TYPE}.matchExpressions{{key: {lit(rules.key)}, operator: {lit(operator)}, "
            f"values: [{lit(rules.preemptible)}]}}"
        )

    def _required(self, operator: str) -> str:
        expr = self._expression_object(operator)
        required = (
            f"{REQUIRED_TYPE}{{nodeSelectorTerms: [{TERM_TYPE}{{matchExpressions: [{expr}]}}]}}"
        )
        node_affinity = f"{NODE_AFFINITY}{{{REQUIRED}: {required}}}"
        affinity = f"{AFFINITY}{{nodeAffinity: {node_affinity}}}"
        spec = "object.spec"
        create = (
            f"(!has({spec}.affinity) ? [{_add(lit(AFFINITY_PATH), affinity)}] :\n"
            f"  !has({spec}.affinity.nodeAffinity) ? "
            f"[{_add(lit(NODE_AFFINITY_PATH), node_affinity)}] :\n"
            f"  [{_add(lit(REQUIRED_PATH), required)}])"
        )
        term_path = f"{lit(TERMS_PATH + '/')} + string(i) + '/matchExpressions'"
        to_end = term_path + " + '/-'"
        append = (
            f"{V}terms.transformList(i, t, !({self._narrower(operator)}),\n"
            f"  has(t.matchExpressions) ? {_add(to_end, expr)} :\n"
            f"  {_add(term_path, '[' + expr + ']')})"
        )
        return f"(size({V}terms) == 0 ? {create} :\n{append})"

    def _narrower(self, operator: str) -> str:
        """placement._already_narrower for term ``i``: it already excludes every node the
        expression would (a term that matches no node excludes them all)."""
        rules = self.rules
        term = f"{V}keyExpressions[i]"
        preemptible = lit(rules.preemptible)
        if operator == "NotIn":
            narrower = f"!({rules.term_admits(term, preemptible)})"
        else:
            narrower = all_of(
                [
                    f"!({rules.term_admits_absent(term)})",
                    f"!({rules.term_admits(term, lit(rules.standard))})"
                    if rules.standard != rules.preemptible
                    else "",
                    f"!{V}mentioned.exists(v, v != {preemptible} && "
                    f"{rules.term_admits(term, 'v')})",
                    f"!({rules.term_admits_unnamed(term)})",
                ]
            )
        return f"!{V}alive[i] || {narrower}"

    # --- preferred node affinity (placement._prefer) ----------------------------------------

    def _preferred(self) -> str:
        rules, policy = self.rules, self.policy
        key, value = lit(rules.key), lit(rules.preemptible)
        expr = (
            f"{PREFERRED_TYPE}.preference.matchExpressions{{key: {key}, operator: 'In', "
            f"values: [{value}]}}"
        )
        term = (
            f"{PREFERRED_TYPE}{{weight: {policy.preferred_weight}, "
            f"preference: {PREFERRED_TYPE}.preference{{matchExpressions: [{expr}]}}}}"
        )
        node_affinity = f"{NODE_AFFINITY}{{{PREFERRED}: [{term}]}}"
        spec = "object.spec"
        prefers = (
            f"{spec}.?affinity.?nodeAffinity.?{PREFERRED}.orValue([]).exists(p, "
            f"p.?preference.?matchExpressions.orValue([]).exists(e, e.key == {key} && "
            f"e.operator == 'In' && e.?values.orValue([]) == [{value}]))"
        )
        affinity = f"{AFFINITY}{{nodeAffinity: {node_affinity}}}"
        return (
            f"({prefers} ? [] :\n"
            f"  !has({spec}.affinity) ? [{_add(lit(AFFINITY_PATH), affinity)}] :\n"
            f"  !has({spec}.affinity.nodeAffinity) ? "
            f"[{_add(lit(NODE_AFFINITY_PATH), node_affinity)}] :\n"
            f"  !has({spec}.affinity.nodeAffinity.{PREFERRED}) ? "
            f"[{_add(lit(PREFERRED_PATH), '[' + term + ']')}] :\n"
            f"  [{_add(lit(PREFERRED_PATH + '/-'), term)}])"
        )

    # --- toleration (placement._tolerate, constraints.tolerates) ----------------------------

    def _toleration(self) -> str:
        taint = self.policy.taint
        if taint is None:
            return ""
        if taint.value:
            toleration = (
                f"Object.spec.tolerations{{key: {lit(taint.key)}, operator: 'Equal', "
                f"value: {lit(taint.value)}, effect: {lit(taint.effect)}}}"
            )
        else:
            toleration = (
                f"Object.spec.tolerations{{key: {lit(taint.key)}, operator: 'Exists', "
                f"effect: {lit(taint.effect)}}}"
            )
        tolerates = (
            f"(t.?effect.orValue('') == '' || t.effect == {lit(taint.effect)}) && "
            f"(t.?operator.orValue('') == 'Exists' ? "
            f"t.?key.orValue('') in ['', {lit(taint.key)}] : "
            f"t.?key.orValue('') == {lit(taint.key)} && "
            f"t.?value.orValue('') == {lit(taint.value)})"
        )
        return (
            f"(object.spec.?tolerations.orValue([]).exists(t, {tolerates}) ? [] :\n"
            f"  has(object.spec.tolerations) ? [{_add(lit('/spec/tolerations/-'), toleration)}] :\n"
            f"  [{_add(lit('/spec/tolerations'), '[' + toleration + ']')}])"
        )

    # --- grace period (grace.adjust_grace) ----------------------------------------------------

    def _grace(self) -> str:
        policy = self.policy
        current = f"object.spec.?terminationGracePeriodSeconds.orValue({API_DEFAULT_GRACE})"
        maximum = policy.max_grace_seconds
        clamped = f"({current} < {maximum} ? {current} : {maximum})"
        needed = f"{V}checkpointSeconds + {policy.checkpoint_margin_seconds}"
        target = f"({V}checkpointValid && {needed} > {clamped} ? {needed} : {clamped})"
        return when(
            f"{target} != {current}",
            f"[{_add(lit('/spec/terminationGracePeriodSeconds'), target)}]",
        )

    # --- the decision record (evaluation._record) ---------------------------------------------

    def _record(self) -> str:
        cls = f"{V}workloadClass"
        key = lit(PLACEMENT_ANNOTATION)
        path = lit(f"/metadata/annotations/{_escape(PLACEMENT_ANNOTATION)}")
        return (
            f"({V}annotations[?{key}] == optional.of({cls}) ? [] :\n"
            f"  has(object.metadata.annotations) ? [{_add(path, cls)}] :\n"
            f"  [{_add(lit('/metadata/annotations'), '{' + key + ': ' + cls + '}')}])"
        )
