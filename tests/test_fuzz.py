"""Fuzzing the readers: the cg reader (lowerset.read_cg) and the JSON loaders of strategies and
graphs. Whatever the bytes, nothing escapes but the library's own errors (LowersetError), and a
FormatError names the file.

Inputs are random bytes, random JSON values, and valid files with one part replaced: a cg file
with lines deleted, duplicated or replaced, a strategy or graph document with one entry (at any
depth) replaced by a random JSON value.
"""

import json
import os
import tempfile

from hypothesis import given, note, settings
from hypothesis import strategies as st

import lowerset as ls
from strategies import examples
from test_io import cg_lines

_TMP = tempfile.mkdtemp(prefix="lowerset-fuzz-")


def _write(data, name):
    path = os.path.join(_TMP, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _expect_only_library_errors(call, path):
    try:
        return call()
    except ls.LowersetError as e:
        note(f"{type(e).__name__}: {e}")
        if isinstance(e, ls.FormatError):
            assert e.path == path and str(e).startswith(path)
        return None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=12)


# -- the cg reader -------------------------------------------------------------------------------


@settings(max_examples=examples(1))
@given(st.binary(max_size=300))
def test_read_cg_random_bytes(data):
    path = _write(data, "cg_bytes.txt")
    _expect_only_library_errors(lambda: ls.read_cg(path), path)


LINE_EDITS = st.lists(st.tuples(
    st.sampled_from(["delete", "duplicate", "replace", "insert"]),
    st.integers(0, 10**6),
    st.one_of(st.text(max_size=12), st.sampled_from(
        ["forward", "backward", "0 0", "1 1", "-1 2", "2 _", "9 6", "{}", "{", "99",
         "3 64 _", "7 -1 _", "ReLU", "", "  ", "1e3 1"]))), min_size=1, max_size=4)


@settings(max_examples=examples(2))
@given(LINE_EDITS, st.booleans())
def test_read_cg_edited_lines(edits, crlf):
    lines = cg_lines()
    for op, at, text in edits:
        i = at % (len(lines) + 1)
        if op == "delete" and i < len(lines):
            del lines[i]
        elif op == "duplicate" and i < len(lines):
            lines.insert(i, lines[i])
        elif op == "replace" and i < len(lines):
            lines[i] = text
        else:
            lines.insert(i, text)
    data = ("\r\n" if crlf else "\n").join(lines).encode("utf-8", "surrogatepass")
    path = _write(data, "cg_edited.txt")
    g = _expect_only_library_errors(lambda: ls.read_cg(path), path)
    if g is not None:
        assert isinstance(g, ls.Graph) and g.n >= 1


@settings(max_examples=examples(0.5))
@given(st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_read_cg_bad_bytes_inside_a_valid_file(at, junk):
    data = "\n".join(cg_lines()).encode()
    at = at % len(data)
    data = data[:at] + junk + data[at:]
    path = _write(data, "cg_junk.txt")
    _expect_only_library_errors(lambda: ls.read_cg(path), path)


# -- the JSON loaders ----------------------------------------------------------------------------


def _valid_strategy_dict():
    g = ls.Graph(["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
                 dict(a=1, b=10, c=1, d=1), dict(a=1, b=2, c=4, d=8))
    return ls.dp.solve(g, 40).to_dict()


def _valid_graph_dict():
    g = ls.Graph(["a", "b", "c"], [("a", "b"), ("a", "c")], dict(a=1, b=2, c=3),
                 dict(a=4, b=5, c=6), attrs={"a": {"function": "Conv"}, "b": {"outputs": [1, 2]}})
    return {"format": "lowerset.graph", "version": 1,
            **json.loads(json.dumps(ls.graph._graph_to_dict(g)))}


def _paths(doc, prefix=()):
    """Every path (tuple of keys and indexes) into a JSON document, the root included."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


@st.composite
def edited_documents(draw, make):
    doc = make()
    paths = list(_paths(doc))
    for _ in range(draw(st.integers(1, 3), label="edits")):
        path = draw(st.sampled_from(paths), label="path")
        value = draw(json_values, label="value")
        if not path:
            doc = value
            break
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):  # an earlier edit removed that path
            pass
    return doc


def _load_both(doc, loader, name):
    text = json.dumps(doc)
    path = _write(text.encode(), name)
    result = _expect_only_library_errors(lambda: loader(path), path)
    if loader is ls.load_strategy:
        try:
            ls.CanonicalStrategy.from_dict(json.loads(text))
        except ls.LowersetError:
            pass
    return result


@settings(max_examples=examples(2))
@given(edited_documents(_valid_strategy_dict))
def test_load_strategy_edited(doc):
    s = _load_both(doc, ls.load_strategy, "strategy.json")
    if s is not None:
        assert isinstance(s, ls.CanonicalStrategy)
        assert s.lower_sets[-1] == frozenset(s.graph.labels)


@settings(max_examples=examples(2))
@given(edited_documents(_valid_graph_dict))
def test_load_graph_edited(doc):
    g = _load_both(doc, ls.load_graph, "graph.json")
    if g is not None:
        assert isinstance(g, ls.Graph)


@settings(max_examples=examples(1))
@given(json_values)
def test_loaders_random_json(doc):
    _load_both(doc, ls.load_strategy, "strategy_random.json")
    _load_both(doc, ls.load_graph, "graph_random.json")


@settings(max_examples=examples(1))
@given(st.binary(max_size=200))
def test_loaders_random_bytes(data):
    for loader, name in ((ls.load_strategy, "s_bytes.json"), (ls.load_graph, "g_bytes.json")):
        path = _write(data, name)
        _expect_only_library_errors(lambda: loader(path), path)


def test_loaders_pathological_json(tmp_path):
    """Nesting deeper than the parser's recursion limit and integers longer than Python's
    int-string limit are parse errors, not RecursionError or a bare ValueError."""
    for text in ("[" * 100_000 + "]" * 100_000, '{"budget": ' + "9" * 5000 + "}",
                 '{"format": "lowerset.strategy", "version": 1, "graph": ' + "[" * 50_000):
        for loader in (ls.load_strategy, ls.load_graph):
            p = tmp_path / "deep.json"
            p.write_text(text)
            try:
                loader(p)
            except ls.FormatError as e:
                assert e.path == str(p)
