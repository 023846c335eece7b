"""YAML read with the line of every value, so errors can point at the file and line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

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


def compose_documents(text: str) -> list[Located]:
    """Every document of a YAML stream with line numbers; raises ``yaml.YAMLError``."""
    loader = yaml.SafeLoader(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said a document follows
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
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            out[key] = _construct(loader, value_node, (*path, key), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(loader, item, (*path, i), lines) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def problem_line(error: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML syntax error points at, when it says."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return None if mark is None else int(mark.line) + 1
