"""Tests of lowerset.io: the authors' cg_*.txt reader (paper Sec. 5) and JSON graph files.

Small files are written in the authors' format: a header ``n_vars n_records``; ``n_vars`` lines
``id bytes name`` (``_`` = activation, an integer = model input, a path = parameter); then
records of ``forward``/``backward``, ``k p``, k input lines, p output lines, the class name
and a JSON line.
"""

import json
import os
import pathlib

import pytest

import lowerset as ls

JSON = '{"_input_indexes_to_retain": null, "_output_count": 1, "rank": 0}'


def var_lines(variables):
    return [f"{vid} {nbytes} {name}" for vid, nbytes, name in variables]


def record(kind, ins, outs, fname, js=JSON):
    tag = "_" if kind == "forward" else "input"
    return [kind, f"{len(ins)} {len(outs)}", *(f"{i} {tag}" for i in ins),
            *(str(o) for o in outs), fname, js]


# A small network: model input 0, parameters 1 and 8; activations 2..7.
#   conv: 0, 1 -> 2 (Convolution2DFunction, T = 10)
#   relu: 2 -> 3
#   split: 3 -> 4, 5 (two outputs: one node labelled 4 with 16 + 32 bytes)
#   add: 4, 5 -> 6 (one edge 4 -> 6)
#   deconv: 5, 8 -> 7 (Deconvolution2DFunction, T = 1); 6 and 7 are both sinks
VARIABLES = [(0, 1000, "0"), (1, 500, "/predictor/conv/W"), (2, 64, "_"), (3, 64, "_"),
             (4, 16, "_"), (5, 32, "_"), (6, 16, "_"), (7, 128, "_"),
             (8, 7, "/predictor/deconv/W")]
RECORDS = [  # not in topological order, as in the authors' files
    record("forward", [2], [3], "ReLU"),
    record("forward", [4, 5], [6], "Add"),
    record("forward", [0, 1], [2], "Convolution2DFunction"),
    record("backward", [3, 2], [2], "ReLU"),
    record("forward", [3], [4, 5], "SplitAxis"),
    record("forward", [5, 8], [7], "Deconvolution2DFunction"),
]


def cg_lines(variables=VARIABLES, records=RECORDS):
    return [f"{len(variables)} {len(records)}", *var_lines(variables),
            *(line for rec in records for line in rec)]


def write(tmp_path, lines, name="cg_test.txt", newline=True):
    p = tmp_path / name
    p.write_text("\n".join(lines) + ("\n" if newline else ""))
    return p


def line_of(lines, text, start=0):
    """1-based number of the first line equal to `text` at or after 1-based line `start`."""
    return next(i + 1 for i, x in enumerate(lines) if x == text and i + 1 >= start)


