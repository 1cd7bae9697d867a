"""RecomputeHook's life cycle: one `with` block around a training loop, values read after
backward(), a second backward pass, and use from two threads."""

import threading

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import HookUsageError, RecomputeHook, StrategyMismatchError, trace  # noqa: E402
from chainer_ext_nets import clone, make, persistents  # noqa: E402


def _setup(name="resnet"):
    model, x, t, lossfn = make(name)
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
    return model, x, t, lossfn, lowerset.solve(g, model="paper", mode="memory")


def _loop(model, x, t, hook, iterations=3):
    """A training loop (MomentumSGD) in one `with hook:` block; per iteration: the loss, the
    logits read after backward(), accuracy, gradients, and the hook's events."""
    opt = chainer.optimizers.MomentumSGD(lr=0.01)
    opt.setup(model)
    out = []
    with chainer.using_config("train", True), (hook or _Nothing()):
        for i in range(iterations):
            model.cleargrads()
            np.random.seed(i)
            y = model(x)
            loss = F.softmax_cross_entropy(y, t)
            loss.backward()
            acc = F.accuracy(y, t)
            grads = {k: p.grad.copy() for k, p in model.namedparams()}
            events = None if hook is None else list(hook.events)
            recomputed = None if hook is None else list(hook.last_iteration["recomputed"])
            out.append((loss.array.copy(), y.array.copy(), acc.array.copy(), grads, events,
                        recomputed))
            opt.update()
    params = {k: p.array.copy() for k, p in model.namedparams()}
    params.update(persistents(model))
    return out, params


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_one_block_around_a_training_loop():
    model, x, t, _, s = _setup()
    ref, ref_params = _loop(clone(model), x, t, None)
    hook = RecomputeHook(s, record=True)
    got, params = _loop(clone(model), x, t, hook)
    expected_events = list(hook.schedule.events)
    for i, (a, b) in enumerate(zip(ref, got)):
        for u, v in zip(a[:3], b[:3]):  # loss, logits read after backward(), accuracy
            assert u.tobytes() == v.tobytes(), i
        for k in a[3]:
            assert a[3][k].tobytes() == b[3][k].tobytes(), (i, k)
        assert b[4] == expected_events, f"iteration {i}"
        assert b[5], f"iteration {i} recomputed nothing"
    for k in ref_params:
        assert ref_params[k].tobytes() == params[k].tobytes(), k
    assert all(f is None for f in hook._funcs) and hook._held == {}


def test_a_second_backward_pass_raises_a_clear_error():
    model, x, t, lossfn, s = _setup()
    m = clone(model)
    # a plain run allows it
    with chainer.using_config("train", True):
        loss = lossfn(m, x, t)
        loss.backward()
        loss.backward()
    hook = RecomputeHook(s)
    with chainer.using_config("train", True):
        with hook:
            loss = lossfn(m, x, t)
            loss.backward()
            with pytest.raises(HookUsageError, match="second backward pass.*forward pass again"):
                loss.backward()
        loss = lossfn(m, x, t)
        with hook:
            loss2 = lossfn(m, x, t)
            loss2.backward()
        with pytest.raises(HookUsageError, match="second backward pass"):
            loss2.backward()   # outside the block too
        loss.backward()        # an unhooked graph is unaffected


def test_backward_over_functions_applied_after_the_step():
    model, x, t, _, s = _setup()
    hook = RecomputeHook(s)
    with chainer.using_config("train", True), hook:
        y = model(x)
        F.softmax_cross_entropy(y, t).backward()
        with pytest.raises(StrategyMismatchError, match="after the previous step ended"):
            F.sum(y * y).backward()


def test_metric_between_forward_and_backward_names_the_fix():
    model, x, t, _, s = _setup()
    with chainer.using_config("train", True), pytest.raises(StrategyMismatchError,
                                                             match="after backward"):
        with RecomputeHook(s):
            y = model(x)
            loss = F.softmax_cross_entropy(y, t)
            F.accuracy(y, t)
            loss.backward()


def test_one_hook_in_two_threads_at_once():
    model, x, t, lossfn, s = _setup("mlp")
    hook = RecomputeHook(s)
    entered, leave, errors = threading.Event(), threading.Event(), []

    def other():
        try:
            with hook:
                entered.set()
                leave.wait(10)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            entered.set()
    th = threading.Thread(target=other)
    th.start()
    assert entered.wait(10)
    try:
        with pytest.raises(HookUsageError, match="in use in thread.*one RecomputeHook per thread"):
            with hook:
                pass
        assert chainer.get_function_hooks() == {}
    finally:
        leave.set()
        th.join()
    assert errors == []
    # free again: one step works, and one hook per thread works at the same time
    m = clone(model)
    with chainer.using_config("train", True), hook:
        lossfn(m, x, t).backward()
    results = {}

    def worker(i):
        mm = clone(model)
        mm.cleargrads()
        with chainer.using_config("train", True), RecomputeHook(s) as h:
            lossfn(mm, x, t).backward()
        results[i] = ({k: p.grad.copy() for k, p in mm.namedparams()}, h.last_iteration)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k in results[0][0]:
        assert results[0][0][k].tobytes() == results[1][0][k].tobytes(), k
    assert results[0][1]["recomputed"]
