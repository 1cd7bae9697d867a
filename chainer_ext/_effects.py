"""What a function's forward changes besides its outputs, and how a recomputation undoes it.

:func:`chainer_ext.trace` detects, for every function application, what its forward changes
outside the function itself, by comparing a :class:`Snapshot` taken before the forward with the
state after it:

- the arrays the function held before its forward and updated in place (BatchNormalization's
  running statistics are the link's arrays);
- the attributes of every :class:`chainer.Link` the function references: arrays (updated in place
  or rebound), the arrays of its Variables, plain values (a call counter), private random
  generators (``numpy.random.RandomState``/``Generator``), and attributes added by the forward;
- NumPy's global random state;
- its input arrays (parameters included).

A change of the first three kinds is recorded as a *path* (a tuple of strings, JSON-ready):
``("function", name)`` or ``("wrapped", name)`` for an attribute of the function (``"wrapped"``:
the :class:`chainer.Function` an old-style function's adapter wraps), ``(root, name, attr)`` for
an attribute of a Link held in attribute ``name``, and ``("numpy.random",)`` for NumPy's global
random state. A recomputation runs under :func:`swapped`: every path is set to the value it had
before the original forward (the *pre* value, kept since then), the forward runs, and every path
gets back the value it has now. The recomputed outputs then equal the original ones (the forward
reads what it read the first time, random draws included) and the side effect is not repeated.
Changes of the other kinds cannot be undone that way (an input written in place, a list changed in
place): ``trace`` marks such a function pinned (``lowerset.NodeFacts.pinned``), so that it is never
recomputed.

CuPy's generator has no state to save (cuRAND keeps it on the device), so a function that draws
from it is detected with a counting proxy (:class:`CupyRandomWatch`) and either reuses what it drew
(``NodeFacts.stochastic``) or is pinned.
"""

import contextlib
import ctypes

import chainer
import numpy as np

from . import _backend

__all__ = ["Snapshot", "GLOBAL_RNG", "MISSING", "swapped", "capture", "put", "same_bits",
           "same_data", "numpy_rng_fingerprint", "NumpyRngState", "CupyRandomWatch",
           "counting_random_state", "seeded_cupy_random"]

#: The path of NumPy's global random state.
GLOBAL_RNG = ("numpy.random",)

_PLAIN = (int, float, complex, bool, str, bytes, type(None), np.generic)
_CONTAINERS = (list, dict, set)
_RNGS = (np.random.RandomState, np.random.Generator)


class _Missing:
    """Sentinel: the attribute does not exist."""

    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


def roots(func):
    """``{"function": func}``, plus ``"wrapped"``: the old-style Function an adapter wraps."""
    out = {"function": func}
    if isinstance(func, chainer.function.FunctionAdapter):
        inner = func.function
        if inner is not None:
            out["wrapped"] = inner
    return out


def _parent(func, path):
    obj = roots(func)[path[0]]
    for name in path[1:-1]:
        obj = getattr(obj, name)
    return obj


# -- values ---------------------------------------------------------------------------------------
# A captured value is MISSING or a tuple (kind, object, data): ("array", a, copy of a),
# ("rng", r, state), ("gen", g, state), ("value", v, None) or ("global", None, state).


def _capture_value(v, types):
    if isinstance(v, types):
        return ("array", v, v.copy())
    if isinstance(v, np.random.RandomState):
        return ("rng", v, v.get_state())
    if isinstance(v, np.random.Generator):
        return ("gen", v, v.bit_generator.state)
    return ("value", v, None)


def numpy_rng_fingerprint():
    """Bytes that change whenever NumPy's global generator draws: the MT19937 key and position
    (read in place, a few microseconds; ``numpy.random.get_state()`` takes a millisecond under
    tracemalloc), or the whole state where NumPy's generator is not exposed that way.

    A draw served entirely from the legacy generator's cached second Gaussian (one scalar
    ``numpy.random.standard_normal()`` after an odd number of Gaussian draws) leaves it unchanged.
    """
    get_bg = getattr(np.random, "get_bit_generator", None)  # NumPy >= 1.25
    if get_bg is not None:
        bg = get_bg()
        if type(bg).__name__ == "MT19937":  # struct mt19937_state {uint32_t key[624]; int pos;}
            return ctypes.string_at(bg.ctypes.state_address, 624 * 4 + 4)
    return np.random.get_state()  # pragma: no cover - NumPy < 1.25


class NumpyRngState:
    """NumPy's global random state, read again only when its fingerprint changed."""

    def __init__(self):
        self._fp = self._state = None

    def now(self):
        """``(fingerprint, numpy.random.get_state())`` now."""
        fp = numpy_rng_fingerprint()
        if self._state is None or not same_data(fp, self._fp):
            self._fp, self._state = fp, np.random.get_state()
        return self._fp, self._state


def capture(func, path, types):
    """The value at `path` now (arrays copied, random generators' states saved)."""
    if tuple(path) == GLOBAL_RNG:
        return ("global", None, np.random.get_state())
    parent = _parent(func, path)
    v = getattr(parent, path[-1], MISSING)
    if v is MISSING:
        return MISSING
    return _capture_value(v, types)


