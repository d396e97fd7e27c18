"""End-to-end with real guests (GI-101): the local stack with `guests="qemu"`, one Host whose
fake flintlockd boots each MicroVM of the demo Pool as a QEMU guest of the Debian guest image,
every command ending at flintlock's guest agent inside it. A claim runs `cat /proc/version`
(the guest's kernel), a stdin round trip, a non-zero exit and a timeout that kills the command
in the guest, and `battery shell` on a PTY through the guest's sshd, and is released; then a guest is killed under a Bound claim, and battery and the
operator handle the lost MicroVM as in production (poolmgrd does not watch its MicroVMs: exec
fails, the claim stays Bound until it is released, and the release deletes what is gone)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from e2e.driver import battery_state, control, eventually, leases_for, until

from batteryop.client import AsyncClaim, AsyncClient, ExecError
from batteryop.devstack import demo
from batteryop.devstack.cluster import DEMO_HOLDER, DEMO_NAMESPACE
from batteryop.devstack.stack import Stack, running
from batteryop.kube.resources import CLAIMS
from batteryop.release import guest_kernel
from batteryop.testing.terminal import Terminal

pytestmark = pytest.mark.asyncio(loop_scope="module")
CLAIM_TIMEOUT = 900.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def qemu_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not found: install Debian's qemu-system-x86")
    started = time.monotonic()
    root = tmp_path_factory.mktemp("devstack-qemu")
    async with running(root, Path("."), host_count=1, guests="qemu") as up:
        async with up.kube() as kube:
            seconds = await demo.apply_pool(
                kube, available=True, timeout=demo.QEMU_POOL_TIMEOUT_SECONDS, images=up.guest_refs
            )
        print(f"\nstack up in {up.timings['up']:.1f}s; a guest available {seconds:.1f}s later")
        yield up
    print(f"\nreal guests end to end: {time.monotonic() - started:.0f} s")


@pytest_asyncio.fixture(loop_scope="module")
async def client(qemu_stack: Stack) -> AsyncIterator[AsyncClient]:
    assert qemu_stack.pki is not None
    async with AsyncClient(
        namespace=DEMO_NAMESPACE,
        kubeconfig=qemu_stack.kubeconfig,
        serving_ca=qemu_stack.pki.exec_serving_ca_file,
    ) as c:
        yield c


async def _claim(client: AsyncClient) -> AsyncClaim:
    return await client.claim(demo.POOL, DEMO_HOLDER, timeout=CLAIM_TIMEOUT)


async def _guests(stack: Stack) -> list[dict[str, Any]]:
    (host,) = stack.hosts.values()
    guests: list[dict[str, Any]] = (await control(f"{host.flintlockd_control}/guests"))["guests"]
    return guests


@pytest.mark.req("GI-101", "CC-101", "TD-010", "CC-118", "EA-130")
async def test_a_claim_runs_commands_in_a_real_guest(
    qemu_stack: Stack, client: AsyncClient
) -> None:
    claim = await _claim(client)
    try:
        version = await claim.exec(["cat", "/proc/version"])
        assert version.exit_code == 0
        assert guest_kernel.SIGNATURE.encode() in version.stdout  # the release's guest kernel
        assert version.stdout.strip() != Path("/proc/version").read_bytes().strip()

        data = os.urandom(100_000)
        echoed = await claim.exec(["cat"], stdin=data)
        assert (echoed.exit_code, echoed.stdout) == (0, data)

        failed = await claim.exec(["sh", "-c", "echo oops >&2; exit 7"])
        assert (failed.exit_code, failed.stderr) == (7, b"oops\n")

        started = time.monotonic()
        slept = await claim.exec(["sleep", "300"], timeout_seconds=2)
        assert slept.exit_code == 128 + signal.SIGTERM  # the agent's timeout, in the guest
        assert time.monotonic() - started < 60
        left = await claim.exec(["pgrep", "-x", "sleep"])
        assert left.exit_code == 1, left  # no sleep is left running in the guest

        # CC-118, EA-130: `battery shell` reaches the guest's own sshd through the Exec Agent
        # and flintlockd's SSH proxy, on a PTY of the terminal's size.
        started = time.monotonic()
        terminal = Terminal(
            f"battery shell -t {claim.name} -- sh -c 'stty size; cat /proc/version; exit 6'",
            qemu_stack.cli_env(),
            rows=30,
            columns=90,
        )
        try:
            assert await terminal.exited(300) == 6, terminal.text
        finally:
            terminal.close()
        print(f"battery shell in a QEMU guest: {time.monotonic() - started:.1f}s to its exit")
        assert "30 90" in terminal.text and guest_kernel.SIGNATURE in terminal.text, terminal.text
    finally:
        await claim.release()


@pytest.mark.req("GI-101", "TD-010", "CL-060")
async def test_a_guest_killed_under_a_bound_claim(qemu_stack: Stack, client: AsyncClient) -> None:
    claim = await _claim(client)
    try:
        assert (await claim.exec(["true"])).exit_code == 0
        (guest,) = (g for g in await _guests(qemu_stack) if g["uid"] == claim.microvm_uid)
        os.kill(guest["pid"], signal.SIGKILL)

        async def gone() -> bool:  # the fake sees QEMU's exit when it reaps it, not at the kill
            return claim.microvm_uid not in {g["uid"] for g in await _guests(qemu_stack)}

        await eventually(gone, 60, f"QEMU of {claim.microvm_uid} reaped by the fake flintlockd")
        with pytest.raises(ExecError):
            await claim.exec(["true"])
        # poolmgrd does not watch its MicroVMs: the claim keeps its Lease until released.
        assert claim.lost_error is None
        assert len(leases_for(await battery_state(qemu_stack), claim.uid)) == 1
    finally:
        await claim.release()
    # The release of a MicroVM that is gone succeeds: battery ends the Lease, and only then
    # does the operator let the claim go (its finalizer).
    async with qemu_stack.kube() as kube:
        await until(kube, CLAIMS, claim.name, lambda body: body is None, what="gone")
    assert leases_for(await battery_state(qemu_stack), claim.uid) == []
