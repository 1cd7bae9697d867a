"""torch_ext.RecomputeContext: every plan runs its schedule event by event, with gradients,
losses and buffers bitwise equal to a plain step and the measured peak the schedule's."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import (  # noqa: E402
    HookUsageError,
    RecomputeContext,
    StrategyMismatchError,
    _branches,
    _compat,
    _replay,  # noqa: E402
)
from torch_ext import executor as executor_module  # noqa: E402
from torch_nets import NETS, cut_plan, first_difference, make, plan_recomputing, plans, save, step  # noqa

#: How far the measured peak may be from the schedule's (bytes): the profiler sees every CPU
#: allocation the step makes, and the schedule counts them all, so the two agree to the byte on
#: these nets; a few hundred bytes leave room for an allocator's rounding elsewhere.
SLACK = 512

_CACHE = {}


def _net(name):
    if name not in _CACHE:
        model, fn, graph = make(name)
        named = plans(graph)
        if name == "dropout":
            named["random"] = plan_recomputing(graph, lambda a: a.get("random"))
        _CACHE[name] = (model, fn, graph, save(model), named)
    return _CACHE[name]


def check_plan(name, plan_name):
    """Run net `name` plainly and under the plan; assert what the executor promises."""
    model, fn, graph, state, named = _net(name)
    plan = named[plan_name]
    plain, plain_peak, _ = step(model, fn, state)
    planned, peak, ctx = step(model, fn, state, plan)
    assert first_difference(plain, planned) is None
    assert ctx.events == list(plan.schedule.events)
    predicted = plan.schedule.peak - graph.facts.resident
    assert abs(peak - predicted) <= SLACK + 0.005 * peak, (peak, predicted)
    assert ctx.last_step["recomputed"] == plan.schedule.recomputed
    return plain_peak, peak


@pytest.mark.parametrize("plan_name", ["liveness", "min_peak", "chen", "solve", "paper"])
@pytest.mark.parametrize("name", NETS)
def test_plans_run_bitwise_with_the_schedule(name, plan_name):
    check_plan(name, plan_name)


@pytest.mark.parametrize("plan_name", ["min_peak", "chen", "solve"])
@pytest.mark.parametrize("name", NETS)
def test_plans_run_with_the_schedule_unrecorded(name, plan_name):
    """Without record the executor hooks only the backward calls with events beside them
    (:func:`torch_ext._branches.watched_calls`) and passes the others: the gradients stay
    bitwise, the same values are recomputed and the measured peak is still the schedule's
    (a free or a recomputation run at another backward call would move it)."""
    model, fn, graph, state, named = _net(name)
    plan = named[plan_name]
    plain, _, _ = step(model, fn, state)
    planned, peak, ctx = step(model, fn, state, plan, record=False)
    assert first_difference(plain, planned) is None
    predicted = plan.schedule.peak - graph.facts.resident
    assert abs(peak - predicted) <= SLACK + 0.005 * peak, (peak, predicted)
    assert ctx.last_step["recomputed"] == plan.schedule.recomputed


def test_watched_calls_by_hand():
    """A schedule written out by hand: the gap between backward 2 and backward 1 holds only
    a note (free_grad), the one before backward 0 a free and a recomputation."""
    plan = [("forward", 0, (0,)), ("forward", 1, (0,)), ("forward", 2, (0,)),
            ("seed_grad", 2, (0,)), ("backward", 2, ()), ("free_grad", 2, ()),
            ("backward", 1, ()), ("free_grad", 1, ()), ("free_value", 1, (0,)),
            ("recompute", 0, (0,)), ("backward", 0, ()), ("free_grad", 0, ()),
            ("free_value", 0, (0,))]
    before, after = _branches.watched_calls(plan)
    assert before == {2, 0}     # the first backward call; the one after a gap with events
    assert after == {1, 0}      # the one before that gap; the last
    cursor_plan = plan[:4]      # no backward call at all
    assert _branches.watched_calls(cursor_plan) == (set(), set())


def test_fewer_autograd_nodes_are_hooked_than_run_backward(monkeypatch):
    """The mechanism: a plan hooks the autograd nodes :func:`watched_calls` names, fewer than
    the backward calls of the step; with record every one."""
    model, fn, graph, state, named = _net("attention")
    plan = named["chen"]
    ctx = RecomputeContext(plan)
    with ctx:
        fn().backward()
    n = len(graph.facts.backward_order)
    before, after = _branches.watched_calls(lowerset.EventCursor(plan.schedule).plan)
    assert ctx._hooked_before == before and ctx._hooked_after == after
    assert len(before) < n and len(after) < n, (len(before), len(after), n)
    recording = RecomputeContext(plan, record=True)
    with recording:
        fn().backward()
    assert len(recording._hooked_before) == len(recording._hooked_after) == n


def test_too_few_hooks_are_caught(monkeypatch):
    """The planted fault: hooking only the first and the last backward call leaves the events
    between them unrun; the executor raises at the last one instead of passing them."""
    model, fn, graph, state, named = _net("attention")
    plan = named["chen"]
    assert plan.schedule.recomputed

    def ends_only(plan_events):
        calls = [e[1] for e in plan_events if e[0] == "backward"]
        return {calls[0]}, {calls[-1]}

    monkeypatch.setattr(_branches, "watched_calls", ends_only)
    with pytest.raises((StrategyMismatchError, HookUsageError)):
        with RecomputeContext(plan):
            fn().backward()


def test_dropout_draws_the_same_values_when_recomputed():
    check_plan("dropout", "random")


@pytest.mark.parametrize("name", NETS)
def test_plain_step_is_predicted(name):
    model, fn, graph, state, _ = _net(name)
    _, peak, _ = step(model, fn, state)
    predicted = lowerset.schedule(graph).peak - graph.facts.resident
    assert abs(peak - predicted) <= SLACK + 0.005 * peak, (peak, predicted)


def test_recomputation_lowers_the_measured_peak():
    plain_peak, peak = check_plan("convbn", "min_peak")
    _, _, graph, _, named = _net("convbn")
    assert named["min_peak"].schedule.recomputed
    assert peak < plain_peak - 20_000


def _free_views_with_their_base(self, kind, v, ks):
    """A wrong executor: freeing a value also frees the values that are views of it."""
    original_free(self, kind, v, ks)
    for (u, k) in list(self._held):
        if any(self._check.facts[u].output_views[k] >= 0
               and self._check.facts[u].args[self._check.facts[u].output_views[k]] == (v, j)
               for j in ks):
            self._held.pop((u, k), None)


original_free = RecomputeContext._free


def _no_replay(self):
    return None


@pytest.mark.parametrize("sabotage", ["never recompute", "random not restored",
                                      "views freed early"])
def test_the_checks_catch_a_wrong_executor(monkeypatch, sabotage):
    if sabotage == "never recompute":
        monkeypatch.setattr(RecomputeContext, "_recompute", lambda self, v, note=True: None)
        name, plan = "convbn", "min_peak"
    elif sabotage == "random not restored":
        monkeypatch.setattr(_replay._ReplayedRandom, "__enter__", _no_replay)
        monkeypatch.setattr(_replay._ReplayedRandom, "__exit__", lambda self, *e: False)
        name, plan = "dropout", "random"
    else:
        monkeypatch.setattr(RecomputeContext, "_free", _free_views_with_their_base)
        name, plan = "attention", "liveness"
    with pytest.raises((AssertionError, HookUsageError)):
        check_plan(name, plan)


def test_forward_without_backward_in_the_block():
    model, fn, graph, state, named = _net("convbn")
    plain, _, _ = step(model, fn, state)
    model.load_state_dict(state["model"])
    torch.set_rng_state(state["rng"])
    for p in model.parameters():
        p.grad = None
    with RecomputeContext(named["min_peak"]):
        loss = fn()
    loss.backward()   # outside: the dropped values were recomputed at exit
    got = {f"grad {n}": p.grad for n, p in model.named_parameters()}
    assert all(torch.equal(plain[k], got[k]) for k in got)


def test_several_steps_in_one_block_and_one_context_reused():
    model, fn, graph, state, named = _net("dropout")
    plan = named["min_peak"]
    model.load_state_dict(state["model"])
    torch.set_rng_state(state["rng"])
    ref = []
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        fn().backward()
        ref.append([p.grad.clone() for p in model.parameters()])
    model.load_state_dict(state["model"])
    torch.set_rng_state(state["rng"])
    ctx = RecomputeContext(plan, record=True)
    got = []
    with ctx:
        for _ in range(2):
            for p in model.parameters():
                p.grad = None
            fn().backward()
            got.append([p.grad.clone() for p in model.parameters()])
            assert ctx.events == list(plan.schedule.events)
    assert all(torch.equal(a, b) for r, g in zip(ref, got) for a, b in zip(r, g))
    with ctx:   # entered again for another step
        fn().backward()
    assert ctx.events == list(plan.schedule.events)


def _dispatches_in_backward(monkeypatch, ctx, run):
    """Calls of the context's dispatch mode made while autograd runs a backward node."""
    calls = []
    dispatch = RecomputeContext._dispatch

    def counting(self, func, args, kwargs):
        if _compat.current_autograd_node() is not None:
            calls.append(str(func))
        return dispatch(self, func, args, kwargs)

    monkeypatch.setattr(RecomputeContext, "_dispatch", counting)
    with ctx:
        run()
    return calls


