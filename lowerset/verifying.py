"""The comparison a front end's ``verify`` makes: the values of a plain step against those of a
step under a plan, by name, bitwise (``chainer_ext.verify``, ``torch_ext.verify``).

A front end runs the two steps from the same state and collects each run's values in a dict,
name -> array (``"loss"``, ``"grad <parameter>"``, then its persistent values or buffers), and
says how two arrays of its framework differ (a callable returning whether they differ bitwise
and their largest absolute difference). :func:`compare` makes the report.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import VerificationError

__all__ = ["VerifyReport", "VerificationError", "compare"]


@dataclass(frozen=True)
class VerifyReport:
    """What a front end's ``verify`` found.

    Attributes
    ----------
    ok : bool
        The loss, every gradient and every persistent value (buffer) are bitwise equal, and
        the executor's events equal the schedule's.
    first_mismatch : str or None
        The first value that differs, in the order of :attr:`compared`; None if none differs.
    mismatches : tuple of str
        Every value that differs, in that order.
    max_abs_diff : float
        The largest absolute difference over all compared values (0.0 when equal; ``inf``
        where a value is missing on one side or the shapes or dtypes differ).
    events_equal : bool
        The executor's recorded events equal ``list(schedule.events)``.
    recomputed : tuple
        Labels of the nodes the executor recomputed, in order.
    compared : tuple of str
        The names of every value compared: the plain run's names in their order
        (``"loss"``, ``"grad <parameter>"`` in parameter order, then the persistent values),
        then those only the planned run has.
    """

    ok: bool
    first_mismatch: str | None
    mismatches: tuple[str, ...]
    max_abs_diff: float
    events_equal: bool
    recomputed: tuple[Hashable, ...]
    compared: tuple[str, ...]


def compare(plain: Mapping[str, Any], planned: Mapping[str, Any],
            diff: Callable[[Any, Any], tuple[object, float]], *, events_equal: bool,
            recomputed: Iterable[Hashable]) -> VerifyReport:
    """Compare two runs' named values.

    Parameters
    ----------
    plain, planned : dict of str to array or None
        Each run's values by name, in the order to report them.
    diff : callable
        ``diff(a, b)`` for two values that are not None: ``(whether they differ bitwise, their
        largest absolute difference as a float, inf where shapes or dtypes differ)``.
    events_equal : bool
    recomputed : sequence
        As :class:`VerifyReport`.

    Returns
    -------
    VerifyReport
        A value missing on one side (None, or absent from one dict) differs with difference
        ``inf``; two Nones are equal.

    Examples
    --------
    >>> d = lambda a, b: (a != b, float(abs(a - b)))
    >>> r = compare({"loss": 1.0, "grad w": 2.0}, {"loss": 1.0, "grad w": 2.5}, d,
    ...             events_equal=True, recomputed=[3])
    >>> r.ok, r.first_mismatch, r.max_abs_diff, r.compared
    (False, 'grad w', 0.5, ('loss', 'grad w'))
    """
    names = list(plain) + [k for k in planned if k not in plain]
    diffs = {k: _diff(plain.get(k), planned.get(k), diff) for k in names}
    bad = tuple(k for k in names if diffs[k][0])
    return VerifyReport(ok=not bad and bool(events_equal), first_mismatch=bad[0] if bad else None,
                        mismatches=bad, max_abs_diff=max([0.0] + [d for _, d in diffs.values()]),
                        events_equal=bool(events_equal), recomputed=tuple(recomputed),
                        compared=tuple(names))


def _diff(a, b, diff):
    if a is None or b is None:
        return (a is not b), (0.0 if a is b else float("inf"))
    differs, d = diff(a, b)
    return bool(differs), float(d)
