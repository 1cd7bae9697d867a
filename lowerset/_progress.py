"""An elapsed-time progress bar for long planner calls (tqdm, the ``cli`` extra).

The outermost call that enters :func:`progress` owns the bar; calls inside it (``solve`` runs
``pareto``, the command line runs ``solve``) reuse it, and :func:`phase` names the search step
running (pool, ladder, bisection, exact DP, local search) after the description. The bar shows
only on a terminal (``stream.isatty()``) and only once the call has run :data:`DELAY` seconds;
elsewhere nothing is printed and tqdm is not imported.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["progress", "phase", "current", "DELAY"]

#: Seconds a call runs before its bar appears.
DELAY = 2.0

_active = threading.local()


@contextlib.contextmanager
def progress(desc: str, enabled: bool = True, stream: IO[str] | None = None,
             delay: float | None = None) -> Iterator[Any]:
    """Show an elapsed-time bar on `stream` (default stderr) while the block runs.

    Parameters
    ----------
    desc : str
        What runs, e.g. ``"solve"``.
    enabled : bool
        False: no bar, here or in the calls inside the block.
    stream : file, optional
    delay : float, optional
        Seconds before the bar appears (default :data:`DELAY`).

    Yields
    ------
    tqdm or None
        The bar, or None where none is shown (or an outer call shows it).
    """
    if getattr(_active, "owned", False):  # an outer call decides
        yield getattr(_active, "bar", None)
        return
    _active.owned, _active.bar, _active.desc, _active.phase = True, None, desc, None
    try:
        with _bar(desc, enabled, stream, DELAY if delay is None else delay) as bar:
            _active.bar = bar
            yield bar
    finally:
        _active.owned, _active.bar = False, None


def phase(name: str) -> None:
    """Name the step the planner runs now after the bar's description (no bar: only
    :func:`current` says it)."""
    _active.phase = name
    bar = getattr(_active, "bar", None)
    if bar is not None:
        bar.set_description_str(f"{_active.desc} ({name})")


def current() -> str | None:
    """The step :func:`phase` last named in this thread, or None."""
    return getattr(_active, "phase", None)


@contextlib.contextmanager
def _bar(desc, enabled, stream, delay):
    stream = sys.stderr if stream is None else stream
    if not (enabled and hasattr(stream, "isatty") and stream.isatty()):
        yield None
        return
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:  # the cli extra is not installed: no bar
        yield None
        return
    bar = tqdm(total=None, desc=desc, file=stream, delay=delay, leave=False, unit="s",
               bar_format="{desc}: {elapsed}")
    stop = threading.Event()

    def tick():
        while not stop.wait(0.2):
            bar.refresh()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()
        bar.close()
