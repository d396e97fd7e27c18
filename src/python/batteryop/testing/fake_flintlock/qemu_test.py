"""The fake flintlockd's QEMU guests (GI-101, GI-102, TD-010): a MicroVM is a real Linux guest
of the Debian guest image, readiness is the guest agent's ping, commands run in the guest through
the agent, a real `ssh` reaches the guest's sshd through MicroVMSSHProxy and the agent's SSH
port, the spec's vCPUs and memory are the guest's, and a killed QEMU makes the MicroVM gone.
One guest is booted for the module (TCG is slow); the figures the docs quote are printed."""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2
from battery_protos.flintlock.services.microvm.v1alpha1.microvms_pb2_grpc import MicroVMStub
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from batteryop.release import guest_kernel
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_flintlock.testkit import (
    ADDRESS,
    Client,
    assert_exit_last,
    authorize,
    client_key,
    joined,
    known_hosts,
    make_spec,
    published_guest,
    run,
    ssh_command,
    ssh_env,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
VCPU, MEMORY_MB = 1, 1024


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def qemu(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    async with (
        published_guest(tmp_path_factory.mktemp("registry")) as guest,
        FakeFlintlockd.start(address=ADDRESS, guests="qemu", ssh_proxy=True) as host,
        grpc.aio.insecure_channel(host.target) as channel,
    ):
        client = Client(host, channel, MicroVMStub(channel), MicroVMExecStub(channel))
        client.guest = guest
        spec = make_spec("guest", guest=guest)
        spec.vcpu, spec.memory_in_mb = VCPU, MEMORY_MB
        client.shared_uid = await client.create_ready(spec)
        yield client


def _uid(client: Client) -> str:
    assert client.shared_uid is not None
    return client.shared_uid


async def _shell(client: Client, script: str) -> str:
    responses = await run(
        client, microvmexec_pb2.ExecStart(uid=_uid(client), cmd=script, shell=True)
    )
    assert_exit_last(responses, 0)
    return joined(responses, "stdout").decode()


@pytest.mark.req("GI-101", "GI-026", "TD-010")
async def test_commands_run_in_the_guests_own_kernel(qemu: Client) -> None:
    version = await _shell(qemu, "cat /proc/version")
    # The release's guest kernel (built as battery@guest-kernel), not this machine's.
    assert version.startswith("Linux version ") and guest_kernel.SIGNATURE in version
    assert version.strip() != Path("/proc/version").read_text().strip()
    (guest,) = await qemu.host.guests()
    assert guest["uid"] == _uid(qemu)
    # The agent runs as systemd started it: the unit enabled in the image, over TCP (GI-101).
    unit = await _shell(qemu, "systemctl is-active guest-agent.service; echo $GA_NET")
    assert unit.split() == ["active", "tcp"]
    assert platform.machine() == "x86_64"


@pytest.mark.req("GI-101", "TD-010")
async def test_the_spec_sets_the_guests_cpus_and_memory(qemu: Client) -> None:
    out = (await _shell(qemu, "nproc; grep MemTotal /proc/meminfo")).split()
    assert int(out[0]) == VCPU
    mem_total_mb = int(out[2]) / 1024
    assert 0.8 * MEMORY_MB < mem_total_mb <= MEMORY_MB, out


@pytest.mark.req("GI-101")
async def test_figures_boot_memory_and_exec_round_trip(qemu: Client) -> None:
    """Printed for the docs: QEMU's start to the agent's first ping, QEMU's resident memory,
    and the round trip of `true` through the fake here against the sandbox backend."""
    (guest,) = await qemu.host.guests()
    assert 0 < guest["boot_seconds"] < 900
    assert guest["rss_kib"] > 0
    real = [await _round_trip(qemu, _uid(qemu)) for _ in range(10)]
    async with (
        FakeFlintlockd.start(address=ADDRESS) as sandbox_host,
        grpc.aio.insecure_channel(sandbox_host.target) as channel,
    ):
        sandbox = Client(sandbox_host, channel, MicroVMStub(channel), MicroVMExecStub(channel))
        uid = await sandbox.create()
        memory = [await _round_trip(sandbox, uid) for _ in range(10)]
    print(
        f"\nQEMU guest ({guest['accelerator']}, {VCPU} vCPU, {MEMORY_MB} MiB): first ping "
        f"{guest['boot_seconds']:.1f} s after QEMU started; QEMU RSS {guest['rss_kib'] / 1024:.0f}"
        f" MiB; exec `true` p50 {statistics.median(real) * 1000:.0f} ms (guest agent) vs "
        f"{statistics.median(memory) * 1000:.1f} ms (sandbox); load {os.getloadavg()[0]:.1f}"
    )
    assert statistics.median(real) > 0


async def _round_trip(client: Client, uid: str) -> float:
    started = time.perf_counter()
    assert_exit_last(await run(client, microvmexec_pb2.ExecStart(uid=uid, cmd="true")), 0)
    return time.perf_counter() - started


async def _ssh(client: Client, key: Path, known: Path, *argv: str) -> tuple[float, str, str]:
    """(seconds, stdout, stderr) of one `ssh` to the module's guest; fails unless it exits 0."""
    command = ssh_command(client.host.target, _uid(client), key, known, *argv)
    started = time.perf_counter()
    done = await asyncio.to_thread(
        subprocess.run, command, env=ssh_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - started, done.stdout, done.stderr


@pytest.mark.req("GI-102", "GI-027", "TD-013")
async def test_ssh_reaches_the_guests_sshd_through_the_ssh_proxy(
    qemu: Client, tmp_path: Path
) -> None:
    """A real ssh client, its key added by exec as a client adds it, the guest's own host key
    checked; the boot-to-sshd time and the `ssh true` round trip are printed for the docs."""
    uid = _uid(qemu)
    key, public = client_key(tmp_path)
    await authorize(qemu, uid, public, user="root")
    known = await known_hosts(qemu, uid, tmp_path / "known_hosts")
    _, out, _ = await _ssh(qemu, key, known, "id -u; cat /proc/version")
    user, version = out.splitlines()
    assert user == "0" and guest_kernel.SIGNATURE in version

    # sshd listens on the guest's loopback only, and takes keys only.
    listening = await _shell(qemu, "ss -Hltn 'sport = :22'")  # the tree has no awk link
    assert [line.split()[3] for line in listening.splitlines()] == ["127.0.0.1:22"]
    no_key = ssh_command(qemu.host.target, uid, key, known, "true")
    no_key[1:1] = ["-o", "PubkeyAuthentication=no"]
    refused = await asyncio.to_thread(
        subprocess.run, no_key, env=ssh_env(), capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr

    # The guest's own clock: microseconds from its kernel's start to each unit being active.
    units = "guest-agent.service ssh-host-key.service ssh.service"
    shown = await _shell(qemu, f"systemctl show -P ActiveEnterTimestampMonotonic {units}")
    agent_us, key_us, sshd_us = (int(v) for v in shown.split())
    assert 0 < key_us <= sshd_us
    trips = [(await _ssh(qemu, key, known, "true"))[0] for _ in range(5)]
    (guest,) = await qemu.host.guests()
    print(
        f"\nQEMU guest ({guest['accelerator']}): sshd active {sshd_us / 1e6:.1f} s after the "
        f"kernel started (host key made by {key_us / 1e6:.1f} s, guest agent {agent_us / 1e6:.1f}"
        f" s); `ssh true` through MicroVMSSHProxy p50 {statistics.median(trips) * 1000:.0f} ms "
        f"(min {min(trips) * 1000:.0f}); load {os.getloadavg()[0]:.1f}"
    )


@pytest.mark.req("GI-101", "TD-010")
async def test_a_killed_guest_is_gone(qemu: Client) -> None:
    """Last in the module: it kills the module's guest."""
    uid = _uid(qemu)
    (guest,) = await qemu.host.guests()
    os.kill(guest["pid"], 9)
    assert await _status_once_gone(qemu, uid) == grpc.StatusCode.NOT_FOUND
    assert await qemu.host.guests() == []
    assert await qemu.host.list_vms() == []
    # The fake says so with QEMU's own last words (empty for a SIGKILL), logged before it drops
    # the MicroVM.
    assert f"microvm {uid}: QEMU exited (-9); its stderr ends:" in qemu.host.log_tail(200)
    call = qemu.exec.ExecCommand(timeout=20)
    await call.write(microvmexec_pb2.ExecCommandRequest(
        start=microvmexec_pb2.ExecStart(uid=uid, cmd="true")))  # fmt: skip
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.UNKNOWN  # flintlockd's answer for an unknown uid


async def _status_once_gone(client: Client, uid: str) -> grpc.StatusCode:
    """GetMicroVM's status once it fails (flintlock has no watch: polling is all there is)."""
    request = microvms_pb2.GetMicroVMRequest(uid=uid)
    async with asyncio.timeout(30):
        while True:
            try:
                await client.microvm.GetMicroVM(request, timeout=10)
            except grpc.aio.AioRpcError as err:
                return err.code()
            await asyncio.sleep(0.1)
