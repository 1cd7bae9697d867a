"""torch_ext.peak_memory: the peak of a step counted by hand, the parameters reported apart."""

import pytest

torch = pytest.importorskip("torch")

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import peak_memory  # noqa: E402

B, D, H, C = 32, 96, 128, 16
F32 = 4


@pytest.fixture
def mlp():
    """x (B, D) without a gradient; W1 (D, H) and W2 (H, C); loss = sum(relu(x @ W1) @ W2)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, D, generator=gen)
    w1 = torch.randn(D, H, generator=gen, requires_grad=True)
    w2 = torch.randn(H, C, generator=gen, requires_grad=True)

    def step():
        (torch.relu(x @ w1) @ w2).sum().backward()
    return step, [w1, w2]


def test_an_mlp_step_counted_by_hand(mlp):
    step, (w1, w2) = mlp
    r = peak_memory(step, params=[w1, w2])
    # After the forward pass: relu's output r (B*H, saved for its backward) and the loss (4
    # bytes; x @ W1 and the logits are freed, nobody saves them). The backward pass adds the
    # seed (4 bytes), W2's gradient (H*C), the gradient of r (B*H) and that of x @ W1 (B*H):
    # one peak; then frees r and r's gradient and makes W1's gradient (D*H): the other.
    # (The logits' gradient is an expanded 4-byte seed; mm makes contiguous B*C copies of it,
    # 2 KiB each, one at a time, below both.)
    loss_and_seed = 2 * F32
    first = F32 * (B * H + H * C + 2 * B * H)
    second = F32 * (H * C + B * H + D * H)
    assert second > first  # D*H > 2*B*H: the second peak is the step's
    assert r.peak == loss_and_seed + max(first, second)
    grads = F32 * (D * H + H * C)
    assert r.end == grads   # the step returns nothing: only the gradients stay
    assert r.device == "cpu"
    assert r.param_bytes == grads and r.param_grad_bytes == grads and r.new_grad_bytes == grads
    assert r.peak_without_grads == r.peak - grads
    assert r.summary()["peak_without_grads"] == r.peak_without_grads


def test_a_gradient_accumulated_in_place_is_not_new(mlp):
    step, params = mlp
    step()                                      # the gradients exist before the call
    ids = [id(p.grad) for p in params]
    r = peak_memory(step, params=params)
    assert [id(p.grad) for p in params] == ids  # accumulated into the same tensors
    assert r.new_grad_bytes == 0 and r.param_grad_bytes == F32 * (D * H + H * C)
    assert r.end == 0                           # the new gradients were added and freed
    for p in params:
        p.grad = None
    r = peak_memory(step, params=params)
    assert r.new_grad_bytes == F32 * (D * H + H * C)


def test_a_module_a_tied_parameter_and_the_default_device():
    lin = torch.nn.Linear(8, 8, bias=False)
    r = peak_memory(lambda: lin(torch.ones(2, 8)).sum().backward(),
                    params=[lin.weight, lin.weight])
    assert r.param_bytes == 8 * 8 * F32       # counted once
    assert peak_memory(lambda: None, params=lin).param_bytes == 8 * 8 * F32
    assert peak_memory(lambda: lin.weight * 2).device == "cpu"   # found in the closure


def test_a_planned_step_measures_below_the_plain_one():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=gen)   # activations of 32 KiB, weights of 4 KiB
    ws = [torch.randn(32, 32, generator=gen, requires_grad=True) for _ in range(8)]

    def loss():
        h = x
        for w in ws:
            h = torch.tanh(h @ w)
        return h.sum()
    graph = torch_ext.trace(loss)
    plan = lowerset.min_peak(graph)

    def step(ctx):
        if ctx is None:
            loss().backward()
        else:
            with ctx:
                loss().backward()

    def measure(ctx):
        for w in ws:  # outside the call: the old gradients' frees would lower the start level
            w.grad = None
        return peak_memory(lambda: step(ctx), params=ws)
    plain = measure(None)
    planned = measure(torch_ext.RecomputeContext(plan))
    assert planned.peak < plain.peak
    for r, predicted in ((plain, lowerset.schedule(graph).peak), (planned, plan.schedule.peak)):
        assert abs(r.peak + graph.facts.resident - predicted) <= 0.03 * predicted


def test_errors():
    with pytest.raises(TypeError, match="iterable of tensors"):
        peak_memory(lambda: None, params=5)
    with pytest.raises(TypeError, match="tensors only"):
        peak_memory(lambda: None, params=[1.0])


def test_the_cuda_warm_up_calls_the_libraries_in_the_backward_thread_too():
    """warm_cuda_libraries' calls, run on the CPU: the product and the linear layer on the
    calling thread, then again inside a backward pass (autograd's thread on a GPU), also from
    inside inference_mode; nothing stays allocated. On the CPU the warm-up itself does nothing."""
    from torch_ext import measure
    from torch_ext.measure import MemoryMeter
    seen = []
    real = measure._call_libraries

    def spy(device):
        seen.append(torch._C._current_autograd_node() is not None)   # in a backward pass
        real(device)

    measure._call_libraries = spy
    try:
        with torch.inference_mode(), MemoryMeter("cpu") as m:
            measure._call_in_both_threads("cpu")
        measure.warm_cuda_libraries("cpu")
    finally:
        measure._call_libraries = real
    assert seen == [False, True]
    assert m.result.end == 0
