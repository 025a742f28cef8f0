"""What a benchmark figure is measured on, and a yardstick measured in the same run.

Seconds differ from one machine to the next, and on a shared machine from one minute to the next; a figure divided
by a reference measured in the same process at the same time does not (as much). The reference is a fixed piece of
pure-Python work of the kind the engine does (dict lookups, tuples, float arithmetic, small lists), timed in CPU
seconds; every benchmark reports its figures in seconds and as a ratio to it.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time


def machine() -> dict:
    """CPU model, cores (and the cores this process may run on), Python and OS."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), model
            )
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()}",
        "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def _reference_work() -> float:
    table: dict[tuple[int, int], float] = {}
    total = 0.0
    for i in range(150_000):
        key = (i % 97, i % 13)
        table[key] = table.get(key, 0.0) + i * 0.5
        row = [float(i), 1.5, 2.5]
        total += max(row) - min(row) + len(table)
    return total


def reference_cpu_s(repeat: int = 5) -> float:
    """CPU seconds of the reference work: the least of ``repeat`` runs (the machine's speed, not its noise)."""
    runs = []
    for _ in range(repeat):
        started = time.process_time()
        _reference_work()
        runs.append(time.process_time() - started)
    return min(runs)


SAMPLE_S = 0.05  # a sample runs a fast call this many CPU seconds' worth of times (timer and cache noise)


def cpu_ratio(fn, repeat: int) -> tuple[float, float]:
    """(median CPU seconds per call of ``fn()``, median of its ratio to the reference measured just before it)
    over ``repeat`` samples, after one call that warms the caches. A sample repeats a sub-millisecond call until it
    has run about SAMPLE_S seconds: one such call right after the reference loop is timed with cold CPU caches
    and varies 2x from run to run. Pairing each sample with a reference run keeps the ratio meaningful when the
    machine's speed drifts during the benchmark."""
    started = time.process_time()
    fn()
    calls = max(1, math.ceil(SAMPLE_S / max(time.process_time() - started, 1e-6)))
    runs, ratios = [], []
    for _ in range(repeat):
        reference = reference_cpu_s(3)
        started = time.process_time()
        for _ in range(calls):
            fn()
        runs.append((time.process_time() - started) / calls)
        ratios.append(runs[-1] / reference)
    return statistics.median(runs), statistics.median(ratios)


def describe(info: dict, reference_s: float) -> str:
    load = f", load {info['load_1min']:.1f}" if info.get("load_1min") is not None else ""
    return (
        f"{info['cpu']}, {info['usable_cores']} of {info['cores']} cores{load}, Python {info['python']} "
        f"({sys.platform}); reference work {reference_s * 1e3:.1f} ms CPU"
    )
