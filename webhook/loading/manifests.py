"""Read Kubernetes objects from YAML/JSON files, folders and stdin, keeping where each was read.

Objects come as a stream (``read``): each is handed on as soon as it is read, so a run over
many objects holds one at a time. Namespace and PriorityClass objects are also found ahead of
the stream (``read_ahead``), since an object anywhere in the input may be in a namespace, or
name a priority class, that a later document declares, as ``kubectl apply -f app/ -f
namespaces.yaml`` allows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

import yaml

from webhook.engine.decision import Obj
from webhook.engine.podshape import describe
from webhook.loading import jsondoc
from webhook.loading.yamlnodes import (
    alias_problem,
    bounded_int,
    problem_line,
    refuse_duplicate_keys,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"

# libyaml parses many times faster than the pure-Python parser; fall back when it is absent.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Loader(_BaseLoader):  # type: ignore[misc]
    # What a plain scalar resolves to (str, int, bool, ...) depends on its text only, and
    # manifests repeat the same keys and values: remembered, up to a bound.
    _resolved: ClassVar[dict[tuple[str, Any], str]] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or len(value) > 64:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(self._resolved) < 100_000:
                self._resolved[key] = tag
        return tag


_Loader.add_constructor("tag:yaml.org,2002:int", bounded_int)

# What one input (a file, stdin) may hold: far more than any manifest set, and a stop for
# an endless one (/dev/zero, a pipe that never closes) before it fills memory.
MAX_INPUT_BYTES = 64 * 2**20


@dataclass(frozen=True, kw_only=True)
class Document:
    """One Kubernetes object and where it was read."""

    obj: Obj
    source: str
    line: int


@dataclass(frozen=True, kw_only=True)
class InputError:
    """Input that could not be read as Kubernetes objects; ``str()`` says where and what to fix."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


Item = Document | InputError


@dataclass(frozen=True, kw_only=True)
class Source:
    """One input: a file, read each time its text is asked for, or stdin, read once."""

    name: str
    path: Path | None = None
    stdin_text: str | None = None

    def text(self) -> str | InputError:
        if self.path is None:
            return self.stdin_text or ""
        return _read_file(self.path)


@dataclass(kw_only=True)
class Manifests:
    """Every document and error of an input, read at once (for small inputs and tests)."""

    documents: list[Document] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def load_manifests(paths: Sequence[str], stdin: TextIO) -> Manifests:
    """Every object in ``paths`` (files, folders searched recursively, ``-`` for stdin)."""
    out = Manifests()
    for item in read(sources(paths, stdin)):
        if isinstance(item, Document):
            out.documents.append(item)
        else:
            out.errors.append(item)
    return out


def sources(paths: Sequence[str], stdin: TextIO) -> list[Source | InputError]:
    """The inputs named by ``paths``: files, the files of folders, stdin (read now)."""
    found: list[Source | InputError] = []
    for raw in paths:
        if raw == STDIN:
            text = _read_stdin(stdin)
            found.append(
                text if isinstance(text, InputError) else Source(name=STDIN_NAME, stdin_text=text)
            )
            continue
        path = Path(raw)
        files = _folder_files(path) if path.is_dir() else [path]
        if path.is_dir() and not files:
            problem = f"no {', '.join(MANIFEST_SUFFIXES)} files in this folder"
            found.append(InputError(source=raw, line=None, message=problem))
        found += [Source(name=str(file), path=file) for file in files]
    return found


def read(inputs: Iterable[Source | InputError]) -> Iterator[Item]:
    """Every object and every problem of ``inputs``, in order, one at a time."""
    for source in inputs:
        if isinstance(source, InputError):
            yield source
            continue
        text = source.text()
        if isinstance(text, InputError):
            yield text
        elif source.name.endswith(".json"):
            yield from _parse_json(source.name, text)
        else:
            yield from _parse_yaml(source.name, text)


# Kinds whose objects change how others are judged: read ahead, wherever they stand.
READ_AHEAD_KINDS = frozenset({"Namespace", "PriorityClass"})
# A document that may declare one, or a List holding one: worth reading ahead. Every style
# (block, flow, JSON) writes the kind as the word itself, unless escapes spell it; a document
# with neither cannot hold one. Reading ahead one that holds none costs time; missing one would
# change verdicts.
_MAY_HOLD_READ_AHEAD = re.compile(r"Namespace|PriorityClass|\\")
_DOCUMENT_START = re.compile(r"(?m)^---")


def read_ahead(inputs: Iterable[Source | InputError]) -> Iterator[Obj]:
    """The Namespace and PriorityClass objects of ``inputs``, read ahead: only the documents
    that can hold one are parsed, and problems are left for ``read`` to report."""
    for source in inputs:
        if isinstance(source, InputError):
            continue
        text = source.text()
        if not isinstance(text, str):
            continue
        if source.name.endswith(".json"):
            chunks = [text] if _MAY_HOLD_READ_AHEAD.search(text) else []
        else:
            chunks = [c for c in _DOCUMENT_START.split(text) if _MAY_HOLD_READ_AHEAD.search(c)]
        for chunk in chunks:
            parse = _parse_json if source.name.endswith(".json") else _parse_yaml
            for item in parse(source.name, chunk):
                if isinstance(item, Document) and item.obj.get("kind") in READ_AHEAD_KINDS:
                    yield item.obj