class TestRead:
    def test_small_network(self, tmp_path):
        g = ls.read_cg(write(tmp_path, cg_lines()))
        assert set(g.labels) == {2, 3, 4, 6, 7}  # input 0, parameters 1, 8 dropped; 5 merged
        assert set(g.edges) == {(2, 3), (3, 4), (4, 6), (4, 7)}
        cost = dict(zip(g.labels, g.cost.tolist()))
        assert cost == {2: 10, 3: 1, 4: 1, 6: 1, 7: 1}
        memory = dict(zip(g.labels, g.memory.tolist()))
        assert memory == {2: 64, 3: 64, 4: 16 + 32, 6: 16, 7: 128}
        assert g.attrs[4] == {"function": "SplitAxis", "line": g.attrs[4]["line"],
                              "outputs": [4, 5]}
        assert g.attrs[2]["function"] == "Convolution2DFunction"
        assert "outputs" not in g.attrs[2]
        sinks = {v for v in g.labels if not any(u == v for u, _ in g.edges)}
        assert sinks == {6, 7}
        sources = {v for v in g.labels if not any(w == v for _, w in g.edges)}
        assert sources == {2}

    def test_record_line_attribute(self, tmp_path):
        lines = cg_lines()
        g = ls.read_cg(write(tmp_path, lines))
        # the record of node 2 (conv) is the third record
        assert lines[g.attrs[2]["line"] - 1] == "forward"
        assert lines[g.attrs[2]["line"] + 3] == "2"  # forward, 2 1, 0 _, 1 _, 2

    def test_no_final_newline(self, tmp_path):
        g = ls.read_cg(write(tmp_path, cg_lines(), newline=False))
        assert g.n == 5

    def test_custom_cost(self, tmp_path):
        g = ls.read_cg(write(tmp_path, cg_lines()), cost=len)
        assert dict(zip(g.labels, g.cost.tolist()))[2] == len("Convolution2DFunction")

    def test_paper_cost(self):
        assert ls.paper_cost("Convolution2DFunction") == 10
        assert ls.paper_cost("ConvolutionND") == 10
        assert ls.paper_cost("Deconvolution2DFunction") == 1
        assert ls.paper_cost("ReLU") == 1

    def test_pathlike_and_str(self, tmp_path):
        p = write(tmp_path, cg_lines())
        assert ls.read_cg(str(p)) == ls.read_cg(p)

    def test_isolated_activation_is_a_node(self, tmp_path):
        variables = [(0, 8, "0"), (1, 4, "_")]
        records = [record("forward", [0], [1], "Sigmoid")]
        g = ls.read_cg(write(tmp_path, cg_lines(variables, records)))
        assert g.labels == (1,) and g.edges == [] and g.memory.tolist() == [4]