def put(func, path, value):
    """Give `path` the captured `value` back (binding and contents)."""
    if tuple(path) == GLOBAL_RNG:
        np.random.set_state(value[2])
        return
    parent = _parent(func, path)
    name = path[-1]
    if value is MISSING:
        if hasattr(parent, name):
            delattr(parent, name)
        return
    kind, obj, data = value
    if getattr(parent, name, MISSING) is not obj:
        setattr(parent, name, obj)
    if kind == "array":
        obj[...] = data
    elif kind == "rng":
        obj.set_state(data)
    elif kind == "gen":
        obj.bit_generator.state = data


@contextlib.contextmanager
def swapped(func, paths, pre, types):
    """Run the block with every path of `paths` set to its value in `pre`; afterwards give every
    path the value it had when the block started.

    Parameters
    ----------
    func : chainer.FunctionNode
    paths : sequence of tuple of str
    pre : sequence
        Values from :func:`capture`, one per path.
    types : tuple of type
        Array types.
    """
    now = [capture(func, p, types) for p in paths]
    try:
        for p, v in zip(paths, pre):
            put(func, p, v)
        yield
    finally:
        for p, v in zip(reversed(paths), reversed(now)):
            put(func, p, v)


_WORDS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def _words(a, xp):
    a = xp.ascontiguousarray(a).reshape(-1)
    return a.view(getattr(xp, _WORDS.get(a.dtype.itemsize, "uint8")))


def same_bits(a, b):
    """Return True if arrays `a` and `b` have the same shape, dtype and bytes."""
    if a is b:
        return True
    if type(a) is not type(b) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    xp = _backend.cupy if _backend.is_cupy_array(a) else np
    return bool((_words(a, xp) == _words(b, xp)).all())


def same_data(a, b):
    """Return True if `a` and `b` are equal, arrays bitwise (nested dicts, tuples and lists of
    plain values and NumPy arrays, as random generators' states)."""
    if isinstance(a, dict):
        return (isinstance(b, dict) and a.keys() == b.keys()
                and all(same_data(a[k], b[k]) for k in a))
    if isinstance(a, (tuple, list)):
        return (isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(same_data(x, y) for x, y in zip(a, b)))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and same_bits(a, b)
    return type(a) is type(b) and bool(a == b)


def _unchanged(before, after):
    if before is MISSING or after is MISSING:
        return before is after
    (k1, o1, d1), (k2, o2, d2) = before, after
    if k1 != k2 or (o1 is not o2 and k1 != "value"):
        return False
    if k1 == "array":
        return same_bits(d1, d2)
    if k1 == "value":
        if o1 is o2:
            return True
        try:
            return type(o1) is type(o2) and bool(o1 == o2)
        except Exception:  # pragma: no cover - an exotic __eq__
            return False
    return same_data(d1, d2)


# -- detection at trace time ----------------------------------------------------------------------


class Snapshot:
    """What a function can change, captured before its forward (see the module docstring).

    Parameters
    ----------
    func : chainer.FunctionNode
    in_data : tuple of arrays
        The forward's inputs.
    types : tuple of type
        Array types.
    rng : NumpyRngState
        Reads NumPy's global random state.
    """

    def __init__(self, func, in_data, types, rng):
        self.types = types
        self.values = {}        # path -> captured value
        self.containers = {}    # path -> shallow copy of a list, dict or set of a Link
        self.links = {}         # (root, name) -> attribute names of the Link before
        for root, obj in roots(func).items():
            for name, v in vars(obj).items():
                if isinstance(v, types) or isinstance(v, _RNGS):
                    self.values[root, name] = _capture_value(v, types)
                elif isinstance(v, chainer.Link):
                    self.links[root, name] = set(vars(v))
                    for attr, lv in vars(v).items():
                        self._link_attr((root, name, attr), lv)
        self.rng_fingerprint, state = rng.now()
        self.values[GLOBAL_RNG] = ("global", None, state)
        self.inputs = [a.copy() for a in in_data]
        self.changed_inputs = []

    def _link_attr(self, path, v):
        if isinstance(v, chainer.Variable):
            if v.array is not None:
                self.values[path + ("array",)] = _capture_value(v.array, self.types)
        elif isinstance(v, self.types) or isinstance(v, _RNGS) or isinstance(v, _PLAIN):
            self.values[path] = _capture_value(v, self.types)
        elif isinstance(v, _CONTAINERS):
            self.containers[path] = type(v)(v)

    def pre(self, path):
        """The value `path` had before the forward (MISSING for an attribute it added)."""
        return self.values.get(tuple(path), MISSING)

    def changes(self, func, in_data):
        """Compare with the state after the forward.

        Returns
        -------
        paths : list of tuple of str
            What the forward changed that :func:`swapped` can undo, in snapshot order.
        pin : str or None
            Why the function cannot be recomputed (a change :func:`swapped` cannot undo).

        Notes
        -----
        Drops the copies of the inputs, except those of inputs the forward wrote to
        (:attr:`changed_inputs`, pairs of the array and its value before).
        """
        paths, pin = [], None
        if not same_data(numpy_rng_fingerprint(), self.rng_fingerprint):
            paths.append(GLOBAL_RNG)
        for path, before in self.values.items():
            if path == GLOBAL_RNG:
                continue
            now = capture(func, path, self.types)
            if _unchanged(before, now):
                continue
            if len(path) == 2 and (now is MISSING or now[1] is not before[1]):
                continue  # an attribute of the function itself rebound: forward-made state
            paths.append(path)
        for (root, name), attrs in self.links.items():
            link = getattr(roots(func)[root], name, None)
            if link is None:
                continue
            for attr in vars(link):
                if attr not in attrs and (root, name, attr) not in self.values:
                    paths.append((root, name, attr))   # added by the forward
        for path, before in self.containers.items():
            now = getattr(_parent(func, path), path[-1], None)
            if type(now) is not type(before) or now != before:
                pin = (f"its forward changes the {type(before).__name__} "
                       f"{'.'.join(path[1:])} in place")
        self.changed_inputs = []
        for p, (a, copy) in enumerate(zip(in_data, self.inputs)):
            if not same_bits(a, copy):
                pin = f"its forward writes to its input {p}"
                self.changed_inputs.append((a, copy))
        self.inputs = None
        return paths, pin


