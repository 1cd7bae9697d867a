"""Faithfulness of the benchmark networks (examples/models) to the authors' graphs.

Each network is traced once (forward + loss, train mode, batch 1) with a small walker over
Chainer's graph (:func:`_graph_of`, independent of ``chainer_ext``) and compared with the
authors' ``cg_<name>.txt`` (paper Sec. 5, Table 1):

- #V equals the paper's;
- the graphs are isomorphic as labelled DAGs: every node carries a fingerprint of its whole
  ancestry and its whole descendancy, each built from the producing function's class name,
  its attributes (strides, pads, dilations, kernel sizes, dropout ratios, resize sizes, crop
  slices...) and, at full resolution, its bytes scaled to the authors' dump batch; the two
  multisets of fingerprints must be equal;
- the parameters (names and bytes) equal those the authors' file lists.

At the paper's resolution the bytes of every node equal the authors' after scaling from batch 1
to the dump batch (32, or 8 for U-Net, 1 for PSPNet). Those traces take from under a second
(GoogLeNet) to about 15 s (U-Net 572x572) on a CPU; PSPNet at 713x713 takes about 45 s and
6 GB and is marked ``slow``. U-Net and PSPNet also have a reduced-resolution test that checks
the structure, the resolution-independent attributes and the parameters.
"""

import collections
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

chainer = pytest.importorskip("chainer")
nx = pytest.importorskip("networkx")

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import lowerset  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

# Function attributes compared with the authors' JSON, when both sides have them.
_ATTRS = ("sy", "sx", "ph", "pw", "dy", "dx", "groups", "cover_all", "kh", "kw", "axis",
          "dropout_ratio", "value", "n", "k", "alpha", "beta", "eps", "normalize",
          "ignore_label", "reduce", "out_H", "out_W", "outh", "outw", "slices")
# Attributes that depend on the input resolution (not compared at a reduced resolution).
_RES_ATTRS = ("out_H", "out_W", "outh", "outw", "slices")
# Chainer 7 renames: F.max_pooling_2d now builds a MaxPoolingND (ksize/stride/pad tuples);
# the authors' Chainer built a MaxPooling2D (kh/kw/sy/sx/ph/pw). Same computation and outputs.
_ALIASES = {"MaxPoolingND": "MaxPooling2D"}
# Chainer 7's Deconvolution2DFunction stores cover_all=None ("infer", i.e. False when no
# outsize is given); the authors' Chainer stored False. Same output size.
_NONE_MEANS = {("Deconvolution2DFunction", "cover_all"): False}


def _graphs_dir():
    env = os.environ.get("LOWERSET_GRAPHS")
    if env:
        return Path(env)
    # tests/ -> repository root -> its parent holds shared/graphs (the checkout layout
    # <workspace>/main + <workspace>/shared)
    return _ROOT.parent / "shared" / "graphs"


def _graph_path(net):
    path = _graphs_dir() / net.graph_file
    if not path.is_file():
        pytest.skip(f"authors' graph {path} not found (set LOWERSET_GRAPHS to the folder "
                    "holding cg_*.txt)")
    return path


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _graph_of(loss):
    """Forward graph behind ``loss`` as a networkx DiGraph, one node per FunctionNode.

    Walks from ``loss.creator_node`` through ``FunctionNode.inputs`` (VariableNodes) and their
    ``creator_node``. Model inputs and parameters (VariableNodes without a creator) are not
    nodes. Node attributes: ``function`` (class name), ``memory`` (bytes of its outputs),
    ``shapes`` (their shapes), ``attrs`` (the :data:`_ATTRS` the function has) and ``rank``.
    Edges go from the producer of an input to its consumer.
    """
    G = nx.DiGraph()
    ids = {id(loss.creator_node): 0}  # id(FunctionNode) -> node label, in discovery order
    stack = [loss.creator_node]
    while stack:
        f = stack.pop()
        u = ids[id(f)]
        outs = [o() for o in f.outputs]
        outs = [o for o in outs if o is not None]
        shapes = [tuple(o.shape) for o in outs]
        memory = sum(int(np.prod(s, dtype=np.int64)) * np.dtype(o.dtype).itemsize
                     for s, o in zip(shapes, outs))
        attrs = {a: _jsonable(getattr(f, a)) for a in _ATTRS if hasattr(f, a)}
        if "slices" in attrs:
            attrs["slices"] = str(f.slices)
        fname = type(f).__name__
        for (fn, a), default in _NONE_MEANS.items():
            if fname == fn and attrs.get(a, 0) is None:
                attrs[a] = default
        if fname == "MaxPoolingND" and len(f.ksize) == 2:
            attrs.update(kh=f.ksize[0], kw=f.ksize[1], sy=f.stride[0], sx=f.stride[1],
                         ph=f.pad[0], pw=f.pad[1])
        G.add_node(u, function=_ALIASES.get(fname, fname), memory=memory, shapes=shapes,
                   attrs=attrs, rank=f.rank)
        for x in f.inputs:
            p = x.creator_node
            if p is None:
                continue
            if id(p) not in ids:
                ids[id(p)] = len(ids)
                stack.append(p)
            G.add_edge(ids[id(p)], u)
    return G


