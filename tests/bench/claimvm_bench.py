"""ClaimVM round trip through the battery client, per battery implementation.

Measures the time of `BatteryClient.claim_vm` (request over grpc.aio on loopback, battery
choosing and committing a Lease, the answer back) against a warm Pool on two fake
flintlockd Hosts. Releases are not timed. Prints one JSON line per implementation:

    {"bench": "claimvm_roundtrip", "implementation": "fake-battery", "runs": 500,
     "p50_ms": ..., "p99_ms": ..., "mean_ms": ..., "max_ms": ..., "exhausted_retries": ...}

The real poolmgrd is measured when BATTERYOP_POOLMGRD_BIN names a built binary; the Go
module proxy answers 403 for github.com/liquidmetal-dev/battery, so here it is reported absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

from bench.stats import FULL, latency_figures

from batteryop.battery import (
    BatteryClient,
    BatteryConfig,
    BatteryPoolExhaustedError,
    HookFailurePolicy,
    InterfaceType,
    Kernel,
    MicroVMTemplate,
    NetworkInterface,
    PoolRef,
    PoolSpec,
    Replenishment,
    ReplenishmentType,
    Volume,
)
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.fake_flintlock import FakeFlintlockd

RUNS = 500 if FULL else 30
WARM = 16


def _spec(hosts: list[str]) -> PoolSpec:
    return PoolSpec(
        namespace="bench",
        name="warm",
        template=MicroVMTemplate(
            vcpu=1,
            memory_in_mb=1024,
            kernel=Kernel(image="example/kernel:6.1", filename="boot/vmlinux"),
            root_volume=Volume(id="root", container_source="example/root:24.04"),
            interfaces=(NetworkInterface(device_id="eth1", type=InterfaceType.TAP),),
        ),
        size=WARM,
        replenishment=Replenishment(ReplenishmentType.IMMEDIATE_ON_LEASE),
        hook_failure_policy=HookFailurePolicy.DELETE_AND_REPLACE,
        heartbeat_interval=timedelta(seconds=10),
        heartbeat_expiry_threshold=timedelta(seconds=30),
        flintlock_hosts=tuple(hosts),
    )


@contextlib.asynccontextmanager
async def _fake_battery() -> AsyncIterator[tuple[str, list[str]]]:
    async with contextlib.AsyncExitStack() as stack:
        hosts = {
            name: (await stack.enter_async_context(FakeFlintlockd.start(address=addr))).target
            for name, addr in (("host-a", "127.0.0.3"), ("host-b", "127.0.0.4"))
        }
        battery = await stack.enter_async_context(FakeBattery.start(hosts=hosts))
        yield battery.target, list(hosts)


async def _wait_available(client: BatteryClient, ref: PoolRef, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while (await client.get_pool(ref)).status.available < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"pool {ref} never reached {at_least} available MicroVMs")
        await asyncio.sleep(0.02)


async def measure(target: str, hosts: list[str], runs: int) -> dict[str, object]:
    async with BatteryClient.connect(BatteryConfig(target=target)) as client:
        spec = _spec(hosts)
        await client.create_pool(spec)
        await _wait_available(client, spec.ref, WARM)
        samples: list[float] = []
        vm_uids: set[str] = set()
        exhausted = 0
        while len(samples) < runs:
            started = time.perf_counter()
            try:
                claimed = await client.claim_vm(spec.ref, request_id=str(uuid.uuid4()))
            except BatteryPoolExhaustedError:
                exhausted += 1  # replenishment fell behind; wait for a warm MicroVM, untimed
                await _wait_available(client, spec.ref, 1)
                continue
            samples.append(time.perf_counter() - started)
            assert claimed.vm_uid not in vm_uids, f"MicroVM {claimed.vm_uid} leased twice"
            vm_uids.add(claimed.vm_uid)
            await client.release_vm(claimed.lease_id)
    return {
        "runs": len(samples),
        **latency_figures(samples, ndigits=3),
        "exhausted_retries": exhausted,
        "distinct_microvms": len(vm_uids),
    }


async def test_claimvm_roundtrip_through_the_client() -> None:
    results = []
    async with _fake_battery() as (target, hosts):
        figures = await measure(target, hosts, RUNS)
    results.append({"bench": "claimvm_roundtrip", "implementation": "fake-battery", **figures})
    poolmgrd = os.environ.get("BATTERYOP_POOLMGRD_BIN")
    if not poolmgrd:
        results.append(
            {
                "bench": "claimvm_roundtrip",
                "implementation": "poolmgrd",
                "absent": "not built: the Go module proxy answers 403 Forbidden for "
                "github.com/liquidmetal-dev/battery (v0.4.0 and v0.3.3)",
            }
        )
    print()
    for line in results:
        print(json.dumps(line))
    assert figures["runs"] == RUNS
    assert figures["distinct_microvms"] == RUNS  # never a reused MicroVM
