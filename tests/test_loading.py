"""Reading manifests as a stream: no input held whole, every problem found with its line.

``check`` reads each input twice, in blocks: once to check it (its size, that it is UTF-8)
and to find the documents worth reading ahead, then through libyaml. These tests make the
blocks small, so that what a cut between blocks could break (a word, a character, a line
beginning with ``---``) is cut often.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission import lookups
from webhook.cli.dryrun import judge_each
from webhook.cli.report import JsonReport
from webhook.engine.policy import Policy
from webhook.loading import gcpause, manifests
from webhook.loading.manifests import (
    Document,
    InputError,
    Source,
    load_manifests,
    read,
    read_ahead,
    sources,
)

POD = """apiVersion: v1
kind: Pod
metadata:
  name: p{i}
  namespace: {namespace}
  annotations:
    note: "caf\u00e9 \u2615 {i}"
spec:
  containers:
  - name: main
    image: ghcr.io/example/app:1.0
    resources:
      limits:
        nvidia.com/gpu: "1"
"""


def pods(count: int, namespace: str = "apps") -> str:
    return "---\n".join(POD.format(i=i, namespace=namespace) for i in range(count))


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


class Stdin(io.TextIOWrapper):
    """Stdin as a program gets it: text over a binary buffer."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")


def items(paths: list[str], stdin: Any = None) -> list[Document | InputError]:
    return list(read(sources(paths, stdin or Stdin(b""))))


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "_BLOCK", 61)


# --- memory --------------------------------------------------------------------------------


def _dry_run_peak(path: Path, policy: Policy) -> tuple[int, int]:
    """The peak of Python memory while ``check`` runs on ``path`` (reading ahead, judging,
    reporting as JSON), and the objects it counted."""
    with open(os.devnull, "w") as sink:
        tracemalloc.start()
        try:
            inputs = sources([str(path)], sys.stdin)
            ahead = list(read_ahead(inputs))
            report = JsonReport(sink)
            lookup = lookups.namespaces_from_objects(ahead)
            classes = lookups.priority_classes_from_objects(ahead)
            with gcpause.paused():
                for item in judge_each(
                    read(inputs), policy, lookup, "default", priority_classes=classes
                ):
                    report.add(item)
            return tracemalloc.get_traced_memory()[1], report.tally.objects
        finally:
            tracemalloc.stop()


