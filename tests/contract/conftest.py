"""Fixtures for battery's contract suite: one `BatteryUnderTest` per available implementation.

The contract (battery_contract_test.py) states poolmgrd v0.4.0's behaviour through its gRPC
API only, so it can run against our fake battery and against the real poolmgrd alike. Each
implementation gets the same two fake flintlockd Hosts (processes shared by the module) and
offers the same controls: let battery time pass (`advance`), restart, go unavailable.

Implementations:
- "fake": `FakeBattery` on a `FakeClock` (advance is instant).
- "poolmgrd": the real poolmgrd, only when BATTERYOP_POOLMGRD_BIN names a binary. It cannot be
  built here (the Go module proxy answers 403 for github.com/liquidmetal-dev/battery), so today
  these cases are skipped with that reason. On it, `advance` waits in real time.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import signal
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2

from batteryop.testing.fake_battery import FakeBattery, FakeClock, Timings
from batteryop.testing.fake_battery.testkit import BatteryStubs
from batteryop.testing.fake_flintlock import FakeFlintlockd

# Short enough that the contract runs in seconds of real time against poolmgrd as well.
SWEEP_INTERVAL = 1.0
WARNING_WINDOW = 1.0
# poolmgrd's reconciler tick is fixed.
RECONCILE_INTERVAL = 10.0

HOST_NAMES = ("host-a", "host-b")

POOLMGRD_ENV = "BATTERYOP_POOLMGRD_BIN"
POOLMGRD_ABSENT = (
    "real poolmgrd v0.4.0 not available: github.com/liquidmetal-dev/battery is not served by the "
    "Go module proxy (403 Forbidden for v0.4.0 and v0.3.3, last checked 2026-11-29), so it "
    "cannot be built here and the fake battery stands in for it everywhere else; set "
    f"{POOLMGRD_ENV} to a poolmgrd binary to run the contract against it"
)


class BatteryUnderTest(abc.ABC):
    """A battery implementation the contract runs against."""

    name: str
    target: str
    stubs: BatteryStubs
    hosts: Mapping[str, FakeFlintlockd]
    sweep_interval = SWEEP_INTERVAL
    warning_window = WARNING_WINDOW
    reconcile_interval = RECONCILE_INTERVAL

    @abc.abstractmethod
    async def advance(self, seconds: float) -> None:
        """Let `seconds` of battery time pass, with the sweeps and ticks due in it."""

    @abc.abstractmethod
    async def restart(self) -> None:
        """Restart battery, keeping its database; returns once it answers again."""

    @abc.abstractmethod
    async def set_unavailable(self, unavailable: bool) -> None:
        """Make battery unreachable (UNAVAILABLE to callers), or reachable again."""

    async def vm_uids_on_hosts(self, namespace: str) -> set[str]:
        """Uids of the MicroVMs in namespace on every Host (not DELETING)."""
        uids: set[str] = set()
        for host in self.hosts.values():
            for vm in await host.list_vms():
                if vm.spec.namespace == namespace and vm.status.state != 3:  # DELETING
                    uids.add(vm.spec.uid)
        return uids


class FakeUnderTest(BatteryUnderTest):
    name = "fake"

    def __init__(self, battery: FakeBattery, hosts: Mapping[str, FakeFlintlockd]) -> None:
        self.battery = battery
        self.hosts = hosts
        self.target = battery.target
        self.stubs = BatteryStubs.on(grpc.aio.insecure_channel(self.target))

    async def advance(self, seconds: float) -> None:
        await self.battery.advance(seconds)

    async def restart(self) -> None:
        await self.battery.restart()

    async def set_unavailable(self, unavailable: bool) -> None:
        self.battery.set_unavailable(unavailable)


class PoolmgrdUnderTest(BatteryUnderTest):
    """The real poolmgrd as a process; never exercised here (see POOLMGRD_ABSENT)."""

    name = "poolmgrd"

    def __init__(self, binary: str, hosts: Mapping[str, FakeFlintlockd], workdir: Path) -> None:
        self.binary = binary
        self.hosts = hosts
        self.workdir = workdir
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.target = f"127.0.0.1:{port}"
        self.config = workdir / "config.json"
        self.config.write_text(
            json.dumps(
                {
                    "api_server": {"addr": self.target, "tls": {"insecure": True}},
                    "metrics_addr": "127.0.0.1:0",
                    "sweep_interval": f"{SWEEP_INTERVAL}s",
                    "warning_window": f"{WARNING_WINDOW}s",
                    "hosts": [
                        {"name": name, "address": host.target, "tls": {"insecure": True}}
                        for name, host in hosts.items()
                    ],
                }
            )
        )
        self.process: asyncio.subprocess.Process | None = None
        self.stubs = BatteryStubs.on(grpc.aio.insecure_channel(self.target))

    async def start(self) -> None:
        log = (self.workdir / "poolmgrd.log").open("ab")
        self.process = await asyncio.create_subprocess_exec(
            self.binary,
            "-config",
            str(self.config),
            "-db",
            str(self.workdir / "poolmgr.db"),
            "-log-level",
            "info",
            stdout=log,
            stderr=log,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await self.stubs.health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            if loop.time() > deadline:
                raise TimeoutError(f"poolmgrd did not serve; see {self.workdir / 'poolmgrd.log'}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.process = None

    async def advance(self, seconds: float) -> None:
        # Real time, plus one sweep interval so a sweep due at the end has run.
        await asyncio.sleep(seconds + SWEEP_INTERVAL)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def set_unavailable(self, unavailable: bool) -> None:
        if unavailable:
            await self.stop()
        else:
            await self.start()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def flintlock_hosts() -> AsyncIterator[dict[str, FakeFlintlockd]]:
    """Two fake flintlockd Hosts shared by the module's tests."""
    async with contextlib.AsyncExitStack() as stack:
        hosts = {
            name: await stack.enter_async_context(FakeFlintlockd.start(address="127.0.0.1"))
            for name in HOST_NAMES
        }
        yield hosts


@pytest_asyncio.fixture(params=["fake", "poolmgrd"], loop_scope="module")
async def battery(
    request: pytest.FixtureRequest, flintlock_hosts: dict[str, FakeFlintlockd]
) -> AsyncIterator[BatteryUnderTest]:
    for host in flintlock_hosts.values():
        if not await host.is_up():
            await host.come_up()
    if request.param == "fake":
        timings = Timings(
            sweep_interval=SWEEP_INTERVAL,
            warning_window=WARNING_WINDOW,
            reconcile_interval=RECONCILE_INTERVAL,
        )
        async with FakeBattery.start(
            hosts={name: host.target for name, host in flintlock_hosts.items()},
            clock=FakeClock(),
            timings=timings,
        ) as fake:
            under_test = FakeUnderTest(fake, flintlock_hosts)
            try:
                yield under_test
            finally:
                await under_test.stubs.channel.close()
        return
    binary = os.environ.get(POOLMGRD_ENV, "")
    if not binary:
        print(POOLMGRD_ABSENT)
        pytest.skip(POOLMGRD_ABSENT)
    with tempfile.TemporaryDirectory(prefix="poolmgrd-") as workdir:
        real = PoolmgrdUnderTest(binary, flintlock_hosts, Path(workdir))
        await real.start()
        try:
            yield real
        finally:
            await real.stop()
            await real.stubs.channel.close()


@pytest.fixture
def ns() -> str:
    """A namespace of this test's own, so Pools and MicroVMs never collide across tests."""
    return f"ct-{uuid.uuid4().hex[:8]}"