class TestMalformed:
    """Every malformed variant names the file and the line."""

    def check(self, tmp_path, lines, lineno, match):
        p = write(tmp_path, lines)
        with pytest.raises(ls.FormatError, match=match) as info:
            ls.read_cg(p)
        err = info.value
        assert err.path == str(p)
        assert err.lineno == lineno
        assert str(err).startswith(f"{p}, line {lineno}: ")
        return err

    @pytest.mark.parametrize("header", ["9", "9 6 1", "a b", ""])
    def test_bad_header(self, tmp_path, header):
        lines = cg_lines()
        lines[0] = header
        self.check(tmp_path, lines, 1, "n_vars n_records")

    @pytest.mark.parametrize("header", ["-1 6", "9 -1"])
    def test_negative_header_counts(self, tmp_path, header):
        # regression: negative counts used to fail later, at line 2 or at the first record
        lines = cg_lines()
        lines[0] = header
        self.check(tmp_path, lines, 1, "negative count")

    def test_bad_variable_line(self, tmp_path):
        lines = cg_lines()
        lines[3] = "2 64"
        self.check(tmp_path, lines, 4, "id bytes name")
        lines[3] = "2 many _"
        self.check(tmp_path, lines, 4, "integer id and bytes")
        lines[3] = "2 -64 _"
        self.check(tmp_path, lines, 4, "negative bytes")

    def test_variable_defined_twice(self, tmp_path):
        lines = cg_lines()
        lines[4] = "2 64 _"
        self.check(tmp_path, lines, 5, "variable id 2 is defined twice")

    def test_unknown_input_id(self, tmp_path):
        lines = cg_lines()
        i = lines.index("2 _")  # first record's input
        lines[i] = "42 _"
        self.check(tmp_path, lines, i + 1, "unknown variable id 42")

    def test_unknown_output_id(self, tmp_path):
        lines = cg_lines()
        i = lines.index("2 _") + 1  # first record's output "3"
        assert lines[i] == "3"
        lines[i] = "99"
        self.check(tmp_path, lines, i + 1, "unknown variable id 99")

    def test_bad_record_kind(self, tmp_path):
        lines = cg_lines()
        i = line_of(lines, "forward")
        lines[i - 1] = "sideways"
        self.check(tmp_path, lines, i, "'forward' or 'backward'")

    def test_bad_counts(self, tmp_path):
        lines = cg_lines()
        i = line_of(lines, "forward") + 1
        lines[i - 1] = "1"
        self.check(tmp_path, lines, i, "'k p'")
        lines[i - 1] = "1 -1"
        self.check(tmp_path, lines, i, "negative counts")

    @pytest.mark.parametrize("cut", [1, 2, 5, 20])
    def test_truncated(self, tmp_path, cut):
        lines = cg_lines()[:-cut]
        self.check(tmp_path, lines, len(lines) + 1, "unexpected end of file")

    def test_bad_json(self, tmp_path):
        lines = cg_lines()
        i = [k + 1 for k, x in enumerate(lines) if x == JSON][-2]  # second-to-last record
        lines[i - 1] = '{"rank": 3,'
        self.check(tmp_path, lines, i, "bad JSON")

    def test_empty_class_name(self, tmp_path):
        lines = cg_lines()
        i = lines.index("ReLU")
        lines[i] = "  "
        self.check(tmp_path, lines, i + 1, "empty function class name")

    def test_produced_twice(self, tmp_path):
        records = [*RECORDS, record("forward", [2], [3], "ReLU")]
        lines = cg_lines(records=records)
        first = line_of(lines, "forward")
        last = len(lines) - 6 + 1  # the extra record's "forward" line
        assert lines[last - 1] == "forward"
        self.check(tmp_path, lines, last, f"activation 3 is produced twice .*line {first}")

    def test_produces_parameter(self, tmp_path):
        records = [*RECORDS, record("forward", [7], [8], "ReLU")]
        lines = cg_lines(records=records)
        self.check(tmp_path, lines, len(lines) - 5, "produces parameter 8")

    def test_produces_model_input(self, tmp_path):
        records = [*RECORDS, record("forward", [7], [0], "ReLU")]
        lines = cg_lines(records=records)
        self.check(tmp_path, lines, len(lines) - 5, "produces input 0")

    def test_forward_without_outputs(self, tmp_path):
        records = [*RECORDS, record("forward", [7], [], "Print")]
        lines = cg_lines(records=records)
        self.check(tmp_path, lines, len(lines) - 4, "no outputs")

    def test_never_produced(self, tmp_path):
        # regression: the error used to carry no line; it is the variable's declaration line
        variables = [*VARIABLES, (9, 4, "_")]
        lines = cg_lines(variables=variables)
        self.check(tmp_path, lines, 1 + len(variables), "activation.*9.*never produced")

    def test_never_produced_names_file_and_id(self, tmp_path):
        variables = [*VARIABLES, (9, 4, "_")]
        p = write(tmp_path, cg_lines(variables=variables))
        with pytest.raises(ls.FormatError, match=r"cg_test\.txt.*\[9\].*never produced"):
            ls.read_cg(p)

    @pytest.mark.parametrize("extra", [["forward"], ["", "forward"], ["garbage", "more"],
                                       ["  ", "x", ""]])
    def test_trailing_lines(self, tmp_path, extra):
        lines = cg_lines()
        n = len(lines)
        self.check(tmp_path, lines + extra, n + 1, "unexpected line")

    def test_consumes_own_output(self, tmp_path):
        records = [*RECORDS, record("forward", [9], [9], "Loop")]
        lines = cg_lines(variables=[*VARIABLES, (9, 4, "_")], records=records)
        self.check(tmp_path, lines, len(lines) - 5, "consumes its own output 9")

    def test_cycle_is_graph_error(self, tmp_path):
        variables = [(0, 4, "_"), (1, 4, "_")]
        records = [record("forward", [0], [1], "A"), record("forward", [1], [0], "B")]
        p = write(tmp_path, cg_lines(variables, records))
        with pytest.raises(ls.GraphError, match=r"cg_test\.txt.*cycle"):
            ls.read_cg(p)

    def test_missing_file(self, tmp_path):
        with pytest.raises(OSError):
            ls.read_cg(tmp_path / "nope.txt")


# -- the authors' files ---------------------------------------------------------------------------


def _graph_dir():
    env = os.environ.get("LOWERSET_GRAPHS")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "graphs"


NAMES = ["densenet", "googlenet", "pspnet", "resnet152", "resnet50", "unet", "vgg19"]