def _read_reference(path):
    """The authors' graph as a DiGraph with the attributes :func:`_graph_of` produces."""
    g = lowerset.read_cg(path)
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    G = g.to_networkx()
    params = {}
    n_vars = int(lines[0].split()[0])
    for line in lines[1:n_vars + 1]:
        _, b, name = line.split(None, 2)
        if name.startswith("/"):
            params[name] = int(b)
    for v in G.nodes:
        a = g.attrs[v]
        i = a["line"]  # 1-based line of "forward"; lines[i] is "k p"
        k, p = map(int, lines[i].split())
        raw = json.loads(lines[i + 1 + k + p + 1])
        G.nodes[v]["function"] = a["function"]
        G.nodes[v]["attrs"] = {key: raw[key] for key in _ATTRS if key in raw}
        G.nodes[v]["rank"] = raw.get("rank", 0)
    for i, v in enumerate(g.labels):
        G.nodes[v]["memory"] = int(g.memory[i])
    return G, params


def _digest(*parts):
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def _fingerprints(G, label):
    """Per node: (hash of label and ancestry, hash of label and descendancy).

    Two DAGs whose multisets of ``up + down`` hashes agree have the same labelled structure up
    to hash collisions (a Weisfeiler-Lehman refinement along edge directions).
    """
    order = list(nx.topological_sort(G))
    own = {v: label(v) for v in G}
    up, down = {}, {}
    for v in order:
        up[v] = _digest(own[v], sorted(up[p] for p in G.predecessors(v)))
    for v in reversed(order):
        down[v] = _digest(own[v], sorted(down[s] for s in G.successors(v)))
    return {v: (up[v], down[v]) for v in G}


def _common_attrs(A, B, attrs):
    """Per function name, the attributes among ``attrs`` that both graphs record for it.

    Chainer versions differ in what they store (Chainer 7's ``SoftmaxCrossEntropy`` has an
    ``eps`` the authors' does not); only what both sides have is compared.
    """
    keys = []
    for G in (A, B):
        k = collections.defaultdict(set)
        for _, d in G.nodes(data=True):
            k[d["function"]].update(a for a in d["attrs"] if a in attrs)
        keys.append(k)
    return {f: keys[0][f] & keys[1][f] for f in keys[0]}


def _label(G, attrs, *, with_bytes=False):
    """Node label: function name, its ``attrs[function]`` and (if ``with_bytes``) its bytes."""
    def lab(v):
        d = G.nodes[v]
        keep = attrs.get(d["function"], ())
        a = tuple(sorted((k, json.dumps(x)) for k, x in d["attrs"].items() if k in keep))
        if not with_bytes:
            return (d["function"], a)
        return (d["function"], a, d["memory"])
    return lab


def _scaled(G, b, B):
    """Copy of traced ``G`` with memory scaled from batch ``b`` to ``B``."""
    H = G.copy()
    for v, d in H.nodes(data=True):
        total = 0
        for s in d["shapes"]:
            n = int(np.prod(s, dtype=np.int64)) * 4
            if len(s) and s[0] == b:
                n = n // b * B
            total += n
        # float32 everywhere in these networks; verify against the recorded bytes
        assert total // B * b == d["memory"] or d["shapes"] == [()]
        d["memory"] = total
    return H


