"""Reading and writing graphs and strategies.

- :func:`read_cg`: the text format of the computational graphs the paper's authors published
  (``cg_*.txt``, written by their dump script; paper Sec. 5).
- :func:`save_strategy` / :func:`load_strategy`: versioned JSON for canonical strategies.
- :func:`save_graph` / :func:`load_graph`: versioned JSON for graphs.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable

from .dropset import _FORMAT as DROPSET_FORMAT
from .dropset import STRATEGY_TYPES, DropSetStrategy
from .exceptions import ArgumentTypeError, FormatError, GraphError, StrategyError
from .graph import Graph, _graph_from_dict, _graph_to_dict
from .strategy import CanonicalStrategy

__all__ = ["read_cg", "paper_cost", "save_strategy", "load_strategy", "save_graph", "load_graph"]

_GRAPH_FORMAT = "lowerset.graph"


def paper_cost(function_name: str) -> int:
    """T_v of the paper's experiments: 10 for a convolution, 1 otherwise (Sec. 3, last paragraph).

    A function counts as a convolution when its class name starts with ``"Conv"``
    (``Convolution2DFunction``, ``ConvolutionND``...). ``Deconvolution2DFunction`` does not.

    Parameters
    ----------
    function_name : str
        The class name of the function.
    """
    return 10 if function_name.startswith("Conv") else 1


def read_cg(path: str | os.PathLike[str], cost: Callable[[str], int] = paper_cost) -> Graph:
    """Read a forward graph from the authors' ``cg_*.txt`` format.

    The file holds a header ``n_vars n_records``; ``n_vars`` lines ``id bytes name`` where name
    ``_`` is an activation, an integer is a model input and a path (``/predictor/...``) is a
    parameter; then ``n_records`` records, each made of a line ``forward`` or ``backward``, a
    line ``k p``, k input lines (``id ...``), p output lines (``id ...``), the function's class
    name and a JSON line of its attributes.

    Forward records give the edges (each activation input -> each output). Model inputs and
    parameters are not nodes (Sec. 2). M_v is the variable's bytes, exactly (the authors' C++
    rounds them; we do not). A function with several outputs becomes one node labelled by its
    first output id, with the summed bytes and ``attrs["outputs"]`` listing the ids: its outputs
    are created together, so a strategy cannot separate them. Backward records are checked for
    form and otherwise ignored.

    Parameters
    ----------
    path : str or os.PathLike
    cost : callable, optional
        Maps a function's class name to T_v (positive int); default :func:`paper_cost`.

    Returns
    -------
    Graph
        Node labels are the activations' integer ids; ``attrs[v]["function"]`` is the class name
        of the producing function.

    Raises
    ------
    FormatError
        If the file is malformed; the message names the file and the line (not UTF-8 text, a
        bad header or count, an unknown variable id, an activation produced twice or never, a
        record that produces a model input or parameter, bad JSON, missing or extra lines;
        blank lines at the end are allowed).
    GraphError
        If the resulting graph is invalid (for example cyclic).
    ArgumentTypeError
        If `path` is not a str or path-like object, or `cost` is not callable.
    OSError
        If the file cannot be read.
    """
    path = _check_path(path)
    if not callable(cost):
        raise ArgumentTypeError(f"cost must be callable (class name -> T_v), got {cost!r}")
    lines = _read_text(path).split("\n")
    # trailing blank lines (and the final newline) are not part of the format
    while lines and not lines[-1].strip():
        lines.pop()
    pos = 0

    def take(what):
        nonlocal pos
        if pos >= len(lines):
            raise FormatError(f"unexpected end of file, expected {what}", path, pos + 1)
        pos += 1
        return lines[pos - 1]

    def ints(line, count, what):
        parts = line.split()
        if len(parts) != count:
            raise FormatError(f"expected {what}, got {line!r}", path, pos)
        try:
            return [int(x) for x in parts]
        except ValueError:
            raise FormatError(f"expected {what} as integers, got {line!r}", path, pos) from None

    n_vars, n_records = ints(take("header 'n_vars n_records'"), 2, "'n_vars n_records'")
    if n_vars < 0 or n_records < 0:
        raise FormatError(f"negative count in header 'n_vars n_records' = {n_vars} {n_records}",
                          path, pos)
    nbytes, kind, decl_line = {}, {}, {}
    for _ in range(n_vars):
        line = take("a variable line 'id bytes name'")
        parts = line.split(None, 2)
        if len(parts) != 3:
            raise FormatError(f"expected 'id bytes name', got {line!r}", path, pos)
        try:
            vid, b = int(parts[0]), int(parts[1])
        except ValueError:
            raise FormatError(f"expected integer id and bytes, got {line!r}", path, pos) from None
        if vid in nbytes:
            raise FormatError(f"variable id {vid} is defined twice", path, pos)
        if b < 0:
            raise FormatError(f"variable {vid} has negative bytes {b}", path, pos)
        nbytes[vid] = b
        decl_line[vid] = pos
        name = parts[2].strip()
        kind[vid] = ("activation" if name == "_"
                     else "input" if name.lstrip("-").isdigit() else "parameter")

    def var_id(line):
        try:
            vid = int(line.split()[0])
        except (ValueError, IndexError):
            raise FormatError(f"expected a variable id, got {line!r}", path, pos) from None
        if vid not in nbytes:
            raise FormatError(f"unknown variable id {vid}", path, pos)
        return vid

    node_of = {}  # activation id -> node label (first output of its function)
    producer_line: dict[int, int] = {}
    nodes, costs, mems, attrs, edges_in = [], {}, {}, {}, []
    for _ in range(n_records):
        rec = take("'forward' or 'backward'").strip()
        rec_line = pos
        if rec not in ("forward", "backward"):
            raise FormatError(f"expected 'forward' or 'backward', got {rec!r}", path, pos)
        k, p = ints(take("'k p'"), 2, "'k p' (input and output counts)")
        if k < 0 or p < 0:
            raise FormatError(f"negative counts in {k} {p}", path, pos)
        ins = [var_id(take("an input line")) for _ in range(k)]
        outs = [var_id(take("an output line")) for _ in range(p)]
        fname = take("the function's class name").strip()
        if not fname:
            raise FormatError("empty function class name", path, pos)
        _parse_json(take("a JSON line"), path, pos)
        if rec == "backward":
            continue
        if p == 0:
            raise FormatError("a forward record with no outputs", path, rec_line)
        for o in outs:
            if kind[o] != "activation":
                raise FormatError(f"forward record produces {kind[o]} {o}, not an activation",
                                  path, rec_line)
            if o in producer_line:
                raise FormatError(
                    f"activation {o} is produced twice (also at line {producer_line[o]})",
                    path, rec_line)
            producer_line[o] = rec_line
        label = outs[0]
        for o in outs:
            node_of[o] = label
        nodes.append(label)
        c = cost(fname)
        costs[label] = c
        mems[label] = sum(nbytes[o] for o in outs)
        attrs[label] = {"function": fname, "line": rec_line}
        if p > 1:
            attrs[label]["outputs"] = outs
        edges_in.append((label, [i for i in ins if kind[i] == "activation"], rec_line))
    if pos != len(lines):
        raise FormatError(f"{len(lines) - pos} unexpected line(s) after the last record", path,
                          pos + 1)
    missing = sorted(v for v, kd in kind.items() if kd == "activation" and v not in node_of)
    if missing:
        raise FormatError(f"activation(s) {missing[:5]} are never produced by a forward record",
                          path, decl_line[missing[0]])
    edges = set()
    for label, ins, line in edges_in:
        for i in ins:
            if node_of[i] == label:
                raise FormatError(f"function at line {line} consumes its own output {i}",
                                  path, line)
            edges.add((node_of[i], label))
    try:
        return Graph(nodes, sorted(edges), costs, mems, attrs=attrs)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None


def _check_path(path):
    try:
        return os.fspath(path)
    except TypeError:
        raise ArgumentTypeError(
            f"path must be a str or os.PathLike, got {type(path).__name__} {path!r:.80}") from None


def _read_text(path):
    """The file's text; FormatError if it is binary or not UTF-8 (the line of the first bad
    byte is given)."""
    with open(path, "rb") as f:
        raw = f.read()
    nul = raw.find(b"\0")
    if nul >= 0:
        raise FormatError(f"not a text file (NUL byte at offset {nul})", path,
                          raw.count(b"\n", 0, nul) + 1)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start}",
                          path, raw.count(b"\n", 0, e.start) + 1) from None


def _parse_json(text, path, lineno=None):
    """json.loads, with every parse failure (syntax, nesting too deep, an integer too long)
    turned into FormatError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        line = e.lineno if lineno is None else lineno
        raise FormatError(f"bad JSON: {e.msg}", path, line) from None
    except (ValueError, RecursionError) as e:
        raise FormatError(f"bad JSON: {e}", path, lineno) from None


