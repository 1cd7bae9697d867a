"""Describe the machine a benchmark ran on (CPU, cores, library versions); steady its allocator."""

import ctypes
import os
import platform

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def reuse_freed_memory():
    """Make glibc keep the memory the process frees and hand it out again, as CuPy's memory pool
    does on a GPU, rather than return large blocks to the kernel and fault fresh zeroed pages in
    at the next allocation. Timing benchmarks call it before they start.

    On the 2-core VM of the README the kernel spends 0.75-0.94 s re-faulting VGG19's per-step
    arrays on about one step in three (a 1.9 s step, plain or hooked alike): noise that swamps
    the executor's own cost. Blocks below 1 GiB then come from the heap and the heap is never
    trimmed. No result changes, nor any memory figure (tracemalloc counts what is requested).

    Returns
    -------
    str or None
        What was set, for the report; None where glibc's ``mallopt`` is not available.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30) == 1
              and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1)
    except (OSError, AttributeError):
        return None
    return "glibc: freed memory kept (mmap threshold 1 GiB, no trim)" if ok else None


def machine_info():
    """Return a dict: CPU model, logical cores, Python, numpy/numba/chainer/cupy versions, GPU."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "logical_cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}
    for mod in ("numpy", "numba", "networkx", "chainer", "cupy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - absent or broken optional package
            info[mod] = None
    try:
        import numba

        info["numba_threads"] = numba.config.NUMBA_NUM_THREADS
    except Exception:  # noqa: BLE001
        pass
    if info.get("cupy"):
        try:
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(0)
            name = props["name"]
            info["gpu"] = name.decode() if isinstance(name, bytes) else name
        except Exception:  # noqa: BLE001 - no device
            info["gpu"] = None
    return info


def machine_line(info=None):
    """One line for the top of a report."""
    info = info or machine_info()
    parts = [f"{info['cpu']} ({info['logical_cores']} logical cores)"]
    if info.get("gpu"):
        parts.append(f"GPU {info['gpu']}")
    parts.append(f"Python {info['python']}")
    parts += [f"{k} {info[k]}" for k in ("numpy", "numba", "chainer", "cupy") if info.get(k)]
    return ", ".join(parts)
