"""The peer benchmark's results file: every run's figures, and ours over the peer's.

Runs alternate (`PLAN`: ours, peer default, ours, peer tuned, ours) because a shared machine's
speed drifts within the hour; each peer run is compared with the runs of ours beside it
(`RATIOS`, which the file carries too).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

RATIOS: Final = (
    "ours / peer per figure, ours being the mean of the runs of ours just before and just "
    "after the peer's run; below 1: less for us (milliseconds, requests, CPU seconds), above "
    "1: more (claims per second, bursts as a fraction of the floor)"
)
OURS: Final = "ours"
PLAN: Final = (
    (OURS, ""),
    ("agent-sandbox", "default"),
    (OURS, ""),
    ("agent-sandbox", "tuned"),
    (OURS, ""),
)
"""The runs in order: (side, the peer's setting)."""

FIGURES: Final[Mapping[str, Callable[[Mapping[str, Any]], float]]] = {
    "one_at_a_time_p50_ms": lambda r: float(r["sequential"]["p50_ms"]),
    "one_at_a_time_p99_ms": lambda r: float(r["sequential"]["p99_ms"]),
    "burst_claims_per_s": lambda r: float(r["burst"]["claims_per_second"]),
    "requests_per_claim": lambda r: float(r["burst"]["apiserver_requests_per_claim"]["total"]),
    "cpu_s_per_burst": lambda r: float(sum(r["burst"]["cpu_seconds_per_burst"].values())),
    "cpu_s_per_burst_apiserver": lambda r: float(
        r["burst"]["cpu_seconds_per_burst"]["kube-apiserver"]
    ),
    "api_server_floor_claims_per_s": lambda r: float(r["api_server_floor"]["claims_per_second"]),
}
"""The figures each run is summed up by, and compared on (the floor aside: `MACHINE_ONLY`)."""
MACHINE_ONLY: Final = ("api_server_floor_claims_per_s",)
"""Figures of the API server alone, whichever controller runs after: not compared."""


def run_label(side: str, setting: str) -> str:
    return f"{side} {setting}".strip()


def figures(run: Mapping[str, Any]) -> dict[str, float]:
    """A run's `FIGURES`, and its bursts as a fraction of the API server's floor."""
    out = {name: round(get(run), 2) for name, get in FIGURES.items()}
    out["burst_of_floor"] = round(
        out["burst_claims_per_s"] / out["api_server_floor_claims_per_s"], 2
    )
    return out


def ratios(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """For each run of the peer (by label): ours / peer for each figure, ours being the mean
    of the runs of ours just before and just after it (whichever there are)."""
    out: dict[str, dict[str, float]] = {}
    for i, run in enumerate(runs):
        if run["side"] == OURS:
            continue
        beside = [
            runs[j]["figures"]
            for j in (i - 1, i + 1)
            if 0 <= j < len(runs) and runs[j]["side"] == OURS
        ]
        if not beside:
            raise ValueError(f"run {i} ({run['label']}) has no run of ours beside it")
        out[run["label"]] = {
            name: round(statistics.fmean(f[name] for f in beside) / value, 2)
            for name, value in run["figures"].items()
            if value and name not in MACHINE_ONLY
        }
    return out


def document(runs: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any]) -> dict[str, Any]:
    """The results file: `provenance` (benchmark, command, commit, machine, settings...),
    the runs, and the ratios."""
    return {**provenance, "runs": list(runs), "ratios_are": RATIOS, "ratios": ratios(runs)}
