"""Block-repetitive forward graphs of any depth, with default execution facts, for the planner's
scaling benchmark (``examples/bench_scale.py``) and its results test (``tests/test_scale.py``).

Four families, each a stack of one block repeated; costs are the paper's preset (10 for a
matrix product or a convolution, 1 otherwise), memory is bytes per output:

- ``transformer``: a decoder block of 16 nodes (layer norm, q/k/v in parallel, attention
  scores, softmax and dropout at 4x the hidden bytes, the attention product, its projection,
  a residual add, layer norm, an MLP whose hidden layer is 4x wide, dropout, a residual add);
- ``resnet``: bottleneck blocks (1x1, 3x3, 1x1 convolutions with batch normalization, a
  projection shortcut opening each stage) in four stages sharing them 3:4:6:3, the
  activations halving from stage to stage;
- ``unet``: `depth` encoder levels (two convolutions, a pooling) and as many decoder levels
  (upsampling, a concatenation with the encoder's skip, two convolutions), activations
  halving down to a sixteenth and staying there;
- ``inception``: blocks of four parallel branches (a 1x1 convolution; three of 1x1, ReLU,
  3x3) joined by a concatenation.

Usage: ``build("transformer", 24)`` or ``sized("resnet", 2500)`` (the depth whose graph has
about that many nodes).
"""

import lowerset as ls

MB = 1 << 20

#: The families and their depth parameter.
FAMILIES = ("transformer", "resnet", "unet", "inception")


class _Builder:
    def __init__(self):
        self.nodes, self.edges, self.cost, self.memory = [], [], {}, {}

    def add(self, name, preds, cost, memory):
        self.nodes.append(name)
        self.cost[name] = cost
        self.memory[name] = int(memory)
        self.edges += [(p, name) for p in preds]
        return name

    def graph(self):
        return ls.Graph(self.nodes, self.edges, self.cost, self.memory)


def transformer(blocks, hidden=4 * MB):
    """A decoder stack of `blocks` blocks (16 nodes each) between an embedding and a loss."""
    b = _Builder()
    x = b.add("embed", [], 1, hidden)
    h, w = hidden, 4 * hidden
    for i in range(blocks):
        p = f"b{i}."
        ln1 = b.add(p + "ln1", [x], 1, h)
        q, k, v = (b.add(p + name, [ln1], 10, h) for name in ("q", "k", "v"))
        scores = b.add(p + "scores", [q, k], 10, w)
        soft = b.add(p + "softmax", [scores], 1, w)
        drop = b.add(p + "attn_drop", [soft], 1, w)
        attn = b.add(p + "attn", [drop, v], 10, h)
        proj = b.add(p + "proj", [attn], 10, h)
        add1 = b.add(p + "add1", [x, proj], 1, h)
        ln2 = b.add(p + "ln2", [add1], 1, h)
        fc1 = b.add(p + "fc1", [ln2], 10, w)
        gelu = b.add(p + "gelu", [fc1], 1, w)
        fc2 = b.add(p + "fc2", [gelu], 10, h)
        drop2 = b.add(p + "drop2", [fc2], 1, h)
        x = b.add(p + "add2", [add1, drop2], 1, h)
    b.add("loss", [x], 1, 4)
    return b.graph()


def resnet(blocks, base=8 * MB):
    """`blocks` bottleneck blocks (10 nodes each, 12 where a projection opens a stage) in four
    stages sharing them 3:4:6:3, at least one each."""
    counts = [max(1, round(blocks * r / 16)) for r in (3, 4, 6, 3)]
    b = _Builder()
    x = b.add("pool0", [b.add("conv0", [], 10, base)], 1, base)
    for s, count in enumerate(counts):
        m = base >> s
        for i in range(count):
            p = f"s{s}b{i}."
            y = x
            for j, mem in enumerate((m // 4, m // 4, m)):
                y = b.add(p + f"bn{j}", [b.add(p + f"conv{j}", [y], 10, mem)], 1, mem)
                if j < 2:
                    y = b.add(p + f"relu{j}", [y], 1, mem)
            skip = x
            if i == 0:
                skip = b.add(p + "proj_bn", [b.add(p + "proj", [x], 10, m)], 1, m)
            x = b.add(p + "relu", [b.add(p + "add", [y, skip], 1, m)], 1, m)
    b.add("fc", [x], 1, 4096)
    return b.graph()


def unet(depth, base=4 * MB):
    """A U-Net of `depth` levels (11 nodes a level)."""
    b = _Builder()
    x = b.add("in", [], 10, base)
    skips = []
    for d in range(depth):
        m = base >> min(d, 4)
        p = f"e{d}."
        y = b.add(p + "relu1", [b.add(p + "conv1", [x], 10, m)], 1, m)
        y = b.add(p + "relu2", [b.add(p + "conv2", [y], 10, m)], 1, m)
        skips.append((y, m))
        x = b.add(p + "pool", [y], 1, m // 2 if d < 4 else m)
    x = b.add("middle", [x], 10, base >> 4)
    for d in reversed(range(depth)):
        skip, m = skips[d]
        p = f"d{d}."
        cat = b.add(p + "concat", [b.add(p + "up", [x], 10, m), skip], 1, 2 * m)
        y = b.add(p + "relu1", [b.add(p + "conv1", [cat], 10, m)], 1, m)
        x = b.add(p + "relu2", [b.add(p + "conv2", [y], 10, m)], 1, m)
    b.add("loss", [x], 1, 4)
    return b.graph()


def inception(blocks, width=2 * MB):
    """`blocks` blocks of four parallel branches (11 nodes a block)."""
    b = _Builder()
    x = b.add("stem", [], 10, 2 * width)
    for i in range(blocks):
        p = f"i{i}."
        outs = [b.add(p + "b0", [x], 10, width)]
        for j in range(1, 4):
            y = b.add(p + f"b{j}.relu", [b.add(p + f"b{j}.conv1", [x], 10, width // 2)], 1,
                      width // 2)
            outs.append(b.add(p + f"b{j}.conv3", [y], 10, width))
        x = b.add(p + "concat", outs, 1, 4 * width)
    b.add("loss", [x], 1, 4)
    return b.graph()


_NODES_PER_STEP = {"transformer": 16, "resnet": 10, "unet": 11, "inception": 11}


def build(family, depth):
    """The graph of `family` (one of :data:`FAMILIES`) at depth parameter `depth`."""
    return {"transformer": transformer, "resnet": resnet, "unet": unet,
            "inception": inception}[family](depth)


def sized(family, nodes):
    """(depth, graph) of `family` with about `nodes` nodes (at least the smallest depth)."""
    depth = max(1, round(nodes / _NODES_PER_STEP[family]))
    return depth, build(family, depth)
