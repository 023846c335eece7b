"""The policy's decisions as CEL variables shared by both admission policies.

``Rules(policy).variables(pods_only=...)`` lists the ``(name, expression)`` pairs, in the order
they may refer to each other, that compute the class of the pod (or pod template) under
review, its node constraints and the engine's refusals with their messages. The validating
policy refuses when ``variables.refusals`` is not empty; the mutating policy places what the
validating one admits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from webhook.engine.classify import NAMESPACE_DEFAULT_ANNOTATION, WORKLOAD_ANNOTATION
from webhook.engine.constraints import MAX_LABEL_VALUES, MAX_TERMS, REQUIRED
from webhook.engine.evaluation import kinds_of
from webhook.engine.grace import CHECKPOINT_ANNOTATION, GRACE_FIELD
from webhook.engine.policy import (
    LabelRequirement,
    Placement,
    PodTemplate,
    Policy,
    Rule,
    WorkloadKind,
)
from webhook.engine.scheduling import NO_CLASS_PRIORITY
from webhook.engine.trust import DAEMONSET_API_VERSION
from webhook.engine.workloads import BUILTIN_KINDS, MIRROR_ANNOTATION
from webhook.export.cel import (
    INTEGER_RE,
    WHOLE_SECONDS_RE,
    all_of,
    any_of,
    concat,
    glob_regex,
    lit,
    literal_value,
    lits,
    py_repr,
    shorten,
    thousands,
    when,
)

V = "variables."

# What the refusals of a pod's class change and of a batch pod's priority say to do.
CLASS_CHANGED_ADVICE = (
    "a pod's placement cannot change after it is created: leave its labels, annotations and "
    "owner as they were, or delete the pod and create it again as "
)
PRIORITY_CEILING_ADVICE = (
    ": remove priorityClassName, or name the class's own (the webhook, when it answers, "
    "moves the pod there itself)"
)

# Kubernetes' own workload kinds the admission policies can check at apply time, with the
# API group and resource they match them by (DaemonSets are left alone).
TEMPLATE_RESOURCES: dict[str, tuple[str, str]] = {
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "ReplicationController": ("", "replicationcontrollers"),
}


def template_kinds(policy: Policy) -> dict[str, WorkloadKind]:
    """The workload kinds the exported policies check at apply time, by kind: those of
    ``TEMPLATE_RESOURCES`` the policy lists as Kubernetes keeps them (workloads.BUILTIN_KINDS:
    one template at the kind's path, with no role, default class or pods of its own). One
    the policy leaves alone, or does not list, the webhook does not check at apply time
    either; one it lists otherwise is checked by the webhook only (``policies._custom_kinds``
    says so), as the CEL reads templates only where Kubernetes keeps them."""
    listed = kinds_of(policy)
    found = {}
    for kind, (group, _) in TEMPLATE_RESOURCES.items():
        entry = listed.get((group, kind))
        if entry is not None and _as_kubernetes_keeps_it(entry):
            found[kind] = entry
    return found


def _as_kubernetes_keeps_it(entry: WorkloadKind) -> bool:
    builtin = BUILTIN_KINDS[(entry.group, entry.kind)]
    return entry.ignore is None and entry.templates == builtin.templates


def classes_except(policy: Policy, placement: Placement) -> str:
    """placement._classes_except: the classes to suggest instead, as the messages name them."""
    names = sorted(c.name for c in policy.classes.values() if c.placement is not placement)
    return " or ".join(names) if names else "another class"


def template_of(obj: str, kinds: Mapping[str, WorkloadKind]) -> str:
    """The pod (template) of ``obj`` (``object`` or ``oldObject``): the Pod itself, or the
    template at the path of its kind among ``kinds`` (``template_kinds``)."""
    branches = []
    for kind, entry in kinds.items():
        parts = entry.templates[0].path
        if parts != ("spec", "template"):
            branches.append((kind, f"{obj}.{'.'.join(parts)}"))
    out = f"{obj}.spec.template"
    for kind, path in reversed(branches):
        out = f"{obj}.kind == {lit(kind)} ? {path} : {out}"
    return f"({obj}.kind == 'Pod' ? {obj} : {out})"


@dataclass(frozen=True)
class Rules:
    """CEL for one policy. ``subject`` is the object judged (``oldObject``: the pod before an
    update), and ``prefix`` names its classification variables apart (``oldWorkloadClass``)."""

    policy: Policy
    subject: str = "object"
    prefix: str = ""

    def name(self, variable: str) -> str:
        """The variable's name for this subject."""
        return self.prefix + variable[:1].upper() + variable[1:] if self.prefix else variable

    def v(self, variable: str) -> str:
        """A reference to the variable ``variable`` of this subject."""
        return V + self.name(variable)

    def before_update(self) -> Rules:
        """The same rules for the pod before an update."""
        return Rules(self.policy, subject="oldObject", prefix="old")

    # --- names -----------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.policy.node_label.key

    @property
    def preemptible(self) -> str:
        return self.policy.node_label.preemptible

    @property
    def standard(self) -> str:
        return self.policy.node_label.standard

    def classes(self, *placements: Placement) -> list[str]:
        return sorted(c.name for c in self.policy.classes.values() if c.placement in placements)

    def is_class(self, expr: str, *placements: Placement) -> str:
        names = self.classes(*placements)
        return f"{expr} in {lits(names)}" if names else "false"

    # --- request-only conditions (matchConditions: no variables there) ----------------------

    def not_excluded(self) -> str:
        return f"!(request.namespace in {lits(self.policy.excluded_namespaces)})"

    def not_exempt(self) -> str:
        """trust.exemption: mirror pods created by a node, DaemonSet pods created by the
        DaemonSet controller for an apps/v1 DaemonSet; decided by request.userInfo."""
        trusted = self.policy.trusted
        user = "request.userInfo.?username.orValue('')"
        groups = "request.userInfo.?groups.orValue([])"
        controller = (
            "object.metadata.?ownerReferences.orValue([]).filter(r, r.?controller.orValue(false))"
        )
        mirror = all_of(
            [
                f"{lit(MIRROR_ANNOTATION)} in object.metadata.?annotations.orValue({{}})",
                f"{user}.startsWith({lit(trusted.node_username_prefix)})",
                f"{lit(trusted.node_group)} in {groups}",
            ]
        )
        daemonset = all_of(
            [
                f"size({controller}) > 0",
                f"{controller}[0].kind == 'DaemonSet'",
                f"{controller}[0].apiVersion == {lit(DAEMONSET_API_VERSION)}",
                f"{user} in {lits(trusted.daemonset_controllers)}",
            ]
        )
        return f"object.kind != 'Pod' || !({mirror} || {daemonset})"

    def template_changed(self) -> str:
        """evaluation._workload_update_skip and podupdate.update_skip: an UPDATE of a workload
        is judged only when its pod template changed and it is not being deleted; one of a
        pod only when what classifies it changed (being deleted or not)."""
        kinds = template_kinds(self.policy)
        workload = (
            "(!has(object.metadata.deletionTimestamp) && "
            f"{template_of('object', kinds)} != {template_of('oldObject', kinds)})"
        )
        pod = " || ".join(
            f"object.metadata.?{field}.orValue({empty}) != "
            f"oldObject.metadata.?{field}.orValue({empty})"
            for field, empty in (("annotations", "{}"), ("labels", "{}"), ("ownerReferences", "[]"))
        )
        return f"request.operation != 'UPDATE' || (object.kind == 'Pod' ? {pod} : {workload})"

    # --- variables ---------------------------------------------------------------------------

    def variables(self, *, pods_only: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        kinds = template_kinds(self.policy)
        out.append(("template", "object" if pods_only else template_of("object", kinds)))
        out += self.classification(pods_only=pods_only)
        out += self._constraints()
        out += self._refusals()
        return out

    def validating_variables(self) -> list[tuple[str, str]]:
        """The validating policy's variables: those of ``variables``, the class a pod had
        before an update, and the refusals of what it checks besides placement (a pod update
        that changes its class, a reserved or escalated priority)."""
        *out, (_, placement) = self.variables(pods_only=False)
        old = self.before_update()
        out += [(old.name("template"), "oldObject"), *old.classification(pods_only=True)]
        out += [
            ("podUpdate", "request.operation == 'UPDATE' && object.kind == 'Pod'"),
            ("classChanged", self._class_changed(old)),
            ("reservedClass", self._reserved_class()),
            ("priorityCeiling", self._priority_ceiling()),
            (
                "refusals",
                f"{V}podUpdate ? {V}classChanged :\n({placement}) +\n"
                f"{V}reservedClass + {V}priorityCeiling",
            ),
        ]
        return out

    def _class_changed(self, old: Rules) -> str:
        """podupdate.judge_update: an update that makes a pod of a standard class it did not
        have, while its node constraints admit preemptible nodes."""
        cls, before = f"{V}workloadClass", old.v("workloadClass")
        label = f"{self.key}={self.preemptible}"
        message = (
            f"'this update makes the pod ' + {cls} + ', a class that must run on standard "
            f"nodes, but the pod was created ' + ({before} == '' ? 'unclassified' : {before}) + "
            f"{lit(f' and its node constraints still admit {label} nodes; ')} + "
            f"{lit(CLASS_CHANGED_ADVICE)} + {cls} + ' so that it is placed as such'"
        )
        return (
            f"{self.is_class(cls, Placement.STANDARD)} && {before} != {cls} ?\n"
            f"  (size({V}tooLarge) > 0 ? {V}tooLarge : {V}admitsPreemptible ? [{message}] : []) "
            ": []"
        )

    def _reserved_class(self) -> str:
        """scheduling.reserved_class: a pod or template outside its namespaces naming a
        reserved PriorityClass, classified or not."""
        named = f"{V}template.spec.?priorityClassName.orValue('')"
        found = []
        for name, namespaces in self.policy.reserved_priority_classes.items():
            allowed = ", ".join(namespaces) or "no namespace"
            message = (
                f"priorityClassName {name!r} is reserved for pods in {allowed}: it runs them "
                "ahead of every workload, preempting others; remove it, or name a class of "
                "your own"
            )
            test = f"{named} == {lit(name)} && !(request.namespace in {lits(namespaces)})"
            found.append(when(test, f"[{lit(message)}]"))
        return concat(found)

    def _priority_ceiling(self) -> str:
        """A pod of a batch class (placed on preemptible nodes, with a priority class of its
        own) above the priority of a pod that names no class. The webhook moves such a pod to
        its class's priority class; CEL cannot read PriorityClasses, so this policy refuses
        it, when the webhook did not (it was down)."""
        cls = f"{V}workloadClass"
        batch = sorted(
            c.name
            for c in self.policy.classes.values()
            if c.placement is not Placement.STANDARD and c.priority_class_name is not None
        )
        if not batch:
            return "[]"
        priority = "object.spec.?priority.orValue(0)"
        classes = {c: self.policy.classes[c].priority_class_name for c in batch}
        table = "{" + ", ".join(f"{lit(k)}: {lit(v or '')}" for k, v in classes.items()) + "}"
        message = (
            f"'class ' + {cls} + ' runs below pods that name no priority class (its priority "
            f"class is ' + {table}[{cls}] + '), but this pod asks for priority ' + "
            f"string({priority}) + {lit(PRIORITY_CEILING_ADVICE)}"
        )
        return (
            f"object.kind == 'Pod' && {cls} in {lits(batch)} && {priority} > "
            f"{NO_CLASS_PRIORITY} ? [{message}] : []"
        )

    def classification(self, *, pods_only: bool) -> list[tuple[str, str]]:
        """The variables that classify the subject, ending with its ``workloadClass``."""
        policy = self.policy
        names = lits(sorted(policy.classes))
        controller = (
            f"{self.subject}.metadata.?ownerReferences.orValue([])"
            ".filter(r, r.?controller.orValue(false))"
        )
        pod_owner = f"(size({controller}) > 0 ? {controller}[0].kind : '')"
        if pods_only:
            owner = pod_owner
        else:
            owners = {k: e.pod_owner_kind or "" for k, e in template_kinds(policy).items()}
            table = "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in owners.items()) + "}"
            kind = f"{self.subject}.kind"
            owner = f"({kind} == 'Pod' ? {pod_owner} : {table}[?{kind}].orValue(''))"
        annotated = self.v("annotated")
        ns_default = self.v("namespaceDefault")
        known_annotation = f"{annotated}.hasValue() && {annotated}.value() in {names}"
        known_default = f"{ns_default}.hasValue() && {ns_default}.value() in {names}"
        valid = "use one of " + policy.class_names()
        unknown_annotation = (
            f"'unknown workload class ' + {py_repr(shorten(annotated + '.value()'))} + "
            f"{lit(f' in the pod annotation {WORKLOAD_ANNOTATION}: {valid}')}"
        )
        unknown_default = (
            f"'unknown workload class ' + {py_repr(shorten(ns_default + '.value()'))} + "
            f"' in the annotation {NAMESPACE_DEFAULT_ANNOTATION} of namespace ' + "
            f"{shorten('request.namespace')} + {lit(': ' + valid)}"
        )
        candidate_list = concat(
            [
                when(known_annotation, f"[{annotated}.value()]"),
                *(
                    when(matched, f"[{lit(rule.workload_class)}]")
                    for rule in policy.rules
                    if (matched := self._rule(rule, pods_only=pods_only)) != "false"
                ),
                *self._template_defaults(annotated, pods_only=pods_only),
                when(known_default, f"[{ns_default}.value()]"),
            ]
        )
        default = lit(policy.default_class or "")
        candidates = self.v("candidates")
        chosen = f"{candidates}[0]"
        for placement in (Placement.PREFER_PREEMPTIBLE, Placement.STANDARD):
            names_of = self.classes(placement)
            if names_of:
                group = lits(names_of)
                chosen = (
                    f"{candidates}.exists(c, c in {group}) ? "
                    f"{candidates}.filter(c, c in {group})[0] :\n  {chosen}"
                )
        found = [
            ("annotations", f"{self.v('template')}.?metadata.?annotations.orValue({{}})"),
            ("labels", f"{self.v('template')}.?metadata.?labels.orValue({{}})"),
            ("ownerKind", owner),
            ("annotated", f"{self.v('annotations')}[?{lit(WORKLOAD_ANNOTATION)}]"),
            (
                "namespaceDefault",
                "namespaceObject.?metadata.?annotations.orValue({})"
                f"[?{lit(NAMESPACE_DEFAULT_ANNOTATION)}]",
            ),
            (
                "unknownClasses",
                concat(
                    [
                        when(
                            f"{annotated}.hasValue() && !({known_annotation})",
                            f"[{unknown_annotation}]",
                        ),
                        when(
                            f"{ns_default}.hasValue() && !({known_default})", f"[{unknown_default}]"
                        ),
                    ]
                ),
            ),
            ("candidates", candidate_list),
            # classify: the stricter placement wins, the first source among equals.
            ("workloadClass", f"size({candidates}) == 0 ? {default} :\n  {chosen}"),
        ]
        return [(self.name(name), expression) for name, expression in found]

    def _from_templates(self, templates: Iterable[PodTemplate], *, pods_only: bool) -> str:
        """origins.of_pod: a pod its labels say comes from one of ``templates``. The
        templates of the kinds these policies check (Kubernetes' own) have no role and no
        default."""
        selectors = dict.fromkeys(
            all_of(
                [self._label_is(k, v) for k, v in t.selector.match_labels.items()]
                + [self._requirement(req) for req in t.selector.match_expressions]
            )
            for t in templates
        )
        found = any_of(selectors)
        pod = f"({self.subject}.kind == 'Pod' && {found})"
        return found if pods_only or found == "false" else pod

    def _template_defaults(self, annotated: str, *, pods_only: bool) -> list[str]:
        """classify._candidates: each template default of a pod without a class annotation,
        in the order of the templates (a class repeated changes nothing)."""
        found = (
            when(
                f"!{annotated}.hasValue() && {self._from_templates([t], pods_only=pods_only)}",
                f"[{lit(t.spec.default_class)}]",
            )
            for t in self.policy.pod_templates
            if t.spec.default_class is not None
        )
        return list(dict.fromkeys(found))

    def _rule(self, rule: Rule, *, pods_only: bool) -> str:
        """classify.rule_matches; a rule for template roles matches the pods that come from
        templates of those roles."""
        match = rule.match
        parts = []
        if match.template_roles:
            roles = [t for t in self.policy.pod_templates if t.spec.role in match.template_roles]
            parts.append(self._from_templates(roles, pods_only=pods_only))
        if match.namespaces:
            tests = []
            for pattern in match.namespaces:
                regex = glob_regex(pattern)
                tests.append(
                    f"request.namespace == {lit(pattern)}"
                    if regex is None
                    else f"request.namespace.matches({lit(regex)})"
                )
            parts.append(any_of(tests))
        parts += [self._label_is(k, v) for k, v in match.match_labels.items()]
        parts += [self._requirement(req) for req in match.match_expressions]
        if match.owner_kinds:
            parts.append(f"{self.v('ownerKind')} in {lits(match.owner_kinds)}")
        return "false" if "false" in parts else all_of(parts)

    def _label_is(self, key: str, value: str) -> str:
        labels = self.v("labels")
        return f"({lit(key)} in {labels} && {labels}[{lit(key)}] == {lit(value)})"

    def _requirement(self, req: LabelRequirement) -> str:
        labels = self.v("labels")
        present = f"{lit(req.key)} in {labels}"
        if req.operator == "Exists":
            return present
        if req.operator == "DoesNotExist":
            return f"!({present})"
        value_in = f"{labels}[{lit(req.key)}] in {lits(req.values)}"
        if req.operator == "In":
            return f"({present} && {value_in})"
        return f"(!({present}) || !({value_in}))"

    # --- node constraints (constraints.py) ----------------------------------------------------

    def _constraints(self) -> list[tuple[str, str]]:
        key = lit(self.key)
        exprs = f"t.?matchExpressions.orValue([]).filter(e, e.key == {key})"
        alive = all_of(
            [
                "(size(t.?matchExpressions.orValue([])) > 0 || "
                "size(t.?matchFields.orValue([])) > 0)",
                f"!({V}keyExpressions[i].exists(e, e.operator == 'Exists') && "
                f"{V}keyExpressions[i].exists(e, e.operator == 'DoesNotExist'))",
                f"!{V}keyExpressions[i].exists(e, e.operator in ['Gt', 'Lt'] && "
                f"!(size(e.?values.orValue([])) == 1 && e.values[0].matches({lit(INTEGER_RE)})))",
            ]
        )
        neighbours = (
            f"(e.operator in ['Gt', 'Lt'] && size(e.?values.orValue([])) == 1 && "
            f"e.values[0].matches({lit(INTEGER_RE)}) ? "
            "[string(int(e.values[0]) - 1), string(int(e.values[0]) + 1)] : [])"
        )
        selected = f"{V}selected"
        return [
            ("selected", f"{V}template.spec.?nodeSelector.orValue({{}})[?{key}]"),
            (
                "terms",
                f"{V}template.spec.?affinity.?nodeAffinity.?{REQUIRED}"
                ".?nodeSelectorTerms.orValue([])",
            ),
            # Per required term, its expressions on the label key, and whether it can match
            # any node at all (constraints.view: empty, conflicting or unbounded terms cannot).
            ("keyExpressions", f"{V}terms.map(t, {exprs})"),
            ("alive", f"{V}terms.transformList(i, t, {alive})"),
            ("liveTerms", f"{V}keyExpressions.transformList(i, x, {V}alive[i], x)"),
            # constraints.mentioned_values: every value of the key the pod names.
            (
                "mentioned",
                f"(({selected}.hasValue() ? [{selected}.value()] : []) + "
                f"{V}keyExpressions.flatten().map(e, e.?values.orValue([]) + {neighbours})"
                ".flatten()).distinct()",
            ),
        ]

    @staticmethod
    def term_admits(term: str, value: str) -> str:
        """TermView.admits for a string value: ``term`` lists a live term's expressions on
        the key."""
        bound = (
            f"(e.operator in ['Gt', 'Lt'] && !({value}.matches({lit(INTEGER_RE)}) && "
            f"(e.operator == 'Gt' ? int({value}) > int(e.values[0]) : "
            f"int({value}) < int(e.values[0]))))"
        )
        constant = literal_value(value)
        if constant is not None:
            # CEL folds constants when the policy is created: int('standard') would fail then.
            if re.fullmatch(INTEGER_RE.strip("^$"), constant):
                number = int(constant)
                bound = (
                    "(e.operator in ['Gt', 'Lt'] && !(e.operator == 'Gt' ? "
                    f"{number} > int(e.values[0]) : {number} < int(e.values[0])))"
                )
            else:
                bound = "e.operator in ['Gt', 'Lt']"
        return (
            f"!{term}.exists(e, e.operator == 'DoesNotExist' || "
            f"(e.operator == 'NotIn' && {value} in e.?values.orValue([])) || "
            f"(e.operator == 'In' && !({value} in e.?values.orValue([]))) || {bound})"
        )

    @staticmethod
    def term_admits_absent(term: str) -> str:
        """TermView.admits(None): a node without the label."""
        return f"!{term}.exists(e, e.operator in ['In', 'Exists', 'Gt', 'Lt'])"

    @staticmethod
    def term_admits_unnamed(term: str) -> str:
        """TermView.admits(UNNAMED_VALUE): a value no constraint names."""
        return f"!{term}.exists(e, e.operator in ['In', 'DoesNotExist', 'Gt', 'Lt'])"

    def admits(self, value: str) -> str:
        """NodeConstraints.admits: may the pod run on a node whose label is ``value``?"""
        selected = f"{V}selected"
        return (
            f"(!{selected}.hasValue() || {selected}.value() == {value}) && "
            f"(size({V}terms) == 0 || {V}liveTerms.exists(x, {self.term_admits('x', value)}))"
        )

    def admits_absent(self) -> str:
        return (
            f"!{V}selected.hasValue() && "
            f"(size({V}terms) == 0 || {V}liveTerms.exists(x, {self.term_admits_absent('x')}))"
        )

    # --- refusals -------------------------------------------------------------------------------

    def _constraint_names(self) -> str:
        selected = f"{V}selected"
        return (
            f"({selected}.hasValue() ? {lit(f'nodeSelector {self.key}=')} + "
            f"{shorten(selected + '.value()')} : 'required node affinity terms')"
        )

    def _matches_no_node(self, cls: str, needed: str) -> str:
        """placement._matches_no_node's message."""
        middle = (
            f" needs {needed}, but no node can meet the pod{chr(39)}s own node constraints: its "
            f"nodeSelector and required node affinity terms contradict each other on "
            f"{self.key}, or a term is empty (an empty term matches no node); make them admit "
            f"{needed}"
        )
        return f"'class ' + {cls} + {lit(middle)}"

    def _refusals(self) -> list[tuple[str, str]]:
        policy = self.policy
        cls = f"{V}workloadClass"
        where = f"{self.key}={self.preemptible}"
        terms_path = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
        merge = (
            f" terms, more than the {MAX_TERMS:,} preemptguard checks: merge them into fewer terms"
        )
        too_many_terms = (
            f"{lit(terms_path + ' has ')} + {thousands(f'size({V}terms)')} + {lit(merge)}"
        )
        values = (
            f" values of the label {self.key}, more than the {MAX_LABEL_VALUES} preemptguard "
            "checks (nodes carry one of two): name only the values your nodes carry"
        )
        too_many_values = (
            f"{lit(chr(39).join(['the pod', 's node constraints name ']))} + "
            f"{thousands(f'size({V}mentioned)')} + {lit(values)}"
        )
        too_large = (
            f"size({V}terms) > {MAX_TERMS} ? [{too_many_terms}] :\n"
            f"  size({V}mentioned) > {MAX_LABEL_VALUES} ? [{too_many_values}] : []"
        )
        excluded = (
            f" runs only on preemptible nodes ({where}), but they are excluded by the pod"
            f"{chr(39)}s "
        )
        instead = (
            ": remove that constraint, or use class "
            f"{classes_except(policy, Placement.PREEMPTIBLE)} instead"
        )
        excludes = f"'class ' + {cls} + {lit(excluded)} + {V}constraintNames + {lit(instead)}"
        kept_off = (
            f" pods are kept off {where} nodes), or use class "
            f"{classes_except(policy, Placement.STANDARD)} if the pod can be preempted"
        )
        requires = (
            f"'class ' + {cls} + ' must run on standard nodes, but the pod requires preemptible "
            f"capacity through its ' + {V}constraintNames + "
            f"': remove that requirement (' + {cls} + {lit(kept_off)}"
        )
        non_preemptible = any_of(
            [
                self.admits_absent(),
                self.admits(lit(self.standard)) if self.standard != self.preemptible else "",
                f"{V}mentioned.exists(v, v != {lit(self.preemptible)} && {self.admits('v')})",
            ],
            separator=" ||\n",
        )
        placement = concat(
            [
                when(
                    f"{self.is_class(cls, Placement.PREEMPTIBLE)} && !{V}admitsPreemptible",
                    f"[{V}admitsNonPreemptible ? {excludes} : "
                    f"{self._matches_no_node(cls, f'{where} nodes')}]",
                ),
                when(
                    f"{self.is_class(cls, Placement.STANDARD)} && !{V}admitsNonPreemptible",
                    f"[{V}admitsPreemptible ? {requires} : "
                    f"{self._matches_no_node(cls, f'nodes other than {where}')}]",
                ),
            ]
        )
        checkpoint = f"{V}checkpoint"
        maximum, margin = policy.max_grace_seconds, policy.checkpoint_margin_seconds
        whole = f"annotation {CHECKPOINT_ANNOTATION} must be a whole number of seconds, got "
        not_a_number = (
            f"{lit(whole)} + {py_repr(shorten(checkpoint + '.value()'))} + "
            "': write the time a full checkpoint takes, e.g. \"120\"'"
        )
        seconds = f"{V}checkpointSeconds"
        removed = (
            f" s, more than the {maximum} s a preemptible node gives before it is removed: "
            f"checkpoint in pieces that take at most {maximum - margin} s, or use a class that "
            "runs on standard nodes"
        )
        too_long = (
            f"{lit(f'the declared checkpoint ({CHECKPOINT_ANNOTATION}: ')} + string({seconds}) + "
            f"') plus the {margin} s margin needs ' + string({seconds} + {margin}) + {lit(removed)}"
        )
        grace = f"{V}template.spec.?terminationGracePeriodSeconds"
        negative = (
            f"{lit(f'{GRACE_FIELD} must be a non-negative whole number of seconds, got ')} + "
            f"string({grace}.value())"
        )
        grace_refusals = concat(
            [
                when(f"{checkpoint}.hasValue() && !{V}checkpointValid", f"[{not_a_number}]"),
                when(f"{V}checkpointValid && {seconds} + {margin} > {maximum}", f"[{too_long}]"),
                when(f"{grace}.orValue(0) < 0", f"[{negative}]"),
            ]
        )
        preemptible_classes = self.is_class(
            cls, Placement.PREEMPTIBLE, Placement.PREFER_PREEMPTIBLE
        )
        return [
            ("constraintNames", self._constraint_names()),
            ("admitsPreemptible", self.admits(lit(self.preemptible))),
            ("admitsNonPreemptible", non_preemptible),
            ("checkpoint", f"{V}annotations[?{lit(CHECKPOINT_ANNOTATION)}]"),
            (
                "checkpointValid",
                f"{checkpoint}.hasValue() && {checkpoint}.value().matches({lit(WHOLE_SECONDS_RE)})",
            ),
            (
                "checkpointSeconds",
                f"{V}checkpointValid ? int({checkpoint}.value().find('[0-9]+')) : 0",
            ),
            ("tooLarge", too_large),
            (
                "refusals",
                f"size({V}unknownClasses) > 0 ? {V}unknownClasses :\n"
                f"{cls} == '' ? [] :\n"
                f"size({V}tooLarge) > 0 ? {V}tooLarge :\n"
                f"{placement} +\n"
                f"({preemptible_classes} ? {grace_refusals} : [])",
            ),
        ]