def _mismatch_report(A, B, fa, fb, what):
    """Name the earliest nodes whose label or ancestry differs (their predecessors match)."""
    lines = [what]
    for side in (0, 1):
        ca = collections.Counter(f[side] for f in fa.values())
        cb = collections.Counter(f[side] for f in fb.values())
        only_a, only_b = ca - cb, cb - ca
        if not only_a and not only_b:
            continue
        lines.append(("ancestry" if side == 0 else "descendancy")
                     + f": {sum(only_a.values())} traced node(s) without a match; first:")
        order_a = list(nx.topological_sort(A))
        order_b = list(nx.topological_sort(B))
        if side:
            order_a.reverse()
            order_b.reverse()
        for tag, G, f, only, order in (("traced ", A, fa, only_a, order_a),
                                       ("authors", B, fb, only_b, order_b)):
            for v in [v for v in order if f[v][side] in only][:3]:
                d = G.nodes[v]
                lines.append(f"  {tag} {d['function']} {d['memory']} {d['attrs']} "
                             f"rank {d['rank']}")
        break
    return "\n".join(lines)


_TRACES = {}


def _trace(name, size=None, batch=1):
    """Trace ``NETWORKS[name]`` once per (size, batch); returns (graph, params, seconds)."""
    key = (name, size, batch)
    if key not in _TRACES:
        net = NETWORKS[name]
        t0 = time.perf_counter()
        with chainer.using_config("train", True), chainer.using_config("enable_backprop", True), \
                warnings.catch_warnings():
            # PSPNet at the authors' batch 1: the 1x1 pyramid bin gives BatchNormalization a
            # single value per channel, and Chainer 7 warns (the output is zero, as it was for
            # the authors); the graph is what we compare.
            warnings.filterwarnings("ignore", "A batch with no more than one sample",
                                    UserWarning)
            model = net.build(size)
            x, t = net.make_batch(batch, size)
            loss = net.loss(model, x, t)
            G = _graph_of(loss)
        params = {path: p.array.nbytes for path, p in model.namedparams()}
        _TRACES[key] = (G, params, time.perf_counter() - t0)
        del model, loss
    return _TRACES[key]


def _check(name, size=None):
    net = NETWORKS[name]
    ref, ref_params = _read_reference(_graph_path(net))
    G, params, _ = _trace(name, size)
    assert G.number_of_nodes() == net.paper_nodes, (
        f"{name}: traced #V {G.number_of_nodes()}, paper {net.paper_nodes}")
    assert ref.number_of_nodes() == net.paper_nodes
    assert G.number_of_edges() == ref.number_of_edges()
    assert (sorted(collections.Counter(nx.get_node_attributes(G, "function").values()).items())
            == sorted(collections.Counter(nx.get_node_attributes(ref, "function").values())
                      .items()))
    # parameters: the authors' names (minus a '/predictor' prefix where we have none) and bytes
    norm = {k[len("/predictor"):] if not any(p.startswith("/predictor") for p in params)
            and k.startswith("/predictor") else k: b for k, b in ref_params.items()}
    assert params == norm, sorted(set(params.items()) ^ set(norm.items()))[:6]
    full = size is None or tuple(size) == net.input_size
    if full:
        Gs = _scaled(G, 1, net.dump_batch)
        keep = _common_attrs(Gs, ref, _ATTRS)
        fa = _fingerprints(Gs, _label(Gs, keep, with_bytes=True))
        fb = _fingerprints(ref, _label(ref, keep, with_bytes=True))
    else:
        Gs = G
        keep = _common_attrs(G, ref, [a for a in _ATTRS if a not in _RES_ATTRS])
        if name == "pspnet":  # pyramid pooling kernels follow the input size
            keep["AveragePooling2D"] = set()
        fa = _fingerprints(G, _label(G, keep))
        fb = _fingerprints(ref, _label(ref, keep))
    assert (collections.Counter(a + b for a, b in fa.values())
            == collections.Counter(a + b for a, b in fb.values())), \
        _mismatch_report(Gs, ref, fa, fb, name)
    if full:
        assert (sum(nx.get_node_attributes(Gs, "memory").values())
                == sum(nx.get_node_attributes(ref, "memory").values()))


@pytest.mark.parametrize("name", ["vgg19", "resnet50", "resnet152", "googlenet",
                                  "densenet161", "unet"])
def test_full_resolution(name):
    """#V, structure, attributes and per-node bytes (scaled to the dump batch) match."""
    _check(name)


@pytest.mark.slow
def test_pspnet_full_resolution():
    """PSPNet at 713x713: about 45 s and 6 GB of host memory on a CPU."""
    _check("pspnet")


