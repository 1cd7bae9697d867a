"""Describe the machine a benchmark ran on (CPU, cores, library versions)."""

import os
import platform


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
            info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
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