# -- CuPy's generator -----------------------------------------------------------------------------


def counting_random_state(base, inner, watch):
    """Return an instance of a subclass of `base` that forwards everything to `inner` and adds 1
    to ``watch.calls`` at every method call.

    Parameters
    ----------
    base : type
        The generator class (``cupy.random.RandomState``; any class, for tests).
    inner : base
        The generator that does the work.
    watch : object
        Has an int attribute ``calls``.

    Returns
    -------
    base
    """
    class Counting(base):
        def __getattribute__(self, name):
            if name.startswith("_ce_") or name in ("__class__", "__dict__", "__del__"):
                return object.__getattribute__(self, name)
            value = getattr(object.__getattribute__(self, "_ce_inner"), name)
            if callable(value) and not name.startswith("__"):
                counter = object.__getattribute__(self, "_ce_watch")

                def counted(*args, **kwargs):
                    counter.calls += 1
                    return value(*args, **kwargs)
                return counted
            return value

        def __del__(self):  # the inner generator owns the device resources
            pass

    obj = base.__new__(Counting)
    object.__setattr__(obj, "_ce_inner", inner)
    object.__setattr__(obj, "_ce_watch", watch)
    return obj


class CupyRandomWatch:
    """Count the calls to CuPy's global generator of each device that arrays were seen on.

    :meth:`watch` installs a counting proxy (:func:`counting_random_state`) as the device's
    global random state; :meth:`close` puts the original back. Draws are unchanged.

    Attributes
    ----------
    calls : int
        Calls to the watched generators so far.
    """

    def __init__(self, cupy=None):
        self.calls = 0
        self._cupy = cupy if cupy is not None else _backend.cupy
        self._orig = {}

    def watch(self, arrays):
        """Install the proxy on the device of the CuPy arrays among `arrays` (once per device)."""
        cp = self._cupy
        if cp is None:
            return
        for a in arrays:
            if isinstance(a, cp.ndarray) and a.device.id not in self._orig:
                with cp.cuda.Device(a.device.id):
                    inner = cp.random.get_random_state()
                    self._orig[a.device.id] = inner
                    cp.random.set_random_state(
                        counting_random_state(cp.random.RandomState, inner, self))

    def close(self):
        """Put the original generators back."""
        cp = self._cupy
        for dev, inner in self._orig.items():
            with cp.cuda.Device(dev):
                cp.random.set_random_state(inner)
        self._orig = {}


@contextlib.contextmanager
def seeded_cupy_random(seed, cupy=None):
    """For the block, give every GPU a new global CuPy generator seeded with `seed`; put the
    original generators back afterwards.

    Two blocks with the same `seed` draw the same numbers, and the caller's generators are not
    advanced by what a block draws (their state lives on the device and cannot be saved, so
    they are set aside instead). Without CuPy or a visible GPU the block runs unchanged.

    Parameters
    ----------
    seed : int
    cupy : module, optional
        CuPy (default: the one :mod:`chainer_ext._backend` imported; a stand-in, for tests).
    """
    cp = cupy if cupy is not None else _backend.cupy
    try:
        n = 0 if cp is None else cp.cuda.runtime.getDeviceCount()
    except Exception:  # CuPy without a driver or a device
        n = 0
    orig = {}
    try:
        for dev in range(n):
            with cp.cuda.Device(dev):
                orig[dev] = cp.random.get_random_state()
                cp.random.set_random_state(cp.random.RandomState(seed))
        yield
    finally:
        for dev, state in orig.items():
            with cp.cuda.Device(dev):
                cp.random.set_random_state(state)