@pytest.mark.parametrize("start", ["Tensor.backward", "autograd.backward", "autograd.grad"])
def test_the_backward_pass_runs_without_the_dispatch_mode(monkeypatch, start):
    """Each call that starts a backward pass runs with the dispatch mode set aside (no Python
    call per ATen operation of the backward pass), and the plan's gradients stay bitwise."""
    model, fn, graph, state, named = _net("dropout")
    plain, _, _ = step(model, fn, state)
    model.load_state_dict(state["model"])
    torch.set_rng_state(state["rng"])
    params = list(model.parameters())
    for p in params:
        p.grad = None
    plan = named["chen"]
    assert plan.schedule.recomputed
    ctx = RecomputeContext(plan, record=True)
    grads = {}

    def run():
        loss = fn()
        if start == "Tensor.backward":
            loss.backward()
        elif start == "autograd.backward":
            torch.autograd.backward(loss)
        else:
            grads.update(zip(params, torch.autograd.grad(loss, params)))

    assert _dispatches_in_backward(monkeypatch, ctx, run) == []
    assert ctx.events == list(plan.schedule.events)
    got = {f"grad {n}": grads.get(p, p.grad) for n, p in model.named_parameters()}
    assert all(torch.equal(plain[k], got[k]) for k in got)
    assert _compat.current_function_mode() is None   # nothing left pushed


