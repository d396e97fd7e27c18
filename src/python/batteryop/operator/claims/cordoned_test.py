"""claim_off_cordoned: a ClaimVM answer on a cordoned Host is given back and claimed again, a
bounded number of times; a failed give-back is reported, never bound."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from batteryop.battery.errors import (
    BatteryError,
    BatteryNotFoundError,
    BatteryPoolExhaustedError,
    BatteryUnavailableError,
)
from batteryop.battery.models import ClaimedVM, HostInfo, PoolRef
from batteryop.operator.claims.cordoned import (
    GIVE_BACKS,
    CordonedHostsError,
    GiveBackFailedError,
    claim_off_cordoned,
    node_cordoned,
)

POOL = PoolRef("ns", "warm")
NODES: dict[str, Mapping[str, Any]] = {
    "host-a": {"metadata": {"name": "host-a"}, "spec": {"unschedulable": True}},
    "host-b": {"metadata": {"name": "host-b"}, "spec": {}},
}


class Battery:
    """Answers ClaimVM with MicroVMs on `hosts` in turn; records every call."""

    def __init__(self, *hosts: str, release_error: BatteryError | None = None) -> None:
        self.hosts = list(hosts)
        self.release_error = release_error
        self.calls: list[tuple[str, str]] = []

    async def claim_vm(self, pool: PoolRef, *, request_id: str) -> ClaimedVM:
        assert pool == POOL
        n = len([c for c in self.calls if c[0] == "ClaimVM"])
        self.calls.append(("ClaimVM", request_id))
        if n >= len(self.hosts):
            raise BatteryPoolExhaustedError("ClaimVM", "RESOURCE_EXHAUSTED", "no available vm")
        host = self.hosts[n]
        return ClaimedVM(f"lease-{n}", f"vm-{n}", HostInfo(host, f"{host}:9090"))

    async def release_vm(self, lease_id: str) -> None:
        self.calls.append(("ReleaseVM", lease_id))
        if self.release_error is not None:
            raise self.release_error


async def claim(battery: Battery, given_back: list[ClaimedVM] | None = None) -> ClaimedVM:
    return await claim_off_cordoned(
        battery, POOL, request_id="uid-1", node=NODES.get, given_back=given_back
    )


def test_only_an_unschedulable_node_is_cordoned() -> None:
    assert node_cordoned(NODES["host-a"])
    assert not node_cordoned(NODES["host-b"])
    assert not node_cordoned({"spec": {"unschedulable": False}})
    assert not node_cordoned(None), "a Host without a Node is left to HostReady (CL-052)"


@pytest.mark.req("CL-103")
async def test_an_answer_on_an_uncordoned_host_is_kept_with_no_other_call() -> None:
    battery = Battery("host-b")
    claimed = await claim(battery)
    assert claimed.host.name == "host-b"
    assert battery.calls == [("ClaimVM", "uid-1")]


@pytest.mark.req("CL-103", "CL-060")
async def test_an_answer_on_a_cordoned_host_is_given_back_and_claimed_again() -> None:
    battery = Battery("host-a", "host-a", "host-b")
    given_back: list[ClaimedVM] = []
    claimed = await claim(battery, given_back)
    assert (claimed.lease_id, claimed.host.name) == ("lease-2", "host-b")
    assert battery.calls == [
        ("ClaimVM", "uid-1"),
        ("ReleaseVM", "lease-0"),
        ("ClaimVM", "uid-1"),
        ("ReleaseVM", "lease-1"),
        ("ClaimVM", "uid-1"),
    ]
    assert [c.vm_uid for c in given_back] == ["vm-0", "vm-1"]


@pytest.mark.req("CL-103")
async def test_the_give_backs_are_bounded_and_every_cordoned_lease_is_given_back() -> None:
    battery = Battery(*["host-a"] * (GIVE_BACKS + 2))
    with pytest.raises(CordonedHostsError) as info:
        await claim(battery)
    claims = [c for c in battery.calls if c[0] == "ClaimVM"]
    releases = [c[1] for c in battery.calls if c[0] == "ReleaseVM"]
    assert len(claims) == GIVE_BACKS
    assert releases == [f"lease-{n}" for n in range(GIVE_BACKS)], "none left leased"
    assert [c.lease_id for c in info.value.given_back] == releases
    assert "cordoned Hosts (host-a)" in str(info.value)


@pytest.mark.req("CL-103", "CL-003")
async def test_claimvm_errors_after_a_give_back_pass_through() -> None:
    battery = Battery("host-a")
    given_back: list[ClaimedVM] = []
    with pytest.raises(BatteryPoolExhaustedError):
        await claim(battery, given_back)
    assert [c.lease_id for c in given_back] == ["lease-0"]


@pytest.mark.req("CL-103")
async def test_a_lease_already_gone_counts_as_given_back() -> None:
    gone = BatteryNotFoundError("ReleaseVM", "NOT_FOUND", "lease not found")
    battery = Battery("host-a", "host-b", release_error=gone)
    assert (await claim(battery)).host.name == "host-b"


@pytest.mark.req("CL-104")
async def test_a_failed_give_back_is_reported_with_batterys_answer_and_not_claimed_past() -> None:
    pending = BatteryUnavailableError("ReleaseVM", "UNAVAILABLE", "vm cleanup pending, retry later")
    battery = Battery("host-a", "host-b", release_error=pending)
    with pytest.raises(GiveBackFailedError) as info:
        await claim(battery)
    assert info.value.error is pending
    assert info.value.claimed.lease_id == "lease-0"
    assert battery.calls == [("ClaimVM", "uid-1"), ("ReleaseVM", "lease-0")]
