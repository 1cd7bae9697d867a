"""Every access to a private attribute of Chainer 7.8.1 lives in this module.

The executor needs to drop and restore the arrays that Chainer keeps for the backward pass without
touching the shape and dtype bookkeeping of the graph. Chainer has no public API for that, so the
few private attributes used are wrapped here, one small function each. Verified against
Chainer 7.8.1 (``chainer/variable.py``, ``chainer/function_node.py``, ``chainer/_backprop.py``).

Internals relied on
-------------------
- ``VariableNode._data``: the array a node holds after ``retain_data()``. The public ``data``
  setter also clears ``shape`` and ``dtype``, which Chainer's backward uses to check gradients,
  so we read and write ``_data`` directly.
- ``VariableNode._variable``: weak reference to the node's ``Variable``
  (read through the public ``get_variable_or_none``).
- ``Variable._data``: a one-element list holding the array; the public ``array`` setter also
  clears the node's shape and dtype, so we write ``_data[0]`` directly.
- ``FunctionNode._input_indexes_to_retain`` / ``_output_indexes_to_retain``: which inputs and
  outputs ``forward`` retained for ``backward``.
- ``FunctionNode._retained_output_data``: the retained output arrays (a second reference besides
  the output node's ``_data``).
- ``Variable._grad_valid``: False while a gradient was never set on a Variable (a
  ``Parameter`` a lazily sized link has not initialized yet), when the public ``grad`` raises
  ``RuntimeError`` instead of returning None.
- ``LocalConfig._local``: the ``threading.local`` holding the entries of ``chainer.config`` set
  in this thread (the others come from ``chainer.global_config``); read as a dict because
  ``getattr(chainer.config, key)`` costs about 1.6 us, and a recomputation reads nine entries.
"""

import chainer

__all__ = []

# Config entries that can change what a forward computes; captured per function so that a
# recomputation runs under the same configuration.
CONFIG_KEYS = ("train", "use_cudnn", "cudnn_deterministic", "autotune", "use_ideep",
               "use_cudnn_tensor_core", "cudnn_fast_batch_normalization", "dtype")


def node_data(node):
    """Array held by a VariableNode (``None`` if it holds none)."""
    return node._data


def set_node_data(node, array):
    """Set a VariableNode's array without touching its shape/dtype bookkeeping."""
    node._data = array


def var_array(var):
    """Array of a Variable (``None`` after it was dropped)."""
    return var._data[0]


def set_var_array(var, array):
    """Set a Variable's array without clearing its node's shape and dtype."""
    var._data[0] = array


def grad_or_none(var):
    """The gradient array of a Variable, None when it has none: also when no gradient was
    ever set on it (``var.grad`` raises then, on the parameters of a lazily sized link before
    its first call)."""
    return var.grad if var._grad_valid else None


def retained_input_indexes(func):
    """Tuple of input positions ``func`` retained for backward (empty if none)."""
    idx = func._input_indexes_to_retain
    return tuple(idx) if idx is not None else ()


def retained_output_indexes(func):
    """Tuple of output positions ``func`` retained for backward (empty if none)."""
    idx = func._output_indexes_to_retain
    return tuple(idx) if idx is not None else ()


def retained_output_data(func):
    """The tuple of retained output arrays of ``func`` (or ``None``)."""
    return func._retained_output_data


def set_retained_output_data(func, data):
    """Set (or clear, with ``None``) the retained output arrays of ``func``."""
    func._retained_output_data = data


def config_now():
    """Dict of the entries of this thread's configuration now: ``chainer.global_config``'s,
    overridden by those set in this thread (what ``getattr(chainer.config, key)`` returns)."""
    now = dict(vars(chainer.global_config))
    now.update(vars(chainer.config._local))
    return now


def config_entry(key):
    """``getattr(chainer.config, key)`` for an entry Chainer defines, read from the thread-local
    and global dicts (about 0.3 us instead of 1.6 us through ``LocalConfig.__getattr__``)."""
    local = vars(chainer.config._local)
    return local[key] if key in local else getattr(chainer.global_config, key)


def capture_config():
    """``(key, value)`` pairs of the :data:`CONFIG_KEYS` set now (a missing or None entry is left
    out), for :func:`using_configs`."""
    now = config_now()
    return tuple((k, now[k]) for k in CONFIG_KEYS if now.get(k) is not None)


def using_configs(pairs):
    """Context manager: ``chainer.using_config(key, value)`` for each pair whose entry does not
    hold that very value already, nested in order, in one ``with``: the block sees the same
    configuration as under the nested contexts, and a recomputation in a step that runs under
    the configuration it captured enters none of them but ``in_recomputing``.

    Parameters
    ----------
    pairs : sequence of (str, object)
    """
    return _Configs(pairs)


class _Configs:
    __slots__ = ("_entered", "_pairs")

    def __init__(self, pairs):
        self._pairs = pairs
        self._entered = []

    def __enter__(self):
        now = config_now()
        try:
            for k, v in self._pairs:
                if now.get(k, _MISSING) is not v:
                    c = chainer.using_config(k, v)
                    c.__enter__()
                    self._entered.append(c)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        while self._entered:
            self._entered.pop().__exit__(None, None, None)
        return False


_MISSING = object()