def _write_atomic(path, text):
    """Write `text` to `path` through a temporary file in the same folder and a rename, so that
    `path` holds either its old content or all of the new one, whatever fails."""
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_strategy(strategy: CanonicalStrategy | DropSetStrategy,
                  path: str | os.PathLike[str]) -> None:
    """Write a strategy as JSON (see :meth:`CanonicalStrategy.to_dict` and
    :meth:`DropSetStrategy.to_dict`).

    The file is replaced atomically: the JSON goes to a temporary file in the same folder,
    which is then renamed over `path`. If anything fails (a label JSON cannot hold, a full
    disk), `path` keeps its previous content.

    Parameters
    ----------
    strategy : CanonicalStrategy or DropSetStrategy
    path : str or os.PathLike

    Raises
    ------
    ArgumentTypeError
        If `strategy` is neither or `path` is not a path.
    StrategyError
        If a node label or an entry cannot be written as JSON.
    OSError
        If the file cannot be written.
    """
    if not isinstance(strategy, STRATEGY_TYPES):
        raise ArgumentTypeError(f"strategy must be a CanonicalStrategy or a DropSetStrategy, "
                                f"got {type(strategy).__name__}")
    path = _check_path(path)
    try:
        text = json.dumps(strategy.to_dict())
    except (TypeError, ValueError) as e:
        raise StrategyError(f"the strategy cannot be written as JSON: {e}") from None
    _write_atomic(path, text)