def test_without_the_backward_start_the_mode_sees_the_backward_pass(monkeypatch):
    """The planted fault: with the backward start not watched, the dispatch mode sees every
    operation of the backward pass (what the test above asserts does not happen)."""
    model, fn, graph, state, named = _net("dropout")
    monkeypatch.setattr(RecomputeContext, "_watch_backward", lambda self: None)
    calls = _dispatches_in_backward(monkeypatch, RecomputeContext(named["chen"]),
                                    lambda: fn().backward())
    assert len(calls) > 5


def _hooks_and_dispatches(monkeypatch, ctx, run):
    """(dispatch calls, autograd hooks registered, saved tensors packed) of ``run()`` inside
    `ctx`."""
    seen = {"dispatch": 0, "hooks": 0, "pack": 0}

    def counted(name, method):
        def wrapper(self, *args):
            seen[name] += 1
            return method(self, *args)
        return wrapper

    monkeypatch.setattr(RecomputeContext, "_dispatch",
                        counted("dispatch", RecomputeContext._dispatch))
    monkeypatch.setattr(RecomputeContext, "_prehook", counted("hooks", RecomputeContext._prehook))
    monkeypatch.setattr(RecomputeContext, "_pack", counted("pack", RecomputeContext._pack))
    with ctx:
        run()
    return seen


