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