def test_check_holds_one_document_at_a_time_not_the_file(
    tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten times the documents in one file, about the same peak: nothing grows with the
    input. (Blocks of 16 KiB: the block being checked weighs less than the growth a file held
    whole would show.)"""
    monkeypatch.setattr(manifests, "_BLOCK", 2**14)
    small = write(tmp_path / "small.yaml", pods(300))
    large = write(tmp_path / "large.yaml", pods(3000))
    _dry_run_peak(small, policy)  # first-use caches
    small_peak, small_objects = _dry_run_peak(small, policy)
    large_peak, large_objects = _dry_run_peak(large, policy)
    assert (small_objects, large_objects) == (300, 3000)
    grown = large.stat().st_size - small.stat().st_size
    assert large_peak - small_peak < grown / 10, (small_peak, large_peak, grown)
    assert large_peak < large.stat().st_size / 2  # held whole, as bytes then as text: 2x


def test_stdin_is_copied_to_a_file_not_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "_BLOCK", 2**12)
    text = pods(4000).encode()
    count = 0
    tracemalloc.start()
    try:
        for item in read(sources(["-"], Stdin(text))):
            assert isinstance(item, Document)
            assert (item.source, item.line) == ("<stdin>", count * (POD.count("\n") + 1) + 1)
            count += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 4000
    assert peak < len(text) / 4


def test_an_endless_device_is_cut_without_holding_it() -> None:
    tracemalloc.start()
    try:
        found = items(["/dev/zero"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = "more than 64 MiB: not read; split it into smaller files"
    assert [str(item) for item in found] == [f"/dev/zero: {message}"]
    assert peak < 8 * 2**20


# --- the input limit -------------------------------------------------------------------------


class Endless:
    """A pipe that never closes: as much as asked for, forever; counts what was read."""

    def __init__(self) -> None:
        self.given = 0

    def read(self, size: int = -1) -> bytes:
        chunk = b"a: b\n" * (max(size, 5) // 5)
        self.given += len(chunk)
        return chunk


class PipeStdin:
    """Stdin over a pipe."""

    def __init__(self, pipe: Endless) -> None:
        self.buffer = pipe


def test_stdin_that_never_ends_is_cut_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "MAX_INPUT_BYTES", 10_000)
    pipe = Endless()
    [error] = items(["-"], PipeStdin(pipe))
    assert isinstance(error, InputError)
    assert (error.source, error.line) == ("<stdin>", None)
    assert error.message.startswith("more than ")
    assert pipe.given <= 10_000 + 1 + 5


def test_a_file_over_the_limit_gives_no_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "big.yaml", pods(100))
    monkeypatch.setattr(manifests, "MAX_INPUT_BYTES", path.stat().st_size - 1)
    assert [str(item) for item in items([str(path)])] == [
        f"{path}: more than 64 MiB: not read; split it into smaller files"
    ]
    monkeypatch.setattr(manifests, "MAX_INPUT_BYTES", path.stat().st_size)
    assert len(items([str(path)])) == 100


def test_a_file_that_grows_past_the_limit_after_its_check_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit holds on the second read too: the stream libyaml reads stops there."""
    path = write(tmp_path / "growing.yaml", pods(10))
    [source] = sources([str(path)], Stdin(b""))
    assert isinstance(source, Source)
    assert source.problem() is None
    write(path, pods(100))
    monkeypatch.setattr(manifests, "MAX_INPUT_BYTES", len(pods(50)))
    found = list(read([source]))
    assert isinstance(found[-1], InputError)
    assert found[-1].message.startswith("more than ")
    assert all(isinstance(item, Document) for item in found[:-1])
    assert len(found) < 51


# --- encoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [61, 2**20])
def test_bytes_that_are_not_utf8_are_reported_with_their_line_and_nothing_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(manifests, "_BLOCK", block)
    before = pods(5000).encode()  # several blocks of 1 MiB
    data = before + b"\n---\nkind: Pod\nmetadata: {name: caf\xe9}\n" + pods(10).encode()
    path = write(tmp_path / "latin1.yaml", data)
    at = data.index(b"\xe9")
    line = data[:at].count(b"\n") + 1
    assert [str(item) for item in items([str(path)])] == [
        f"{path}:{line}: cannot read: not UTF-8 text (byte {at})"
    ]
    assert [str(item) for item in items(["-"], Stdin(data))] == [
        f"<stdin>:{line}: cannot read: not UTF-8 text (byte {at})"
    ]


def test_characters_cut_between_blocks_are_read_whole(tmp_path: Path, small_blocks: None) -> None:
    text = pods(40)
    path = write(tmp_path / "pods.yaml", text)
    found = items([str(path)])
    assert [doc.obj for doc in found if isinstance(doc, Document)] == list(yaml.safe_load_all(text))
    assert [doc.line for doc in found if isinstance(doc, Document)] == [
        i * (POD.count("\n") + 1) + 1 for i in range(40)
    ]


def test_a_character_cut_by_the_end_of_the_input_is_not_utf8(tmp_path: Path) -> None:
    path = write(tmp_path / "cut.yaml", "kind: caf\u00e9".encode()[:-1])
    assert [str(item) for item in items([str(path)])] == [
        f"{path}:1: cannot read: not UTF-8 text (byte 9)"
    ]


# --- reading ahead ---------------------------------------------------------------------------

NAMESPACE = """apiVersion: v1
kind: Namespace
metadata:
  name: late
  annotations:
    together.ai/default-workload: interruptible
"""


@pytest.mark.parametrize("block", [61, 2**20])
def test_a_namespace_at_the_end_of_a_large_file_applies_to_the_objects_before_it(
    tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(manifests, "_BLOCK", block)
    text = pods(5000, namespace="late") + "---\n" + NAMESPACE
    assert len(text) > 2**20
    path = write(tmp_path / "late.yaml", text)
    inputs = sources([str(path)], Stdin(b""))
    ahead = list(read_ahead(inputs))
    assert [obj["metadata"]["name"] for obj in ahead] == ["late"]
    judged = list(
        judge_each(
            read(inputs),
            policy,
            lookups.namespaces_from_objects(ahead),
            "default",
            priority_classes=lookups.priority_classes_from_objects(ahead),
        )
    )
    classes = {
        (r.decision.workload_class, r.decision.classification.source)
        for r in judged
        if not isinstance(r, InputError) and r.decision.kind == "Pod"
    }
    assert classes == {("interruptible", "namespace default")}


def _split(text: str) -> list[str]:
    """The documents of ``text`` as reading ahead cuts them: at each line starting ``---``."""
    return re.split(r"(?m)^---", text)


def _ahead_texts(path: Path) -> list[str]:
    [source] = sources([str(path)], Stdin(b""))
    assert isinstance(source, Source)
    data = path.read_bytes()
    return [data[start:end].decode() for start, end in source.ahead()]


pieces = st.sampled_from(
    ["Namespace", "PriorityClass", "\\", "---", "--", "-", "\n", "\n---", "a: b", " ", "\u00e9"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=60), st.integers(1, 40))
def test_reading_ahead_finds_every_document_that_may_hold_a_namespace(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str], block: int
) -> None:
    """Whatever the blocks, every document holding one of the words is found, cut where a
    line starts with ``---``; a few more may be (a word just before a cut between blocks)."""
    text = "".join(parts)
    path = write(tmp_path_factory.mktemp("ahead") / "any.yaml", text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifests, "_BLOCK", block)
        found = _ahead_texts(path)
    documents = _split(text)
    wanted = [d for d in documents if re.search(r"Namespace|PriorityClass|\\", d)]
    assert all(d in documents for d in found)
    assert all(found.count(d) >= wanted.count(d) for d in wanted)


@settings(max_examples=200, deadline=None)
@given(st.lists(pieces, max_size=40), st.binary(min_size=1, max_size=3), st.integers(1, 40))
def test_bytes_that_are_not_utf8_are_found_wherever_the_blocks_cut(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str], junk: bytes, block: int
) -> None:
    data = "".join(parts).encode() + junk + "".join(reversed(parts)).encode()
    path = write(tmp_path_factory.mktemp("utf8") / "any.yaml", data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifests, "_BLOCK", block)
        [source] = sources([str(path)], Stdin(b""))
        assert isinstance(source, Source)
        problem = source.problem()
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        message = f"cannot read: not UTF-8 text (byte {exc.start})"
        assert (problem and problem.line, problem and problem.message) == (line, message)
    else:
        assert problem is None


