"""What every benchmark shares: whether this is the full measurement, and latency figures."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable

FULL = os.environ.get("BATTERYOP_BENCH") == "1"
"""BATTERYOP_BENCH=1: the full measurement; otherwise a short smoke pass that proves it works."""


def latency_figures(seconds: Iterable[float], ndigits: int = 1) -> dict[str, float]:
    """n, p50, p99, mean and max, in milliseconds rounded to `ndigits`."""
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[0] if len(ms) == 1 else statistics.quantiles(ms, n=100, method="inclusive")[98]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), ndigits),
        "p99_ms": round(p99, ndigits),
        "mean_ms": round(statistics.fmean(ms), ndigits),
        "max_ms": round(ms[-1], ndigits),
    }


IDLE_SECONDS = 60.0 if FULL else 1.0
"""How long a process is left alone to measure what it costs at rest."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of process `pid` now (`rss_mb`) and at its peak (`peak_rss_mb`), in MB."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            for key, field in (("rss_mb", "VmRSS:"), ("peak_rss_mb", "VmHWM:")):
                if line.startswith(field):
                    values[key] = round(int(line.split()[1]) / 1024, 1)
    return values


class Usage:
    """CPU seconds and memory of one process over a stretch of a benchmark."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu = cpu_seconds(pid)

    def figures(self) -> dict[str, float]:
        """CPU seconds since this was made (or last asked), and memory now."""
        now = cpu_seconds(self.pid)
        used, self._cpu = now - self._cpu, now
        return {"cpu_s": round(used, 2), **memory_mb(self.pid)}
