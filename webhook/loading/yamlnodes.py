"""YAML read with the line of every value, so errors can point at the file and line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Located:
    """A YAML document as plain data, plus the 1-based line of each path in it."""

    value: Any
    lines: dict[Path_, int]

    def line_of(self, path: Sequence[str | int]) -> int:
        """The line of the deepest known ancestor of ``path`` (1 when nothing is known)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return 1


def bounded_int(loader: Any, node: yaml.ScalarNode) -> Any:
    """YAML's int constructor, refusing (with the line) what Python will not convert: digit
    strings over its 4,300-digit limit."""
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:
        problem = f"the number {node.value[:20]}... has too many digits for any Kubernetes field"
        raise ConstructorError(None, None, problem, node.start_mark) from None


class PolicyLoader(yaml.SafeLoader):
    """The safe loader with ``bounded_int``."""


PolicyLoader.add_constructor("tag:yaml.org,2002:int", bounded_int)


def compose_documents(text: str) -> list[Located]:
    """Every document of a YAML stream with line numbers; raises ``yaml.YAMLError``."""
    loader = PolicyLoader(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said a document follows
            problem = alias_problem(node)
            if problem is not None:
                raise ConstructorError(None, None, problem[0], _mark(problem[1]))
            lines: dict[Path_, int] = {}
            docs.append(Located(_construct(loader, node, (), lines), lines))
        return docs
    finally:
        loader.dispose()


def _construct(
    loader: yaml.SafeLoader, node: yaml.Node, path: Path_, lines: dict[Path_, int]
) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        refuse_duplicate_keys(node)
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _mapping_key(loader, key_node)
            out[key] = _construct(loader, value_node, (*path, key), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(loader, item, (*path, i), lines) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def _mapping_key(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    key = loader.construct_object(node, deep=True)
    if key is not None and not isinstance(key, str | int | float | bool):
        raise ConstructorError(None, None, "a key must be a plain value", node.start_mark)
    return key


def refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """Raise on a key written twice in one mapping, as kubectl does: YAML would keep only the
    last, so a second ``nodeSelector:`` would silently replace the first. Checked before merge
    keys (``<<``) are flattened in, which a mapping's own keys may override."""
    texts = [key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)]
    if len(set(texts)) == len(texts):  # nearly always: nothing written twice, as text
        return
    seen: set[tuple[str, str]] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            key = (key_node.tag, key_node.value)
            if key in seen:
                problem = f"duplicate key {key_node.value!r}"
                raise ConstructorError(None, None, problem, key_node.start_mark)
            seen.add(key)


def _mark(line: int) -> yaml.Mark:
    return yaml.Mark("", 0, line - 1, 0, None, 0)


def problem_line(error: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML syntax error points at, when it says."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return None if mark is None else int(mark.line) + 1


# An alias expands to a copy of its anchor everywhere the engine copies or walks a document;
# past this many nodes a small file is an "alias bomb" (kubectl refuses those too).
MAX_EXPANDED_NODES = 1_000_000


def alias_problem(root: yaml.Node) -> tuple[str, int] | None:
    """Why a composed document cannot be used, and the 1-based line to fix: an anchor holding
    an alias to itself, or aliases expanding to more than ``MAX_EXPANDED_NODES`` values."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the path from the root to the node being expanded
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids = _children(node)
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                return f"aliases expand to more than {MAX_EXPANDED_NODES:,} values", _line(root)
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for kid in kids:
            if id(kid) in open_nodes:
                return f"the anchor at line {_line(kid)} contains an alias to itself", _line(kid)
            stack.append((kid, False))
    return None


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
