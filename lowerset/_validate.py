"""Argument checks shared by the public functions of :mod:`lowerset`.

Each check returns the value in the form the planner uses (an ``int`` of bytes, a ``float`` of
seconds) or raises :class:`~lowerset.ArgumentError` (a bad value, also a ``ValueError``) or
:class:`~lowerset.ArgumentTypeError` (a bad type, also a ``TypeError``). Messages name the
argument, the value given and what is allowed.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .exceptions import ArgumentError, ArgumentTypeError

if TYPE_CHECKING:
    from .graph import Graph

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["check_budget", "check_count", "check_time_limit", "check_choice", "check_graph",
           "requires_graph"]


def check_budget(value: object, name: str = "budget") -> int:
    """Return a number of bytes as a non-negative ``int``, rounding a float down.

    Parameters
    ----------
    value : int or float
        Bytes: an integer (Python or NumPy) or a finite real number such as ``11.4e9``.
    name : str
        The argument's name, for the message.

    Returns
    -------
    int
        ``floor(value)``.

    Raises
    ------
    ArgumentTypeError
        If `value` is a bool, a string or anything else that is not a real number.
    ArgumentError
        If `value` is NaN, infinite or negative.

    Examples
    --------
    >>> from lowerset._validate import check_budget
    >>> check_budget(11.4e9), check_budget(7)
    (11400000000, 7)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{name} must be a number of bytes (int or float), got {type(value).__name__} "
            f"{value!r}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        x = float(value)
        if x != x or x in (math.inf, -math.inf):
            raise ArgumentError(f"{name} must be a finite number of bytes >= 0, got {value!r}")
        out = math.floor(x)
    if out < 0:
        raise ArgumentError(f"{name} must be a number of bytes >= 0, got {value!r}")
    return out


def check_count(value: object, name: str, minimum: int = 1) -> int:
    """Return an integer argument that must be at least `minimum`.

    Parameters
    ----------
    value : int
        An integer (Python or NumPy); floats are refused, even integral ones.
    name : str
        The argument's name, for the message.
    minimum : int
        The least value allowed.

    Returns
    -------
    int

    Raises
    ------
    ArgumentTypeError
        If `value` is a bool or not an integer.
    ArgumentError
        If `value` is below `minimum`.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(
            f"{name} must be an integer >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ArgumentError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_time_limit(value: object, name: str = "time_limit") -> float | None:
    """Return a time limit in seconds as a ``float``, or None for no limit.

    Parameters
    ----------
    value : float or None
        Seconds, > 0; ``math.inf`` means no limit.
    name : str

    Returns
    -------
    float or None

    Raises
    ------
    ArgumentTypeError
        If `value` is a bool or not a real number.
    ArgumentError
        If `value` is NaN, zero or negative.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{name} must be a positive number of seconds, got {type(value).__name__} {value!r}")
    x = float(value)
    if not x > 0:  # also NaN
        raise ArgumentError(f"{name} must be a positive number of seconds, got {value!r}")
    return x


def check_choice(value: object, name: str, choices: Collection[str]) -> str:
    """Return `value` if it is one of the strings `choices`.

    Raises
    ------
    ArgumentError
        If `value` is not one of `choices` (or not a string); the message lists them.
    """
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"unknown {name} {value!r}; expected one of {tuple(choices)}")
    return value


def check_graph(G: object, name: str = "G") -> Graph:
    """Return `G` if it is a :class:`~lowerset.Graph`.

    Raises
    ------
    ArgumentTypeError
        If `G` is anything else (a file name, a networkx graph, ...); the message says how to
        build a Graph.
    """
    if not isinstance(G, _graph_class()):
        hint = ""
        if isinstance(G, str):
            hint = " (read a file with lowerset.read_cg or lowerset.load_graph first)"
        elif type(G).__module__.startswith("networkx"):
            hint = " (convert it with lowerset.Graph.from_networkx)"
        raise ArgumentTypeError(
            f"{name} must be a lowerset.Graph, got {type(G).__name__} {G!r:.80}{hint}")
    return G


def _graph_class() -> type[Graph]:
    global _GRAPH
    if _GRAPH is None:
        from .graph import Graph

        _GRAPH = Graph
    return _GRAPH


_GRAPH: type[Graph] | None = None


def requires_graph(func: _F) -> _F:
    """Decorator: check that the first argument of `func` is a :class:`~lowerset.Graph`.

    The check runs before `func`'s body, as networkx's ``not_implemented_for`` does; the
    wrapped function keeps its name, docstring and signature.

    Raises
    ------
    ArgumentTypeError
        (From the wrapped function.) If the first argument is not a Graph.
    """
    @functools.wraps(func)
    def wrapper(G: object, *args: Any, **kwargs: Any) -> Any:
        check_graph(G)
        return func(G, *args, **kwargs)

    return cast(_F, wrapper)
