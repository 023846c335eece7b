"""Read Kubernetes objects from YAML/JSON files, folders and stdin, keeping where each was read.

Objects come as a stream (``read``): each is handed on as soon as it is read, so a run over
many objects holds one at a time. Namespace and PriorityClass objects are also found ahead of
the stream (``read_ahead``), since an object anywhere in the input may be in a namespace, or
name a priority class, that a later document declares, as ``kubectl apply -f app/ -f
namespaces.yaml`` allows.

No input is held whole (a JSON file aside: it is one value, parsed at once). Each is read in
blocks, first to check it (its size, that it is UTF-8 text) and to find the documents that
may declare a Namespace or PriorityClass, then again by libyaml, which reads the file itself.
An input that cannot be read twice (stdin, a pipe such as ``-f <(kubectl get ...)``, a
device) is copied to a temporary file as it is first read, and read again from there.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import stat
import tempfile
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol, TextIO

import yaml

from webhook.engine.decision import Obj
from webhook.engine.findings import shorten
from webhook.engine.podshape import describe
from webhook.loading import goyaml, jsondoc
from webhook.loading.yamlnodes import (
    alias_problem,
    problem_line,
    refuse_duplicate_keys,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"

# libyaml parses many times faster than the pure-Python parser; fall back when it is absent.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = goyaml.STR_TAG
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_Scalar, _Sequence = yaml.ScalarNode, yaml.SequenceNode
assert not _BaseLoader.yaml_path_resolvers


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader reading scalars as kubectl does (``goyaml``), with the calls it makes
    for every node made cheap. No path resolver is registered, so what a node resolves to
    depends on its kind and text alone, and the composer's descending and ascending track
    nothing: they are C callables doing nothing."""

    # Go's YAML types, not YAML 1.1's (see goyaml).
    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, Any]]]] = {}

    # Plain scalars that a resolver may claim ("300", "true", "nvidia.com/gpu") repeat from
    # object to object: what each resolves to is remembered, up to a bound (names, unique to
    # each object, would otherwise fill it).
    _resolved: ClassVar[dict[str, str]] = {}

    descend_resolver = slice  # called as (parent, index): makes a slice object, dropped
    ascend_resolver = tuple  # called without arguments: the empty tuple

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not _Scalar:
            return _SEQ_TAG if kind is _Sequence else _MAP_TAG
        if not implicit[0]:
            return _STR_TAG  # quoted
        if value[:1] not in _NUMERIC_FIRST:
            return _WORD_TAGS.get(value, _STR_TAG)  # text, unless y, null, ...
        tag = self._resolved.get(value)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(self._resolved) < 10_000 and len(value) <= 64:
                self._resolved[value] = tag
        return tag


for _tag, _pattern, _first in goyaml.IMPLICIT:
    _Loader.add_implicit_resolver(_tag, _pattern, _first)
_NUMERIC_FIRST, _WORD_TAGS = goyaml.NUMERIC_FIRST, goyaml.WORD_TAGS
# Every resolver is for words or for what starts as a number (see _Loader.resolve).
assert set(_Loader.yaml_implicit_resolvers) <= _NUMERIC_FIRST | {w[:1] for w in _WORD_TAGS}
for _known, _construct in goyaml.CONSTRUCTORS.items():
    _Loader.add_constructor(_known, _construct)

# What one input (a file, stdin) may hold: far more than any manifest set, and a stop for
# an endless one (/dev/zero, a pipe that never closes) before it fills memory or disk.
MAX_INPUT_BYTES = 64 * 2**20
# How much of an input is checked at a time.
_BLOCK = 2**20


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


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Input(_Readable, Protocol):
    def seek(self, offset: int, /) -> int: ...

    def close(self) -> None: ...