def test_a_plan_that_drops_nothing_runs_the_step_as_it_is(monkeypatch):
    """[V] (nothing dropped): no dispatch, no hook, no saved tensor handled; gradients bitwise
    and the measured peak the plain one its schedule predicts. With record=True (the planted
    difference) the executor runs as for any plan."""
    name = "convbn"
    model, fn, graph, state, named = _net(name)
    plan = named["liveness"]
    assert not plan.schedule.recomputed
    plain, plain_peak, _ = step(model, fn, state)
    planned, peak, _ = step(model, fn, state, plan, record=False)
    assert first_difference(plain, planned) is None and peak == plain_peak
    predicted = plan.schedule.peak - graph.facts.resident
    assert abs(peak - predicted) <= SLACK + 0.005 * peak, (peak, predicted)
    idle = _hooks_and_dispatches(monkeypatch, RecomputeContext(plan), lambda: fn().backward())
    assert idle == {"dispatch": 0, "hooks": 0, "pack": 0}
    full = _hooks_and_dispatches(monkeypatch, RecomputeContext(plan, record=True),
                                 lambda: fn().backward())
    assert full["dispatch"] > 10 and full["hooks"] > 5 and full["pack"] > 5, full
    dropping = _hooks_and_dispatches(monkeypatch, RecomputeContext(named["min_peak"]),
                                     lambda: fn().backward())
    assert dropping["dispatch"] > 10, dropping