# --- aliases, stdin, folders -----------------------------------------------------------------


def test_aliases_are_checked_in_the_documents_whose_lines_hold_an_anchor(
    tmp_path: Path, small_blocks: None
) -> None:
    text = (
        pods(3)
        + "---\napiVersion: v1\nkind: Pod\nmetadata: &m {name: x}\nspec: {a: *m, b: *m}\n"
        + "--- &r\napiVersion: v1\nkind: Pod\nmetadata: {name: r}\nspec: {self: *r}\n"
        + "---\n"
        + pods(2)
    )
    path = write(tmp_path / "anchors.yaml", text)
    found = items([str(path)])
    errors = [str(item) for item in found if isinstance(item, InputError)]
    line = text.count("\n", 0, text.index("--- &r")) + 1
    assert errors == [
        f"{path}:{line}: not usable YAML: the anchor at line {line} contains an alias to itself"
    ]
    names = [item.obj["metadata"]["name"] for item in found if isinstance(item, Document)]
    assert names == ["p0", "p1", "p2", "x", "p0", "p1"]


def test_stdin_is_read_once_and_judged_like_a_file(tmp_path: Path) -> None:
    text = pods(30) + "---\n" + NAMESPACE
    path = write(tmp_path / "pods.yaml", text)
    stdin = Stdin(text.encode())
    inputs = sources(["-"], stdin)
    assert [obj["kind"] for obj in read_ahead(inputs)] == ["Namespace"]
    from_stdin = [(d.obj, d.line) for d in read(inputs) if isinstance(d, Document)]
    from_file = [(d.obj, d.line) for d in items([str(path)]) if isinstance(d, Document)]
    assert from_stdin == from_file
    assert len(from_stdin) == 31
    assert stdin.buffer.read() == b""


def test_stdin_without_a_binary_buffer_is_read_as_text() -> None:
    manifests_read = load_manifests(["-"], io.StringIO(pods(3)))
    assert [d.obj["metadata"]["name"] for d in manifests_read.documents] == ["p0", "p1", "p2"]
    undecodable = load_manifests(["-"], io.StringIO("kind: \udcff\n"))
    assert [str(e) for e in undecodable.errors] == ["<stdin>: cannot read: not UTF-8 text"]


