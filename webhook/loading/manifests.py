"""Read Kubernetes objects from YAML/JSON files, folders and stdin, keeping where each was read."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from webhook.engine.decision import Obj
from webhook.engine.podshape import describe
from webhook.engine.workloads import mapping_at, string_map
from webhook.loading import jsondoc
from webhook.loading.yamlnodes import (
    alias_problem,
    bounded_int,
    problem_line,
    refuse_duplicate_keys,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"

# libyaml parses many times faster than the pure-Python parser; fall back when it is absent.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        refuse_duplicate_keys(node)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


_Loader.add_constructor("tag:yaml.org,2002:int", bounded_int)

# What one input (a file, stdin) may hold: far more than any manifest set, and a stop for
# an endless one (/dev/zero, a pipe that never closes) before it fills memory.
MAX_INPUT_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Document:
    """One Kubernetes object and where it was read."""

    obj: Obj
    source: str
    line: int


@dataclass(frozen=True)
class InputError:
    """Input that could not be read as Kubernetes objects; ``str()`` says where and what to fix."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


@dataclass
class Manifests:
    documents: list[Document] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)

    def namespace_annotations(self) -> dict[str, dict[str, str]]:
        """Annotations of the Namespace objects in the input, by namespace name."""
        found: dict[str, dict[str, str]] = {}
        for doc in self.documents:
            meta = mapping_at(doc.obj, "metadata")
            if doc.obj.get("kind") == "Namespace" and isinstance(meta.get("name"), str):
                found[meta["name"]] = string_map(meta.get("annotations"))
        return found


def load_manifests(paths: Sequence[str], stdin: TextIO) -> Manifests:
    """Every object in ``paths`` (files, folders searched recursively, ``-`` for stdin)."""
    out = Manifests()
    for source, text in _texts(paths, stdin, out.errors):
        _parse(source, text, out)
    return out


def _texts(
    paths: Sequence[str], stdin: TextIO, errors: list[InputError]
) -> Iterator[tuple[str, str]]:
    for raw in paths:
        if raw == STDIN:
            text = _read_stdin(stdin, errors)
            if text is not None:
                yield "<stdin>", text
            continue
        path = Path(raw)
        files = _folder_files(path) if path.is_dir() else [path]
        if path.is_dir() and not files:
            errors.append(
                InputError(raw, None, f"no {', '.join(MANIFEST_SUFFIXES)} files in this folder")
            )
        for file in files:
            text = _read_file(file, errors)
            if text is not None:
                yield str(file), text


def _read_file(path: Path, errors: list[InputError]) -> str | None:
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        errors.append(InputError(str(path), None, f"cannot read: {exc.strerror or exc}"))
        return None
    return _decoded(str(path), data, errors)


def _read_stdin(stdin: TextIO, errors: list[InputError]) -> str | None:
    binary = getattr(stdin, "buffer", None)
    if binary is not None:
        return _decoded("<stdin>", binary.read(MAX_INPUT_BYTES + 1), errors)
    text = stdin.read(MAX_INPUT_BYTES + 1)
    try:
        # Undecodable bytes arrive as surrogates when the locale is not UTF-8.
        text.encode("utf-8")
    except UnicodeEncodeError:
        errors.append(InputError("<stdin>", None, "cannot read: not UTF-8 text"))
        return None
    return _within_limit("<stdin>", text, len(text), errors)


def _decoded(source: str, data: bytes, errors: list[InputError]) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        errors.append(InputError(source, None, f"cannot read: not UTF-8 text (byte {exc.start})"))
        return None
    return _within_limit(source, text, len(data), errors)


def _within_limit(source: str, text: str, size: int, errors: list[InputError]) -> str | None:
    if size <= MAX_INPUT_BYTES:
        return text
    limit = f"{MAX_INPUT_BYTES // 2**20} MiB"
    errors.append(
        InputError(source, None, f"more than {limit}: not read; split it into smaller files")
    )
    return None


def _folder_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())


def _parse(source: str, text: str, out: Manifests) -> None:
    if source.endswith(".json"):
        _parse_json(source, text, out)
        return
    loader = _Loader(text)
    # Anchors are rare in manifests: look for a recursive or exploding alias only where the
    # text could hold one.
    check_aliases = "&" in text
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1
            problem = alias_problem(node) if check_aliases else None
            if problem is not None:
                message, at = problem
                out.errors.append(InputError(source, at, f"not usable YAML: {message}"))
                continue
            _add(source, line, loader.construct_document(node), out)
    except yaml.YAMLError as exc:
        reason = getattr(exc, "problem", None) or str(exc)
        out.errors.append(InputError(source, problem_line(exc), f"not valid YAML: {reason}"))
    except RecursionError:
        out.errors.append(InputError(source, None, "not usable YAML: nested too deeply"))
    finally:
        loader.dispose()


def _parse_json(source: str, text: str, out: Manifests) -> None:
    try:
        value = jsondoc.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        out.errors.append(InputError(source, exc.lineno, f"not valid JSON: {exc.msg}"))
        return
    except ValueError as exc:  # a duplicate key, or an error in a deeply nested document
        out.errors.append(InputError(source, None, f"not valid JSON: {exc}"))
        return
    _add(source, 1, value, out)


class _DuplicateKey(ValueError):
    """A key written twice in one JSON object; ``str()`` names it."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse a key written twice, as for YAML: the second would silently win."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key {key[:100]!r}")
            seen.add(key)
    return obj


def _add(source: str, line: int, value: Any, out: Manifests, where: str = "") -> None:
    if value is None and not where:
        return
    if not isinstance(value, dict):
        problem = f"{where}a document must be a Kubernetes object, not {describe(value)}"
        out.errors.append(InputError(source, line, problem))
        return
    items = value.get("items")
    if _is_list(value) and isinstance(items, list):
        # kubectl prints `kind: List`; the API returns PodList, DeploymentList, ...
        for i, item in enumerate(items):
            _add(source, line, item, out, f"{where}items[{i}]: ")
        return
    invalid = _object_problem(value)
    if invalid:
        out.errors.append(InputError(source, line, where + invalid))
    else:
        out.documents.append(Document(value, source, line))


def _is_list(obj: Obj) -> bool:
    kind = obj.get("kind")
    return isinstance(kind, str) and kind.endswith("List")


def _object_problem(obj: Obj) -> str | None:
    missing = [f for f in ("apiVersion", "kind") if not isinstance(obj.get(f), str) or not obj[f]]
    if missing:
        return f"not a Kubernetes object: {' and '.join(missing)} missing; every object needs both"
    if not isinstance(obj.get("metadata", {}), dict):
        return f"{obj['kind']}: metadata must be a mapping"
    return None