def _read_file(path: Path) -> str | InputError:
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        message = f"cannot read: {exc.strerror or exc}"
        return InputError(source=str(path), line=None, message=message)
    return _decoded(str(path), data)


def _read_stdin(stdin: TextIO) -> str | InputError:
    binary = getattr(stdin, "buffer", None)
    if binary is not None:
        return _decoded(STDIN_NAME, binary.read(MAX_INPUT_BYTES + 1))
    text = stdin.read(MAX_INPUT_BYTES + 1)
    try:
        # Undecodable bytes arrive as surrogates when the locale is not UTF-8.
        text.encode("utf-8")
    except UnicodeEncodeError:
        return InputError(source=STDIN_NAME, line=None, message="cannot read: not UTF-8 text")
    return _within_limit(STDIN_NAME, text, len(text))


def _decoded(source: str, data: bytes) -> str | InputError:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"cannot read: not UTF-8 text (byte {exc.start})"
        return InputError(source=source, line=None, message=message)
    return _within_limit(source, text, len(data))


def _within_limit(source: str, text: str, size: int) -> str | InputError:
    if size <= MAX_INPUT_BYTES:
        return text
    limit = f"{MAX_INPUT_BYTES // 2**20} MiB"
    message = f"more than {limit}: not read; split it into smaller files"
    return InputError(source=source, line=None, message=message)


def _folder_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())


def _parse_yaml(source: str, text: str) -> Iterator[Item]:
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
                yield InputError(source=source, line=at, message=f"not usable YAML: {message}")
                continue
            yield from _objects(source, line, _python(loader, node))
    except yaml.YAMLError as exc:
        reason = getattr(exc, "problem", None) or str(exc)
        yield InputError(source=source, line=problem_line(exc), message=f"not valid YAML: {reason}")
    except RecursionError:
        yield InputError(source=source, line=None, message="not usable YAML: nested too deeply")
    finally:
        loader.dispose()


def _python(loader: Any, root: yaml.Node) -> Any:
    """The value of a composed document: what ``construct_document`` makes, with the checks
    of ``refuse_duplicate_keys``, made directly (strings, the most of any manifest, as they
    are) and shared where an alias repeats an anchor."""
    try:
        return _Values(loader).of(root)
    finally:
        # construct_object remembers each node it made a value for, document after document.
        loader.constructed_objects.clear()


class _Values:
    """The values of one document's nodes. A class rather than a recursive closure: a closure
    that calls itself is a reference cycle, which would keep every object of the document
    alive until the cyclic collector ran (and ``check`` pauses it)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.made: dict[int, Any] = {}

    def of(self, node: yaml.Node) -> Any:
        if node.__class__ is yaml.ScalarNode:
            return node.value if node.tag == _STR_TAG else self.loader.construct_object(node)
        known = self.made.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.SequenceNode):
            items: list[Any] = []
            self.made[id(node)] = items
            items.extend(self.of(item) for item in node.value)
            return items
        assert isinstance(node, yaml.MappingNode)
        refuse_duplicate_keys(node)
        if any(key.tag == _MERGE_TAG for key, _ in node.value):
            self.loader.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        self.made[id(node)] = mapping
        for key_node, value_node in node.value:
            key = self.of(key_node)
            if isinstance(key, dict | list):
                problem = "found a mapping or a list as a key; keys must be plain values"
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            mapping[key] = self.of(value_node)
        return mapping


def _parse_json(source: str, text: str) -> Iterator[Item]:
    try:
        value = jsondoc.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        yield InputError(source=source, line=exc.lineno, message=f"not valid JSON: {exc.msg}")
        return
    except ValueError as exc:  # a duplicate key, or an error in a deeply nested document
        yield InputError(source=source, line=None, message=f"not valid JSON: {exc}")
        return
    yield from _objects(source, 1, value)


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


def _objects(source: str, line: int, value: Any, where: str = "") -> Iterator[Item]:
    if value is None and not where:
        return
    if not isinstance(value, dict):
        problem = f"{where}a document must be a Kubernetes object, not {describe(value)}"
        yield InputError(source=source, line=line, message=problem)
        return
    items = value.get("items")
    if _is_list(value) and isinstance(items, list):
        # kubectl prints `kind: List`; the API returns PodList, DeploymentList, ...
        for i, item in enumerate(items):
            yield from _objects(source, line, item, f"{where}items[{i}]: ")
        return
    invalid = _object_problem(value)
    if invalid:
        yield InputError(source=source, line=line, message=where + invalid)
    else:
        yield Document(obj=value, source=source, line=line)


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
