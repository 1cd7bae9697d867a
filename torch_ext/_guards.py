"""What a step is made of, read off its callable: the modules and tensors it closes over.

The trace and the executor refuse a ``torch.compile``d module (the compiled graph runs its own
partitioner and saved tensors, which a dispatch mode does not see as eager operations), and
need to know which device a step runs on before it runs (to measure its memory there).
"""

import torch

from ._compat import compiled_call, is_compiled_function, optimized_module_class

__all__ = ["step_objects", "check_not_compiled", "step_device"]


def step_objects(step, model=None):
    """The modules and tensors `step` refers to: `model`, its closure cells, the object it is
    bound to, its defaults and the globals its code names (one level deep)."""
    found = [] if model is None else [model]
    seen = set()
    for fn in (step, getattr(step, "func", None)):   # functools.partial keeps .func
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        found += [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
                  if _filled(c)]
        found += list(getattr(fn, "__defaults__", None) or ())
        found += list(getattr(fn, "args", ()) or ())
        bound = getattr(fn, "__self__", None)
        if bound is not None:
            found.append(bound)
        code, glb = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
        if code is not None and glb is not None:
            found += [glb[name] for name in code.co_names if name in glb]
    if isinstance(step, torch.nn.Module):
        found.append(step)
    return [o for o in found if isinstance(o, (torch.nn.Module, torch.Tensor))
            or is_compiled_function(o)]


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _compiled_module(m):
    """The name of a compiled module inside `m` (itself: ""), or None."""
    opt_cls = optimized_module_class()
    for name, sub in m.named_modules():
        if isinstance(sub, opt_cls) or compiled_call(sub) is not None:
            return name
    return None


def check_not_compiled(step, model, error):
    """Raise `error` naming the compiled module or function `step` (or `model`) runs."""
    for obj in step_objects(step, model):
        if is_compiled_function(obj):
            raise error(f"the step calls a torch.compile'd function "
                        f"({getattr(obj, '__name__', type(obj).__name__)}): lowerset traces "
                        "and executes eager PyTorch; pass the module before torch.compile, or "
                        "plan inside the compilation with torch_ext.compiled.backend")
        if isinstance(obj, torch.nn.Module):
            name = _compiled_module(obj)
            if name is not None:
                where = f"module {type(obj).__name__}" + (f".{name}" if name else "")
                raise error(f"the step runs a torch.compile'd {where}: lowerset traces and "
                            "executes eager PyTorch; pass the module before torch.compile, or "
                            "plan inside the compilation with torch_ext.compiled.backend")


def step_device(step, model=None):
    """The device of the first parameter or tensor `step` refers to (cpu when none)."""
    for obj in step_objects(step, model):
        if isinstance(obj, torch.Tensor):
            return obj.device
        if isinstance(obj, torch.nn.Module):
            for t in obj.parameters():
                return t.device
            for b in obj.buffers():
                return b.device
    return torch.device("cpu")