def test_a_pipe_named_as_a_file_is_read_once(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe:
        pipe.write(pods(2) + "---\n" + NAMESPACE)
    path = f"/dev/fd/{read_end}"
    try:
        inputs = sources([path], Stdin(b""))
        assert [obj["kind"] for obj in read_ahead(inputs)] == ["Namespace"]
        assert [d.obj["kind"] for d in read(inputs) if isinstance(d, Document)] == [
            "Pod",
            "Pod",
            "Namespace",
        ]
    finally:
        os.close(read_end)


# --- numbers as kubectl sends them ---------------------------------------------------------

# (as written in YAML, as the API server gets it from kubectl): kubectl reads YAML as Go's
# YAML reader does (an exponent makes a float, points and signs optional) and sends JSON, in
# which a whole float below 1e21 is written without its fraction.
KUBECTL_NUMBERS = [
    ("300", 300),
    ("300.0", 300),
    ("1e2", 100),
    ("1.5e2", 150),
    ("+1E+2", 100),
    ("-.5", -0.5),
    ("300.5", 300.5),
    ("1e21", 1e21),
    ("1_000", 1000),
    ("'300.0'", "300.0"),
    ("v1e2", "v1e2"),
    ("1e", "1e"),
    ("1.2.3", "1.2.3"),
]


@pytest.mark.parametrize(("written", "sent"), KUBECTL_NUMBERS)
def test_numbers_are_read_as_kubectl_sends_them(tmp_path: Path, written: str, sent: object) -> None:
    (doc,) = items(
        [
            str(
                write(
                    tmp_path / "p.yaml", f"apiVersion: v1\nkind: Pod\nspec: {{value: {written}}}\n"
                )
            )
        ]
    )
    assert isinstance(doc, Document)
    value = doc.obj["spec"]["value"]
    assert (value, type(value)) == (sent, type(sent))


@pytest.mark.parametrize(("written", "sent"), [("300.0", 300), ("1e2", 100), ("300.5", 300.5)])
def test_json_numbers_are_read_as_kubectl_sends_them(
    tmp_path: Path, written: str, sent: object
) -> None:
    (doc,) = items(
        [
            str(
                write(
                    tmp_path / "p.json",
                    f'{{"apiVersion": "v1", "kind": "Pod", "spec": {{"value": {written}}}}}',
                )
            )
        ]
    )
    assert isinstance(doc, Document)
    value = doc.obj["spec"]["value"]
    assert (value, type(value)) == (sent, type(sent))


# --- YAML read as kubectl reads it (go-yaml v2, through sigs.k8s.io/yaml) --------------------


def _value(tmp_path: Path, written: str) -> object:
    (doc,) = items(
        [
            str(
                write(
                    tmp_path / "c.yaml", f"apiVersion: v1\nkind: ConfigMap\ndata:\n  v: {written}\n"
                )
            )
        ]
    )
    assert isinstance(doc, Document), doc
    return doc.obj["data"]["v"]


@pytest.mark.parametrize(
    ("written", "sent"),
    [
        ("2024-01-01", "2024-01-01"),  # YAML 1.1: a date
        ("2024-02-30", "2024-02-30"),  # YAML 1.1: a date that cannot be, which stopped the run
        ("1:30", "1:30"),  # YAML 1.1: 90
        ("y", True),
        ("N", False),
        ("on", True),
        ("0o17", 15),
        ("017", 15),
        ("0x1F", 31),
        ("=", "="),
        ("<<", "<<"),
        ("!foo bar", "bar"),
        ("!!binary aGVsbG8=", "hello"),
        ("!!bool y", True),
        ("!!str 300", "300"),
        ("1.2.3", "1.2.3"),
        ("99999999999999999999", 100000000000000000000),  # over 64 bits: a float, sent whole
        ("1" * 400, "1" * 400),  # too large even for a float: text
        ("18446744073709551616", 18446744073709552000),  # 2**64 as Go writes the float
        ("0x1ffffffffffffffff", "0x1ffffffffffffffff"),  # over 64 bits, no float form: text
        (".5_", ".5_"),  # ParseFloat as written: no underscore after a point
        ("0b0b1", "0b0b1"),
        ("0" * 70 + "17", 15),
        ("~", None),
    ],
)
def test_scalars_are_read_as_kubectl_reads_them(tmp_path: Path, written: str, sent: object) -> None:
    value = _value(tmp_path, written)
    assert (value, type(value)) == (sent, type(sent))


def test_keys_are_written_as_kubectl_sends_them(tmp_path: Path) -> None:
    assert _value(tmp_path, "{1: a, 2.5: b, ~: c, y: d, plain: e}") == {
        "1": "a", "2.5": "b", "null": "c", "true": "d", "plain": "e"}  # fmt: skip
    (error,) = items(
        [str(write(tmp_path / "k.yaml", "kind: ConfigMap\ndata: {true: a, yes: b}\n"))]
    )
    assert isinstance(error, InputError)
    assert error.message == "not valid YAML: duplicate key 'true' (written 'yes')"


def test_a_merge_key_acts_where_it_stands(tmp_path: Path) -> None:
    """go-yaml merges in order: a merge replaces the keys before it, the keys after it
    replace what it brought; of a list of mappings the first wins; two merges both apply."""
    common = "&c {together.ai/workload: interruptible, x: '1'}"
    text = (
        f"apiVersion: v1\nkind: ConfigMap\ndata:\n  base: {common}\n"
        "  before: {together.ai/workload: serving, <<: *c}\n"
        "  after: {<<: *c, together.ai/workload: serving}\n"
        "  listed: {<<: [{a: '1'}, {a: '2', b: '3'}]}\n"
        "  twice: {<<: {a: '1'}, b: '2', <<: {c: '3'}}\n"
    )
    (doc,) = items([str(write(tmp_path / "m.yaml", text))])
    assert isinstance(doc, Document)
    data = doc.obj["data"]
    assert data["before"] == {"together.ai/workload": "interruptible", "x": "1"}
    assert data["after"] == {"together.ai/workload": "serving", "x": "1"}
    assert data["listed"] == {"a": "1", "b": "3"}
    assert data["twice"] == {"a": "1", "b": "2", "c": "3"}


def test_a_value_that_cannot_be_read_is_a_problem_of_its_document_alone(tmp_path: Path) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {n: !!int abc}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
    )
    error, doc = items([str(write(tmp_path / "t.yaml", text))])
    assert isinstance(error, InputError)
    assert (error.line, error.message) == (
        4, "not valid YAML: 'abc' (tagged !!int) is not an integer; quote it, or drop the tag")  # fmt: skip
    assert isinstance(doc, Document)
    assert doc.obj["metadata"]["name"] == "b"


