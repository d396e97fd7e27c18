"""The results file's figures and ratios (pure; runs under `pants test ::`)."""

from typing import Any

import pytest
from bench.peers.results import OURS, document, figures, ratios


def run(side: str, label: str, p50: float, rate: float) -> dict[str, Any]:
    measured = {
        "sequential": {"p50_ms": p50, "p99_ms": 2 * p50},
        "burst": {
            "claims_per_second": rate,
            "apiserver_requests_per_claim": {"create sandboxclaims": 1.0, "total": 4.0},
            "cpu_seconds_per_burst": {"kube-apiserver": 1.5, "etcd": 0.5, "controller": 1.0},
        },
        "api_server_floor": {"claims_per_second": 200.0},
    }
    return {"side": side, "label": label, **measured, "figures": figures(measured)}


def test_a_runs_figures_sum_its_processes_and_set_its_bursts_against_the_floor() -> None:
    f = run(OURS, "ours", 20.0, 50.0)["figures"]
    assert f["one_at_a_time_p99_ms"] == 40.0
    assert f["cpu_s_per_burst"] == 3.0 and f["cpu_s_per_burst_apiserver"] == 1.5
    assert f["requests_per_claim"] == 4.0
    assert f["burst_of_floor"] == 0.25


def test_each_peer_run_is_compared_with_the_runs_of_ours_beside_it_only() -> None:
    runs = [
        run(OURS, "ours 1", 10.0, 60.0),
        run("agent-sandbox", "agent-sandbox default", 80.0, 20.0),
        run(OURS, "ours 2", 30.0, 40.0),
        run("agent-sandbox", "agent-sandbox tuned", 40.0, 40.0),
        run(OURS, "ours 3", 50.0, 20.0),
    ]
    got = ratios(runs)
    assert set(got) == {"agent-sandbox default", "agent-sandbox tuned"}
    # default: ours 1 and 2 (mean p50 20 ms, 50/s); tuned: ours 2 and 3 (40 ms, 30/s).
    assert got["agent-sandbox default"]["one_at_a_time_p50_ms"] == 0.25
    assert got["agent-sandbox default"]["burst_claims_per_s"] == 2.5
    assert got["agent-sandbox tuned"]["one_at_a_time_p50_ms"] == 1.0
    assert got["agent-sandbox tuned"]["burst_claims_per_s"] == 0.75
    assert "api_server_floor_claims_per_s" not in got["agent-sandbox tuned"]
    assert document(runs, {"commit": "abc"})["ratios"] == got


def test_a_peer_run_with_no_run_of_ours_beside_it_is_refused() -> None:
    with pytest.raises(ValueError, match="beside"):
        ratios([run("agent-sandbox", "alone", 1.0, 1.0)])