def test_unet_reduced_resolution():
    """U-Net at 188x188 (the smallest valid input): structure and attributes only."""
    _check("unet", (188, 188))


def test_pspnet_reduced_resolution():
    """PSPNet at 241x241 (feature map 31x31, still pooled to 6/3/2/1): structure only."""
    _check("pspnet", (241, 241))


def test_registry():
    assert sorted(NETWORKS) == sorted(["resnet50", "resnet152", "vgg19", "googlenet",
                                       "densenet161", "unet", "pspnet"])
    table1 = {"pspnet": (385, 2), "unet": (60, 8), "resnet50": (176, 96),
              "resnet152": (516, 48), "vgg19": (46, 64), "densenet161": (568, 32),
              "googlenet": (134, 256)}
    for name, (nodes, batch) in table1.items():
        assert (NETWORKS[name].paper_nodes, NETWORKS[name].paper_batch) == (nodes, batch)


def test_make_batch_shapes():
    x, t = NETWORKS["unet"].make_batch(2, (188, 188))
    assert x.shape == (2, 1, 188, 188) and x.dtype == np.float32
    assert t.shape == (2, 4, 4) and t.dtype == np.int32
    x, t = NETWORKS["pspnet"].make_batch(1)
    assert x.shape == (1, 3, 713, 713) and t.shape == (1, 713, 713)
    assert t.min() >= 0 and t.max() < 17
    x, t = NETWORKS["resnet50"].make_batch(3, seed=1)
    assert x.shape == (3, 3, 224, 224) and t.shape == (3,) and t.max() < 1000
    with pytest.raises(ValueError, match="16 \\* k \\+ 124"):
        NETWORKS["unet"].make_batch(1, (200, 200))


def _check_backward(name, size, batch=2):
    """One training step's gradients exist, are finite and reach every parameter."""
    net = NETWORKS[name]
    with chainer.using_config("train", True):
        model = net.build(size)
        x, t = net.make_batch(batch, size)
        loss = net.loss(model, x, t)
        assert loss.shape == () and np.isfinite(float(loss.array))
        model.cleargrads()
        loss.backward()
    for path, p in model.namedparams():
        assert p.grad is not None, path
        assert np.isfinite(p.grad).all(), path


def test_unet_backward():
    _check_backward("unet", (188, 188))


@pytest.mark.slow
def test_pspnet_backward():
    """Also exercises ResizeImagesGrad with the NumPy >= 1.24 fix (chainer_ext/_compat.py)."""
    _check_backward("pspnet", (241, 241))


def test_googlenet_loss_is_sum_of_three():
    net = NETWORKS["googlenet"]
    model = net.build()
    x, t = net.make_batch(2, seed=3)
    with chainer.using_config("train", False), chainer.no_backprop_mode():
        y1, y2, y3 = model.logits(x)
        expected = sum(float(chainer.functions.softmax_cross_entropy(y, t).array)
                       for y in (y1, y2, y3))
        got = float(net.loss(model, x, t).array)
    assert got == pytest.approx(expected, rel=1e-5)


def test_comparison_detects_changes():
    """The fingerprint comparison fails on one changed byte count, attribute or edge."""
    ref, _ = _read_reference(_graph_path(NETWORKS["resnet50"]))
    keep = _common_attrs(ref, ref, _ATTRS)

    def fingerprint_multiset(G):
        return collections.Counter(a + b for a, b in
                                   _fingerprints(G, _label(G, keep, with_bytes=True)).values())

    base = fingerprint_multiset(ref)
    assert fingerprint_multiset(ref.copy()) == base
    order = list(nx.topological_sort(ref))
    conv = next(v for v in order if ref.nodes[v]["function"] == "Convolution2DFunction")
    changed = ref.copy()
    changed.nodes[conv]["memory"] += 4
    assert fingerprint_multiset(changed) != base
    changed = ref.copy()
    changed.nodes[conv]["attrs"] = dict(changed.nodes[conv]["attrs"], ph=0)
    assert fingerprint_multiset(changed) != base
    adds = [v for v in order if ref.nodes[v]["function"] == "Add"]
    changed = ref.copy()
    u = next(iter(changed.predecessors(adds[1])))
    changed.remove_edge(u, adds[1])
    changed.add_edge(u, adds[2])
    assert fingerprint_multiset(changed) != base