def test_list_items_have_their_own_lines_and_a_typed_lists_kind(tmp_path: Path) -> None:
    text = "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n\n- metadata: {name: b}\n"
    found = items([str(write(tmp_path / "l.yaml", text))])
    assert [(d.line, d.obj["apiVersion"], d.obj["kind"]) for d in found if isinstance(d, Document)] == [
        (4, "v1", "Pod"), (6, "v1", "Pod")]  # fmt: skip


def test_a_json_file_is_read_as_kubectl_reads_it(tmp_path: Path) -> None:
    pod = '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "%s"}}'
    stream = write(tmp_path / "s.json", "\ufeff" + pod % "a" + "\n" + pod % "b" + "\n")
    yaml_inside = write(tmp_path / "y.json", "apiVersion: v1\nkind: Pod\nmetadata: {name: c}\n")
    found = items([str(stream), str(yaml_inside)])
    assert [(d.line, d.obj["metadata"]["name"]) for d in found if isinstance(d, Document)] == [
        (1, "a"), (2, "b"), (1, "c")]  # fmt: skip


def test_a_link_to_nothing_in_a_folder_is_said(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    found = items([str(tmp_path)])
    assert [type(f).__name__ for f in found] == ["Document", "InputError"]
    assert isinstance(found[1], InputError)
    assert found[1].source.endswith("gone.yaml")
    assert "does not exist" in found[1].message


def test_a_tag_that_does_not_fit_its_value_is_bad_input(tmp_path: Path) -> None:
    (error,) = items([str(write(tmp_path / "i.yaml", "kind: Pod\nspec: {n: !!int 1.0}\n"))])
    assert isinstance(error, InputError)
    assert "'1.0' (tagged !!int) is not an integer" in error.message


def test_each_json_value_of_a_stream_is_read_on_its_own(tmp_path: Path) -> None:
    pod = '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "%s"}}'
    text = pod % "a" + "\n\n" + '{"apiVersion": "v1",\n "kind": "Pod",\n "x": [1,]}' + "\n"
    doc, error = items([str(write(tmp_path / "s.json", text))])
    assert isinstance(doc, Document)
    assert doc.obj["metadata"]["name"] == "a"
    assert isinstance(error, InputError)
    assert (error.line, error.message) == (5, "not valid JSON: Expecting value")


def test_a_review_is_read_whole_as_the_webhook_reads_a_body(tmp_path: Path) -> None:
    review = '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}'
    (error,) = items([str(write(tmp_path / "r.json", review + " {}"))])
    assert isinstance(error, InputError)
    assert error.message.startswith("not valid JSON: Extra data")