@dataclass(kw_only=True, eq=False)
class Source:
    """One input: a file, or stdin (``path`` None). Read through once to check it
    (``problem``), which also finds the documents worth reading ahead; then read again from
    its start as often as asked (``open``)."""

    name: str
    path: Path | None = None
    stdin: TextIO | None = None
    # Stdin, or a file that is not a regular file, copied as it is first read.
    _spool: IO[bytes] | None = field(default=None, init=False, repr=False)
    _checked: bool = field(default=False, init=False, repr=False)
    _problem: InputError | None = field(default=None, init=False, repr=False)
    # Where the documents that may declare a Namespace or PriorityClass are: (start, end).
    _ahead: list[tuple[int, int]] = field(default_factory=list, init=False, repr=False)

    def problem(self) -> InputError | None:
        """Why this input cannot be read (unreadable, too large, not UTF-8), if it cannot."""
        if not self._checked:
            self._checked = True
            try:
                self._problem = self._check()
            except OSError as exc:
                self._problem = self._error(None, f"cannot read: {exc.strerror or exc}")
            except UnicodeEncodeError:
                # A text stdin holds undecodable bytes as surrogates when the locale is not
                # UTF-8.
                self._problem = self._error(None, "cannot read: not UTF-8 text")
        return self._problem

    def ahead(self) -> list[tuple[int, int]]:
        """Where the documents that may hold a Namespace or PriorityClass are: byte offsets."""
        return [] if self.problem() is not None else self._ahead

    def open(self) -> _Input:
        """The input from its start (once ``problem`` has said it can be read)."""
        if self._spool is not None:
            return _SpoolReader(self._spool)
        assert self.path is not None
        return self.path.open("rb")

    def _check(self) -> InputError | None:
        if self.path is None:
            binary = getattr(self.stdin, "buffer", None)
            return self._scan(binary if binary is not None else _Encoded(self.stdin), spool=True)
        with self.path.open("rb") as file:
            return self._scan(file, spool=not stat.S_ISREG(os.fstat(file.fileno()).st_mode))

    def _error(self, line: int | None, message: str) -> InputError:
        return InputError(source=self.name, line=line, message=message)

    def _scan(self, raw: _Readable, *, spool: bool) -> InputError | None:
        """Read ``raw`` through in blocks, copying it to a spool if asked: its size, its
        encoding, and where the documents worth reading ahead are."""
        if spool:
            # Read once only: kept for the reads that follow, gone with this source.
            self._spool = tempfile.TemporaryFile()  # noqa: SIM115 - kept open, see finalize
            weakref.finalize(self, self._spool.close)
        scan = _Scan(whole=self.name.endswith(".json"))
        total = 0
        while True:
            block = raw.read(min(_BLOCK, MAX_INPUT_BYTES + 1 - total))
            if self._spool is not None:
                self._spool.write(block)
            total += len(block)
            last = not block or total > MAX_INPUT_BYTES
            bad = scan.feed(block, last=last)
            if bad is not None:
                line, message = bad
                return self._error(line, message)
            if last:
                break
        if total > MAX_INPUT_BYTES:
            return self._error(None, _TOO_LARGE)
        self._ahead = scan.finish()
        if self._spool is not None:
            self._spool.flush()
        return None


class _Scan:
    """One pass over an input, a block at a time: that it is UTF-8, and where the documents
    that may declare a Namespace or PriorityClass are. A document starts at each line
    beginning with ``---``; a JSON input (``whole``) is one document."""

    def __init__(self, *, whole: bool) -> None:
        self.whole = whole
        self.data = b""  # the bytes being looked at; data[:done] were looked at before
        self.done = 0
        self.offset = 0  # where data starts in the input
        self.lines = 0  # newlines before data[done]
        self.doc_start, self.doc_may = 0, False
        self.ahead: list[tuple[int, int]] = []

    def feed(self, block: bytes, *, last: bool) -> tuple[int, str] | None:
        """Look at the next block; the line and message of a byte that is not UTF-8."""
        # The last few bytes looked at stay ahead of the new ones: a word that a cut between
        # blocks went through is found whole.
        keep = min(self.done, _LOOKBEHIND)
        self.offset += self.done - keep
        self.data = self.data[self.done - keep :] + block
        self.done = keep
        cut = len(self.data) if last else _cut(self.data, self.done)
        bad = self._not_utf8(cut)
        if bad is not None:
            return bad
        self._documents(cut)
        self.lines += self.data.count(b"\n", self.done, cut)
        self.done = cut
        return None

    def finish(self) -> list[tuple[int, int]]:
        """Where the documents worth reading ahead are: (start, end) byte offsets."""
        if self.doc_may:
            self.ahead.append((self.doc_start, self.offset + len(self.data)))
        return self.ahead

    def _not_utf8(self, cut: int) -> tuple[int, str] | None:
        data, done = self.data, self.done
        if data.isascii():
            return None
        try:
            data[done:cut].decode()
        except UnicodeDecodeError as exc:
            at = done + exc.start
            line = self.lines + data.count(b"\n", done, at) + 1
            return line, f"cannot read: not UTF-8 text (byte {self.offset + at})"
        return None

    def _documents(self, cut: int) -> None:
        """Note each document that ends before ``cut`` and holds one of the words."""
        data, offset = self.data, self.offset
        # Where the words that make a document worth reading ahead stand, last first.
        words = _positions(data, _READ_AHEAD_WORDS, 0, cut)
        if not self.whole:
            at_start = offset == self.done == 0 and cut >= 3 and data.startswith(b"---")
            start = 0 if at_start else _line_start(data, self.done, cut)
            while start >= 0:
                while words and words[-1] < start:
                    words.pop()
                    self.doc_may = True
                if self.doc_may:
                    self.ahead.append((self.doc_start, offset + start))
                self.doc_start, self.doc_may = offset + start + 3, False
                start = _line_start(data, start + 1, cut)
        self.doc_may = self.doc_may or bool(words)