def load_strategy(path: str | os.PathLike[str],
                  graph: Graph | None = None) -> CanonicalStrategy | DropSetStrategy:
    """Read a strategy written by :func:`save_strategy`.

    Parameters
    ----------
    path : str or os.PathLike
    graph : Graph, optional
        If given, the file's graph must equal it.

    Returns
    -------
    CanonicalStrategy or DropSetStrategy
        As the file's ``format`` says ("lowerset.strategy" or "lowerset.dropset").

    Raises
    ------
    FormatError
        If the file is not UTF-8 text holding valid JSON.
    StrategyError
        If it is not a lowerset strategy (a missing or malformed entry, lower sets that are not
        a valid sequence, a node that may not be dropped), or was planned for a different
        graph.
    GraphError
        If the stored graph is invalid.
    ArgumentTypeError
        If `path` is not a path, or `graph` is not a Graph.
    OSError
        If the file cannot be read.
    """
    path = _check_path(path)
    data = _parse_json(_read_text(path), path)
    if isinstance(data, dict) and data.get("format") == DROPSET_FORMAT:
        return DropSetStrategy.from_dict(data, graph=graph)
    return CanonicalStrategy.from_dict(data, graph=graph)


def save_graph(G: Graph, path: str | os.PathLike[str]) -> None:
    """Write a :class:`Graph` as JSON: nodes, edges, cost (cost units), memory (bytes), attrs.

    The file is replaced atomically, as by :func:`save_strategy`.

    Parameters
    ----------
    G : Graph
        The graph to write.
    path : str or PathLike
        The file.

    Raises
    ------
    GraphError
        If a label or an attribute value cannot be written as JSON.
    ArgumentTypeError
        If `G` is not a Graph or `path` is not a path.
    OSError
        If the file cannot be written.
    """
    if not isinstance(G, Graph):
        raise ArgumentTypeError(f"G must be a lowerset.Graph, got {type(G).__name__}")
    path = _check_path(path)
    data = {"format": _GRAPH_FORMAT, "version": 1, **_graph_to_dict(G)}
    try:
        text = json.dumps(data)
    except (TypeError, ValueError) as e:
        raise GraphError(f"node labels and attrs must be JSON-serialisable: {e}") from None
    _write_atomic(path, text)


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Read a graph written by :func:`save_graph`.

    Parameters
    ----------
    path : str or PathLike
        The file.

    Raises
    ------
    FormatError
        If the file is not UTF-8 text holding JSON of format "lowerset.graph" version 1 with
        the entries nodes, edges, cost, memory (lists) and attrs (optional, a list of objects).
    GraphError
        If the graph is invalid.
    ArgumentTypeError
        If `path` is not a path.
    OSError
        If the file cannot be read.
    """
    path = _check_path(path)
    data = _parse_json(_read_text(path), path)
    if (not isinstance(data, dict) or data.get("format") != _GRAPH_FORMAT
            or data.get("version") != 1):
        raise FormatError("not a lowerset graph file (format 'lowerset.graph', version 1)", path)
    try:
        return _graph_from_dict(data)
    except (KeyError, TypeError) as e:
        raise FormatError(f"missing or invalid entry {e} in a lowerset graph file", path) from None