@pytest.mark.parametrize("name", NAMES)
def test_authors_file_totals(name):
    """Independent tally: #V = forward records, M(V) = bytes of all activations."""
    path = _graph_dir() / f"cg_{name}.txt"
    if not path.exists():
        pytest.skip(f"{path} not found; set LOWERSET_GRAPHS to the folder of the cg_*.txt files")
    lines = path.read_text().splitlines()
    n_vars = int(lines[0].split()[0])
    act_bytes = sum(int(x.split()[1]) for x in lines[1:1 + n_vars] if x.split()[2] == "_")
    g = ls.read_cg(path)
    assert g.total_memory() == act_bytes
    assert g.n == sum(1 for x in lines[1 + n_vars:] if x == "forward")


# -- JSON graph files -----------------------------------------------------------------------------


class TestGraphJSON:
    def test_round_trip(self, tmp_path):
        g = ls.Graph(["x", "y", "z"], [("x", "y"), ("x", "z")], {"x": 10, "y": 1, "z": 2},
                     {"x": 0, "y": 5, "z": 7})
        p = tmp_path / "g.json"
        ls.save_graph(g, p)
        data = json.loads(p.read_text())
        assert data["format"] == "lowerset.graph" and data["version"] == 1
        h = ls.load_graph(p)
        assert h == g and h.labels == g.labels

    def test_round_trip_read_cg(self, tmp_path):
        g = ls.read_cg(write(tmp_path, cg_lines()))
        p = tmp_path / "g.json"
        ls.save_graph(g, p)
        assert ls.load_graph(p) == g

    def test_bad_json(self, tmp_path):
        p = tmp_path / "g.json"
        p.write_text("{\n\n  nope")
        with pytest.raises(ls.FormatError, match="g.json, line 3") as info:
            ls.load_graph(p)
        assert info.value.lineno == 3

    @pytest.mark.parametrize("data", [{"format": "lowerset.strategy", "version": 1},
                                      {"format": "lowerset.graph", "version": 2}, [1, 2]])
    def test_wrong_format(self, tmp_path, data):
        p = tmp_path / "g.json"
        p.write_text(json.dumps(data))
        with pytest.raises(ls.FormatError, match="lowerset.graph"):
            ls.load_graph(p)

    @pytest.mark.parametrize("drop", ["nodes", "edges", "cost", "memory"])
    def test_missing_key(self, tmp_path, drop):
        # regression: a missing entry used to raise KeyError
        data = {"format": "lowerset.graph", "version": 1, "nodes": [0], "edges": [],
                "cost": [1], "memory": [1]}
        del data[drop]
        p = tmp_path / "g.json"
        p.write_text(json.dumps(data))
        with pytest.raises(ls.FormatError, match=f"g.json.*{drop}"):
            ls.load_graph(p)

    def test_invalid_graph(self, tmp_path):
        p = tmp_path / "g.json"
        p.write_text(json.dumps({"format": "lowerset.graph", "version": 1, "nodes": [0, 1],
                                 "edges": [[0, 1], [1, 0]], "cost": [1, 1], "memory": [1, 1]}))
        with pytest.raises(ls.GraphError, match="cycle"):
            ls.load_graph(p)


def test_graph_json_keeps_attrs(tmp_path):
    g = ls.Graph(["a", "b"], [("a", "b")], {"a": 1, "b": 10}, {"a": 4, "b": 8},
                 attrs={"a": {"function": "ReLU"}, "b": {"function": "Split", "outputs": [3, 4]}})
    p = tmp_path / "g.json"
    ls.save_graph(g, p)
    h = ls.load_graph(p)
    assert h == g and h.attrs == g.attrs


def test_graph_json_rejects_unserialisable_attrs(tmp_path):
    g = ls.Graph(["a"], [], {"a": 1}, {"a": 4}, attrs={"a": {"obj": object()}})
    with pytest.raises(ls.GraphError, match="JSON"):
        ls.save_graph(g, tmp_path / "g.json")