_TOO_LARGE = f"more than {MAX_INPUT_BYTES // 2**20} MiB: not read; split it into smaller files"


# Longer than any of _READ_AHEAD_WORDS.
_LOOKBEHIND = 16


def _positions(data: bytes, words: tuple[bytes, ...], start: int, end: int) -> list[int]:
    """Where ``words`` stand in ``data[start:end]``, last first."""
    found = []
    for word in words:
        at = data.find(word, start, end)
        while at >= 0:
            found.append(at)
            at = data.find(word, at + 1, end)
    found.sort(reverse=True)
    return found


def _line_start(data: bytes, start: int, end: int) -> int:
    """Where the first line beginning with ``---`` at or after ``start``, and before ``end``,
    begins (``data[start - 1]`` is the byte before ``start``); -1 if none does."""
    at = data.find(b"\n---", max(start - 1, 0), end + 2)
    return -1 if at < 0 else at + 1


def _cut(data: bytes, start: int) -> int:
    """Where to stop looking at ``data`` for now: after its last newline (the rest of the line
    waits for the next block), else, for a line longer than a block, before its last
    character, which may be incomplete; never before a line's first 3 bytes (``---``)."""
    newline = data.rfind(b"\n", start)
    if newline >= 0:
        return newline + 1
    cut = len(data)
    for _ in range(4):  # a character is at most 4 bytes: back over its continuation bytes
        if cut <= start or data[cut - 1] & 0xC0 != 0x80:
            break
        cut -= 1
    if cut > start and data[cut - 1] >= 0xC0:
        cut -= 1
    return cut if cut - start >= 3 else start


class _SpoolReader:
    """The spool of an input read once, from its start, at a position of its own."""

    def __init__(self, spool: IO[bytes]) -> None:
        self.spool, self.position = spool, 0

    def read(self, size: int) -> bytes:
        self.spool.seek(self.position)
        data = self.spool.read(size)
        self.position += len(data)
        return data

    def seek(self, position: int) -> int:
        self.position = position
        return position

    def close(self) -> None:
        pass


