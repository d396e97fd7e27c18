"""The hold loop of an `AsyncClaim`, with its client's IO replaced by a small stub: it renews
every heartbeat, refreshes the token once it is due, reports the first HostReady=False once,
and stops when the lease is lost."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from batteryop.api import samples
from batteryop.api._compat import UTC  # 3.10 too (pythons_test)
from batteryop.api.claim import MicroVMClaim
from batteryop.client import AsyncClaim, AsyncClient, HostNotReadyError, LeaseLostError, _core


def bound_claim(host_ready: bool = True) -> MicroVMClaim:
    body: dict[str, Any] = samples.sample_claim(name="c", pool="demo", namespace="ns")
    body["metadata"]["uid"] = "u1"
    body["status"] = {
        "phase": "Bound",
        "microVM": {"uid": "vm"},
        "host": {"nodeName": "host-a"},
        "conditions": [
            {
                "type": "HostReady",
                "status": "True" if host_ready else "False",
                "reason": "Ready" if host_ready else "KVMUnavailable",
                "message": "" if host_ready else "no /dev/kvm",
                "lastTransitionTime": "2026-12-01T00:00:00Z",
            }
        ],
    }
    return MicroVMClaim.from_dict(body)


class StubClient:
    """The three things a held claim asks of its client, scripted."""

    def __init__(self, answers: list[MicroVMClaim | None], token_life: float) -> None:
        self._claims: set[AsyncClaim] = set()
        self.answers = answers
        self.renewals = 0
        self.tokens = 0
        self.token_life = token_life
        self.refreshed = asyncio.Event()

    async def _renew(self, claim: AsyncClaim) -> MicroVMClaim | None:
        self.renewals += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def _token(self, claim: AsyncClaim) -> _core.Token:
        self.tokens += 1
        if self.tokens == 2:
            self.refreshed.set()
        now = datetime.now(UTC)
        return _core.Token(f"t{self.tokens}", now, now + timedelta(seconds=self.token_life))


def held(stub: StubClient, **callbacks: Any) -> AsyncClaim:
    return AsyncClaim(
        cast(AsyncClient, stub),
        bound_claim(),
        secret_uid="s1",
        heartbeat=timedelta(milliseconds=20),
        **callbacks,
    )


@pytest.mark.req("CC-010", "CC-011")
async def test_holding_renews_every_heartbeat_and_refreshes_a_due_token() -> None:
    stub = StubClient([bound_claim()], token_life=1.2)  # due after its 1 s minimum
    claim = held(stub)
    assert await claim.token() == "t1"
    claim.start_holding()
    await asyncio.wait_for(stub.refreshed.wait(), 10)
    assert stub.renewals >= 2
    assert await claim.token() == "t2"
    await claim.detach()
    assert not claim.holding


@pytest.mark.req("CC-012", "CC-013")
async def test_holding_reports_host_not_ready_once_then_a_lost_lease_and_stops() -> None:
    reports: list[HostNotReadyError] = []
    lost: list[LeaseLostError] = []
    answers = [bound_claim(host_ready=False), bound_claim(host_ready=False), bound_claim(), None]
    stub = StubClient(answers, token_life=600)
    claim = held(stub, on_host_not_ready=reports.append, on_lost=lost.append)
    claim.start_holding()
    error = await asyncio.wait_for(claim.wait_lost(), 10)
    assert [r.reason for r in reports] == ["KVMUnavailable"]
    assert claim.host_not_ready is reports[0]
    assert lost == [error]
    assert str(error) == "claim c was deleted"
    with pytest.raises(LeaseLostError):
        claim.raise_if_lost()
    loop = claim._holder_task
    assert loop is not None
    await asyncio.wait_for(loop, 10)  # the loop ended by itself
