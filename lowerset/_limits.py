"""The limits of one planner call: its deadline, the memory it may allocate and the threads it
may run.

The Numba kernels never raise (STYLE.md), so every long phase (counting and enumerating lower
sets, their statistics, the DPs) runs as a Python loop over kernel calls of bounded work, and the
loop checks the deadline between calls. :class:`Chunker` sizes those calls so that each takes
about :data:`CHUNK_SECONDS`, whatever the graph; a time limit is then kept to within a few
milliseconds plus the work on one lower set.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

from numba.core import event

from .exceptions import ArgumentError, SearchLimitError

#: Target wall time of one kernel call between two deadline checks, seconds.
CHUNK_SECONDS = 0.005
#: Share of the available memory that one planner call may plan to allocate.
MEMORY_FRACTION = 0.8
#: Allocations up to this many bytes are not checked against the available memory (reading it
#: costs tens of microseconds, as much as a whole DP on a small graph).
SMALL_ALLOCATION = 64 * 2**20


class _CompileTimer(event.Listener):
    """Wall seconds Numba has spent holding (or waiting for) its compiler lock in this process:
    compiling a kernel or loading it from Numba's disk cache, outermost only (a kernel's
    compilation compiles the functions it calls inside it), any thread."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0
        self._start = 0.0
        self._lock = threading.Lock()

    def on_start(self, ev: event.Event) -> None:
        with self._lock:
            if self._depth == 0:
                self._start = time.perf_counter()
            self._depth += 1

    def on_end(self, ev: event.Event) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._start

    def total(self) -> float:
        """Seconds compiled so far, the compilation under way included."""
        with self._lock:
            ongoing = time.perf_counter() - self._start if self._depth else 0.0
            return self.seconds + ongoing


_COMPILING = _CompileTimer()
event.register("numba:compiler_lock", _COMPILING)


def clock() -> float:
    """Seconds on the planner's clock: ``time.perf_counter()`` less the seconds Numba has spent
    compiling kernels or loading them from its disk cache. A time limit counts the search, not
    the one-time compilation of the DP kernels in a process whose disk cache is empty (about
    33 s on these 2-core machines) or their loading from a warm cache (0.3-0.5 s)."""
    return time.perf_counter() - _COMPILING.total()


class Deadline:
    """The time limit of one planner call (seconds on :func:`clock`).

    Parameters
    ----------
    time_limit : float or None
        Seconds from now (already validated), or None for no limit.
    """

    def __init__(self, time_limit: float | None) -> None:
        self.start = clock()
        self.limit = time_limit
        self.end = None if time_limit is None else self.start + time_limit

    def elapsed(self) -> float:
        """Seconds since the call started, compilation left out."""
        return clock() - self.start

    def check(self, where: str | Callable[[], str]) -> None:
        """Raise SearchLimitError if the limit has passed.

        Parameters
        ----------
        where : str or callable
            Completes the message "time limit of ... s exceeded <where>" (a callable is called
            only when the limit has passed).

        Raises
        ------
        SearchLimitError
            With ``limit="time_limit"``, once the deadline has passed.
        """
        if self.end is not None and clock() > self.end:
            if callable(where):
                where = where()
            raise SearchLimitError(
                f"time limit of {self.limit:.3g} s exceeded {where}, after "
                f"{self.elapsed():.3f} s; raise time_limit, or plan with method='approx'",
                limit="time_limit")


NO_DEADLINE = Deadline(None)


class Chunker:
    """Adapts the work of each kernel call so that one call takes about `target` seconds.

    Parameters
    ----------
    initial : int
        Work units of the first call (sets, leaves of a search, or subset tests).
    target : float
        Seconds per call.
    minimum : int
        Never fewer work units than this per call.
    """

    def __init__(self, initial: int, target: float = CHUNK_SECONDS, minimum: int = 64) -> None:
        self.size = int(initial)
        self.target = target
        self.minimum = minimum
        self._t0: float | None = None

    def start(self) -> int:
        """Start timing one call; return its work budget."""
        self._t0 = time.perf_counter()
        return self.size

    def done(self, work: int) -> None:
        """Record the work units that the call just timed did, and size the next call."""
        assert self._t0 is not None, "Chunker.done before Chunker.start"
        elapsed = time.perf_counter() - self._t0
        if work > 0:
            if elapsed <= 0:
                rate_size = 4 * self.size
            else:
                rate_size = int(work * self.target / elapsed)
            # grow at most 4x at a time (a cheap first call says little), shrink at once
            self.size = max(self.minimum, min(rate_size, 4 * self.size))


#: Environment variable that sets how many threads one planner call may use.
THREADS_VARIABLE = "LOWERSET_THREADS"


def cores() -> int:
    """Threads one planner call may run at once: ``$LOWERSET_THREADS`` where it is set, else
    the logical cores this process may run on (its CPU affinity where the OS tells it).

    Raises
    ------
    ArgumentError
        If ``$LOWERSET_THREADS`` is set but not a positive integer.
    """
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ArgumentError(f"{THREADS_VARIABLE}={value!r}: expected a positive integer "
                                "(the threads one planner call may use)")
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of memory that new allocations can use, or None when it cannot be told.

    ``MemAvailable`` of ``/proc/meminfo`` on Linux, else the free physical pages.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


# whether this thread is one of several running DP passes at once (:func:`one_thread`)
_THREAD = threading.local()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """While inside, a DP pass on the calling thread runs on it alone (:func:`pass_threads` is
    1): the thread is one of several that run passes at once, and the other cores have work."""
    before = getattr(_THREAD, "alone", False)
    _THREAD.alone = True
    try:
        yield
    finally:
        _THREAD.alone = before


def pass_threads() -> int:
    """Threads one DP pass on the calling thread may use: 1 inside :func:`one_thread`, else 2
    where :func:`cores` allows two (a pass splits its size classes in two halves at most)."""
    return 1 if getattr(_THREAD, "alone", False) else min(2, cores())


# DP passes running at once (:func:`sharing_memory`): each may plan for its share of the cap
_sharing = 1


@contextlib.contextmanager
def sharing_memory(passes: int) -> Iterator[None]:
    """While inside, :func:`memory_cap` gives each of `passes` concurrent DP passes its share."""
    global _sharing
    before, _sharing = _sharing, max(1, int(passes))
    try:
        yield
    finally:
        _sharing = before


def memory_cap() -> int | None:
    """Bytes one planner call (or one of the DP passes it runs at once, :func:`sharing_memory`)
    may plan to allocate (:data:`MEMORY_FRACTION` of what is available), or None when the
    available memory is unknown."""
    avail = available_memory()
    return None if avail is None else int(MEMORY_FRACTION * avail) // _sharing


def check_memory(nbytes: int, what: str, fix: str) -> None:
    """Raise SearchLimitError before allocating `nbytes` that the machine does not have.

    Parameters
    ----------
    nbytes : int
        Planned allocation, bytes.
    what : str
        What would be allocated, for the message.
    fix : str
        What the caller can do instead, for the message.

    Raises
    ------
    SearchLimitError
        With ``limit="memory"``, if `nbytes` exceeds :func:`memory_cap` (allocations up to
        :data:`SMALL_ALLOCATION` are not checked).
    """
    if nbytes <= SMALL_ALLOCATION:
        return
    cap = memory_cap()
    if cap is not None and nbytes > cap:
        raise SearchLimitError(
            f"{what} needs about {nbytes / 1e9:.3g} GB, more than the {cap / 1e9:.3g} GB "
            f"({MEMORY_FRACTION:.0%} of the memory available) a planner call may use; {fix}",
            limit="memory")