class _Encoded:
    """A text stream (stdin when it has no binary buffer) as UTF-8 bytes."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def read(self, size: int) -> bytes:
        # Up to 4 bytes a character: a block of characters never makes more than ``size``.
        return b"" if self.stream is None else self.stream.read(max(size // 4, 1)).encode()


class _Reader:
    """An input as libyaml reads it, in blocks: it stops (as if at the end) past
    ``MAX_INPUT_BYTES``, and notes each line with an ``&``, where an anchor may stand."""

    def __init__(self, stream: _Readable, name: str) -> None:
        self.stream = stream
        self.name = name  # named in libyaml's messages
        self.size = 0
        self.over = False
        self.newlines = 0
        self.ampersand_lines: deque[int] = deque()

    def read(self, size: int) -> bytes:
        if self.over:
            return b""
        data = self.stream.read(size)
        self.size += len(data)
        if self.size > MAX_INPUT_BYTES:
            self.over = True
            return b""
        lines = self.ampersand_lines
        line, counted = self.newlines + 1, 0
        at = data.find(b"&")
        while at >= 0:
            line += data.count(b"\n", counted, at)  # newlines counted once: linear in data
            counted = at
            if not lines or lines[-1] != line:  # a line once, however many it holds
                lines.append(line)
            at = data.find(b"&", at + 1)
        self.newlines += data.count(b"\n")
        return data

    def may_alias(self, first: int, last: int) -> bool:
        """Whether an ``&`` was read on lines ``first`` to ``last``; lines are read in order."""
        lines = self.ampersand_lines
        while lines and lines[0] < first:
            lines.popleft()
        return bool(lines) and lines[0] <= last


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
    """The inputs named by ``paths``: files, the files of folders, stdin."""
    found: list[Source | InputError] = []
    for raw in paths:
        if raw == STDIN:
            found.append(Source(name=STDIN_NAME, stdin=stdin))
            continue
        path = Path(raw)
        files, broken = _folder_files(path) if path.is_dir() else ([path], [])
        if path.is_dir() and not files and not broken:
            problem = f"no {', '.join(MANIFEST_SUFFIXES)} files in this folder"
            found.append(InputError(source=raw, line=None, message=problem))
        found += [Source(name=str(file), path=file) for file in files]
        found += [InputError(source=str(link), line=None, message=_BROKEN) for link in broken]
    return found


def read(inputs: Iterable[Source | InputError]) -> Iterator[Item]:
    """Every object and every problem of ``inputs``, in order, one at a time. An input that
    cannot be read (too large, not UTF-8) gives its problem and no object."""
    for source in inputs:
        if isinstance(source, InputError):
            yield source
            continue
        problem = source.problem()
        if problem is not None:
            yield problem
            continue
        try:
            stream = source.open()
        except OSError as exc:
            message = f"cannot read: {exc.strerror or exc}"
            yield InputError(source=source.name, line=None, message=message)
            continue
        try:
            if source.name.endswith(".json"):
                yield from _read_json(source.name, stream)
            else:
                yield from _parse_yaml(source.name, _Reader(stream, source.name))
        finally:
            stream.close()


# Kinds whose objects change how others are judged: read ahead, wherever they stand.
READ_AHEAD_KINDS = frozenset({"Namespace", "PriorityClass"})
# A document that may declare one, or a List holding one, holds one of these words: worth
# reading ahead. Every style (block, flow, JSON) writes the kind as the word itself, unless
# escapes spell it; a document with neither cannot hold one. Reading ahead one that holds none
# costs time; missing one would change verdicts. Documents start at each line beginning with
# "---".
_READ_AHEAD_WORDS = (b"Namespace", b"PriorityClass", b"\\")


def read_ahead(inputs: Iterable[Source | InputError]) -> Iterator[Obj]:
    """The Namespace and PriorityClass objects of ``inputs``, read ahead: only the documents
    that can hold one are parsed, and problems are left for ``read`` to report."""
    for source in inputs:
        if isinstance(source, InputError) or source.problem() is not None:
            continue
        places = source.ahead()
        if not places:
            continue
        try:
            stream = source.open()
        except OSError:
            continue
        try:
            for item in _documents_at(source.name, stream, places):
                if isinstance(item, Document) and item.obj.get("kind") in READ_AHEAD_KINDS:
                    yield item.obj
        finally:
            stream.close()


def _documents_at(source: str, stream: _Input, places: list[tuple[int, int]]) -> Iterator[Item]:
    if source.endswith(".json"):
        yield from _read_json(source, stream)
        return
    for start, end in places:
        stream.seek(start)
        text = io.BytesIO(stream.read(end - start))
        yield from _parse_yaml(source, _Reader(text, source))


def _read_json(source: str, stream: _Readable) -> Iterator[Item]:
    # A JSON file is one value: read whole (within the limit, as checked).
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        yield InputError(source=source, line=None, message=_TOO_LARGE)
        return
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        message = f"cannot read: not UTF-8 text (byte {exc.start})"
        yield InputError(source=source, line=None, message=message)
        return
    del data
    if not text.lstrip().startswith(("{", "[")):
        # As kubectl, whatever the file's name: what does not start as JSON is YAML.
        yield from _parse_yaml(source, _Reader(io.BytesIO(text.encode()), source))
        return
    yield from _parse_json_stream(source, text)


def _folder_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """The manifest files under ``folder``, and the links among them that lead nowhere."""
    files, broken = [], []
    for p in folder.rglob("*"):
        if p.suffix not in MANIFEST_SUFFIXES:
            continue
        if p.is_file():
            files.append(p)
        elif p.is_symlink() and not p.exists():
            broken.append(p)
    return sorted(files), sorted(broken)


_BROKEN = "cannot read: a symbolic link to a file that does not exist; fix or remove the link"


def _parse_yaml(source: str, reader: _Reader) -> Iterator[Item]:
    loader = _Loader(reader)
    too_large = InputError(source=source, line=None, message=_TOO_LARGE)
    ended = 1  # the line the document before ended on
    try:
        while loader.check_node():
            node = loader.get_node()
            if reader.over:
                yield too_large
                return
            line = node.start_mark.line + 1
            last = node.end_mark.line + 1
            # Anchors are rare in manifests: look for a recursive or exploding alias only in a
            # document whose lines hold an "&".
            problem = alias_problem(node) if reader.may_alias(ended, last) else None
            ended = last
            if problem is not None:
                message, at = problem
                yield InputError(source=source, line=at, message=f"not usable YAML: {message}")
                continue
            yield from _document(source, loader, node, line)
        if reader.over:
            yield too_large
    except yaml.YAMLError as exc:
        if reader.over:
            yield too_large
            return
        reason = getattr(exc, "problem", None) or str(exc)
        yield InputError(source=source, line=problem_line(exc), message=f"not valid YAML: {reason}")
    except RecursionError:
        yield InputError(source=source, line=None, message="not usable YAML: nested too deeply")
    finally:
        loader.dispose()


def _document(source: str, loader: Any, node: yaml.Node, line: int) -> Iterator[Item]:
    """The objects of one composed document; a value in it that cannot be read (``!!int
    abc``) is a problem of this document alone, the next ones are still read."""
    try:
        value = _python(loader, node)
    except RecursionError:
        yield InputError(source=source, line=line, message="not usable YAML: nested too deeply")
        return
    except yaml.YAMLError as exc:
        reason = getattr(exc, "problem", None) or str(exc)
        message = f"not valid YAML: {reason}"
        yield InputError(source=source, line=problem_line(exc) or line, message=message)
        return
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
        # A constructor of PyYAML's refusing a value its own way (``!!set`` of a list).
        message = f"not usable YAML: {type(exc).__name__}: {shorten(str(exc), 200)}"
        yield InputError(source=source, line=line, message=message)
        return
    yield from _objects(source, line, value, lines=_item_lines(node))


def _item_lines(root: yaml.Node) -> list[int] | None:
    """The lines of the items of a List document, for what is said about each."""
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if key.value == "items" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return None


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
        if node.__class__ is _Scalar:
            return node.value if node.tag == _STR_TAG else self.loader.construct_object(node)
        known = self.made.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.SequenceNode):
            items: list[Any] = []
            self.made[id(node)] = items
            for item in node.value:
                is_text = item.__class__ is _Scalar and item.tag == _STR_TAG
                items.append(item.value if is_text else self.of(item))
            return items
        assert isinstance(node, yaml.MappingNode)
        pairs = node.value
        # Nearly always every key is a string: the keys first, so that one written twice is
        # refused before anything under it is made (as refuse_duplicate_keys does).
        mapping: dict[Any, Any] = {}
        for key_node, _ in pairs:
            if key_node.__class__ is not _Scalar or key_node.tag != _STR_TAG:
                return self._mapping(node)
            mapping[key_node.value] = None
        if len(mapping) != len(pairs):
            refuse_duplicate_keys(node)
        self.made[id(node)] = mapping
        for key_node, value_node in pairs:
            is_text = value_node.__class__ is _Scalar and value_node.tag == _STR_TAG
            mapping[key_node.value] = value_node.value if is_text else self.of(value_node)
        return mapping

    def _mapping(self, node: yaml.MappingNode) -> dict[Any, Any]:
        """A mapping with a key other than plain text: a number, a boolean, a merge (``<<``).
        Keys are as the JSON kubectl sends has them (``true:`` is ``"true"``), and a merge
        acts where it stands, as in go-yaml: it replaces the keys before it, and the keys
        after it replace what it brought."""
        mapping: dict[Any, Any] = {}
        self.made[id(node)] = mapping
        written: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == goyaml.MERGE_TAG:
                self._merge(mapping, value_node)
                continue
            key = goyaml.json_key(self.of(key_node))
            if key is None:
                problem = "found a mapping or a list as a key; keys must be plain values"
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            if key in written:
                shown = "" if key == key_node.value else f" (written {key_node.value!r})"
                problem = f"duplicate key {key!r}{shown}"
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            written.add(key)
            mapping[key] = self.of(value_node)
        return mapping

    def _merge(self, mapping: dict[Any, Any], node: yaml.Node) -> None:
        # Of a list of mappings, the first wins: go-yaml merges them from the last.
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        if not all(isinstance(n, yaml.MappingNode) for n in sources):
            problem = "<< must be followed by a mapping, or a list of mappings, to merge in"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)
        for source in reversed(sources):
            mapping.update(self.of(source))


def _parse_json_stream(source: str, text: str) -> Iterator[Item]:
    """The objects of a JSON file: one value, or several one after the other (as
    ``kubectl get -o json`` output concatenated), as kubectl reads them. The file is read
    as one value first: only one that has more after it is split, and read value by value."""
    whole = list(_parse_json(source, text))
    starts = _json_starts(text) if _more_after(whole) else [0]
    if len(starts) <= 1:
        yield from whole
        return
    line, counted = 1, 0
    for start, end in itertools.pairwise([*starts, len(text)]):
        line += text.count("\n", counted, start)
        counted = start
        yield from _parse_json(source, text[start:end], line)


def _more_after(items: list[Item]) -> bool:
    return (
        len(items) == 1
        and isinstance(items[0], InputError)
        and items[0].message == f"{_NOT_JSON}Extra data"
    )


def _json_starts(text: str) -> list[int]:
    """Where each of the JSON values in ``text`` starts, as far as they can be told apart:
    the value that cannot be read (not JSON, or nested too deep to find its end) runs to the
    end of the text, and its parse says why. A review is one value, read whole as the
    webhook reads a body: what follows it is not JSON."""
    decoder = json.JSONDecoder()
    starts, at = [], 0
    try:
        while at < len(text):
            while at < len(text) and text[at] in " \t\r\n":
                at += 1
            if at == len(text):
                break
            starts.append(at)
            value, at = decoder.raw_decode(text, at)
            if len(starts) == 1 and _is_review(value):
                break
    except (ValueError, RecursionError):
        pass
    return starts or [0]


_NOT_JSON = "not valid JSON: "


def _parse_json(source: str, text: str, line: int = 1) -> Iterator[Item]:
    try:
        floats = _Floats()
        value = jsondoc.loads(text, object_pairs_hook=_unique_keys, parse_float=floats.read)
    except json.JSONDecodeError as exc:
        at = line + exc.lineno - 1
        yield InputError(source=source, line=at, message=f"{_NOT_JSON}{exc.msg}")
        return
    except ValueError as exc:  # a duplicate key, or an error in a deeply nested document
        yield InputError(source=source, line=line, message=f"{_NOT_JSON}{exc}")
        return
    if floats.whole and not _is_review(value):
        value = _whole_floats(value)
    yield from _objects(source, line, value)


class _Floats:
    """Reads JSON fractions, noting whether one was whole."""

    def __init__(self) -> None:
        self.whole = False

    def read(self, text: str) -> float:
        value = float(text)
        self.whole = self.whole or value.is_integer()
        return value


def _is_review(value: object) -> bool:
    # What an API server sent, read as the webhook reads it (it never writes 300.0 for 300).
    return isinstance(value, dict) and value.get("kind") == "AdmissionReview"


def _whole_floats(value: Any) -> Any:
    """``value`` with its whole floats made integers (see ``whole_float``)."""
    if isinstance(value, float):
        return goyaml.whole_float(value)
    if isinstance(value, dict):
        return {k: _whole_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_floats(v) for v in value]
    return value


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


def _objects(
    source: str, line: int, value: Any, where: str = "", *, lines: list[int] | None = None
) -> Iterator[Item]:
    """The objects of a document: itself, or the items of a List (``lines``: theirs)."""
    if value is None and not where:
        return
    if not isinstance(value, dict):
        problem = f"{where}a document must be a Kubernetes object, not {describe(value)}"
        yield InputError(source=source, line=line, message=problem)
        return
    items = value.get("items")
    if _is_list(value) and isinstance(items, list):
        # kubectl prints `kind: List`; the API returns PodList, DeploymentList, ... whose
        # items need not say what they are: kubectl takes it from the list.
        for i, item in enumerate(items):
            at = lines[i] if lines is not None and i < len(lines) else line
            yield from _objects(source, at, _typed_item(value, item), f"{where}items[{i}]: ")
        return
    invalid = _object_problem(value)
    if invalid:
        yield InputError(source=source, line=line, message=where + invalid)
    else:
        yield Document(obj=value, source=source, line=line)


def _typed_item(listed: Obj, item: Any) -> Any:
    """An item of a typed list (a PodList) with the apiVersion and kind the list gives it,
    where it has none, as kubectl reads it."""
    kind = listed["kind"].removesuffix("List")
    if not kind or not isinstance(item, dict) or (item.get("kind") and item.get("apiVersion")):
        return item
    typed = dict(item)
    if not typed.get("kind"):
        typed["kind"] = kind
    if not typed.get("apiVersion") and isinstance(listed.get("apiVersion"), str):
        typed["apiVersion"] = listed["apiVersion"]
    return typed


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