class Branchy(nn.Module):
    """A forward pass with a data-dependent branch."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 8), nn.Linear(8, 2)
        self.deep = False

    def forward(self, x):
        h = torch.relu(self.l1(x))
        if self.deep:
            h = torch.tanh(h) * 2
        return self.l2(h)


def _dropping(graph):
    """A strategy that recomputes something: the checks guard what it drops (a strategy that
    drops nothing runs the step as it is)."""
    return plan_recomputing(graph, lambda attrs: True)


def test_a_different_forward_pass_names_the_first_differing_operation():
    model = Branchy()
    x, t = torch.randn(4, 8), torch.randint(0, 2, (4,))
    graph = torch_ext.trace(lambda: F.cross_entropy(model(x), t), model=model)
    model.deep = True
    with pytest.raises(StrategyMismatchError, match=r"operation \d+ of the forward pass is "
                       r"aten\.tanh\.default.*traced step has aten\.") as e:
        with RecomputeContext(_dropping(graph)):
            F.cross_entropy(model(x), t).backward()
    assert e.value.position is not None


def test_another_dtype_or_device_is_refused():
    model = Branchy()
    x, t = torch.randn(4, 8), torch.randint(0, 2, (4,))
    graph = torch_ext.trace(lambda: F.cross_entropy(model(x), t), model=model)
    model.double()
    xd = x.double()
    with pytest.raises(StrategyMismatchError, match="float64"):
        with RecomputeContext(_dropping(graph)):
            F.cross_entropy(model(xd), t).backward()
    model.float().to("meta")
    xm = x.to("meta")
    with pytest.raises(StrategyMismatchError, match="meta"):
        with RecomputeContext(_dropping(graph)):
            model(xm)


def test_a_second_backward_pass_is_refused():
    model, fn, graph, state, named = _net("convbn")
    model.load_state_dict(state["model"])
    with pytest.raises(HookUsageError, match="second backward"):
        with RecomputeContext(named["liveness"], record=True):
            loss = fn()
            loss.backward(retain_graph=True)
            loss.backward()
    with RecomputeContext(named["liveness"]):   # drops nothing: the step runs as it is
        loss = fn()
        loss.backward(retain_graph=True)
        loss.backward()


def test_a_compiled_module_and_nesting_are_refused():
    model = Branchy()
    compiled = torch.compile(model)
    x, t = torch.randn(4, 8), torch.randint(0, 2, (4,))
    with pytest.raises(torch_ext.TraceError, match="torch.compile"):
        torch_ext.trace(lambda: F.cross_entropy(compiled(x), t))
    graph = torch_ext.trace(lambda: F.cross_entropy(model(x), t), model=model)
    plan = lowerset.min_peak(graph)
    with pytest.raises(HookUsageError, match="torch.compile"):
        RecomputeContext(plan, model=compiled)
    with pytest.raises(HookUsageError, match="nested"):
        with RecomputeContext(plan):
            with RecomputeContext(plan):
                pass


def test_a_graph_not_traced_by_torch_ext_is_refused():
    g = lowerset.Graph.chain(3)
    with pytest.raises(StrategyMismatchError, match="not recorded by torch_ext.trace"):
        RecomputeContext(lowerset.CanonicalStrategy(g, [set(g.labels)]))
    with pytest.raises(TypeError, match="CanonicalStrategy"):
        RecomputeContext("plan")


def test_no_context_is_left_active_after_an_error():
    model = Branchy()
    x, t = torch.randn(4, 8), torch.randint(0, 2, (4,))
    graph = torch_ext.trace(lambda: F.cross_entropy(model(x), t), model=model)
    ctx = RecomputeContext(lowerset.min_peak(graph))
    with pytest.raises(RuntimeError, match="boom"):
        with ctx:
            model(x)
            raise RuntimeError("boom")
    assert getattr(executor_module._ACTIVE, "context", None) is None
    with ctx:
        F.cross_entropy(model(x), t).backward()


class GRULoop(nn.Module):
    """A GRU cell applied three times: PyTorch's CPU cell writes in place into views of its
    gate activations, after cloning them for its backward."""

    def __init__(self):
        super().__init__()
        self.cell, self.out = nn.GRUCell(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 8)
        for _ in range(3):
            h = self.cell(x, h)
        return self.out(h)


class SliceInPlace(nn.Module):
    """In-place writes into a slice of an activation (autograd's CopySlices)."""

    def __init__(self):
        super().__init__()
        self.l, self.o = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        g = torch.tanh(self.l(x)).clone()
        g[:, :4] *= 2
        g.masked_fill_(g > 0.9, 0.0)
        return self.o(g)


@pytest.mark.parametrize("module", [GRULoop, SliceInPlace])
def test_memory_overwritten_in_place_is_never_read_again_by_a_recomputation(module):
    torch.manual_seed(0)
    model = module().train()
    x, t = torch.randn(8, 8), torch.randint(0, 2, (8,))
    fn = lambda: F.cross_entropy(model(x), t)  # noqa: E731
    graph = torch_ext.trace(fn, model=model)
    pinned = {graph.attrs[v]["op"]: graph.attrs[v]["pinned"] for v in graph.labels
              if graph.attrs[v].get("pinned")}
    assert any("overwrites in place later" in why for why in pinned.values())
    if module is GRULoop:   # the clones of the gates that mul_ overwrites afterwards
        assert "aten.clone.default" in pinned
    else:
        assert "CopySlices" in pinned["aten.mul_.Tensor"] or \
            "overwrites" in pinned["aten.mul_.Tensor"]
    state = save(model)
    plain, _, _ = step(model, fn, state)
    for plan in (lowerset.min_peak(graph), cut_plan(graph, [graph.n // 3, 2 * graph.n // 3])):
        planned, peak, ctx = step(model, fn, state, plan)
        assert first_difference(plain, planned) is None
        assert ctx.events == list(plan.schedule.events)
        assert abs(peak - (plan.schedule.peak - graph.facts.resident)) <= SLACK


@pytest.fixture
def deterministic_cudnn(monkeypatch):
    """cuDNN's deterministic algorithms: its default backward of a convolution adds with
    atomics, so two plain steps differ in their last bits whatever a plan does."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["convbn", "attention", "dropout"])
def test_plans_on_cuda(name, deterministic_cudnn):
    """On CUDA: bitwise gradients, the schedule's events, and the peak that
    ``torch.cuda.max_memory_allocated`` measures within 3% (or 256 KiB) of the schedule's."""
    model, fn, graph = make(name, b=32, device="cuda")
    state = save(model)
    plain, _, _ = step(model, fn, state)
    for plan in plans(graph).values():
        planned, peak, ctx = step(model, fn, state, plan)
        assert first_difference(plain, planned) is None
        assert ctx.events == list(plan.schedule.events)
        predicted = plan.schedule.peak - graph.facts.resident
        assert abs(peak - predicted) <= max(0.03 * peak, 256 * 1024), (peak, predicted)
