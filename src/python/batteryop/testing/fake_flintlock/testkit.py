"""Helpers for tests that talk to a fake flintlockd: a valid spec and stubs on one channel, the
guest images in a loopback registry for the QEMU backend (`published_guest`), and an `ssh`
client reaching a MicroVM through its `MicroVMSSHProxy` (`ssh_command`)."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2_grpc
from battery_protos.flintlock.types import microvm_pb2
from batteryop.api import samples
from batteryop.testing import guest_image
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.oci_registry import MISSING_REGISTRY, have_registry, loopback_registry
from batteryop.testing.processes import module_command

Request = microvmexec_pb2.ExecCommandRequest
Response = microvmexec_pb2.ExecCommandResponse

ADDRESS = "127.0.0.2"
"""The loopback address the fake's own tests use (its own, so it cannot clash with others)."""


def make_spec(
    name: str = "vm",
    namespace: str = "ns",
    *,
    allow_guest_agent: bool = True,
    guest: samples.GuestImages | None = None,
) -> microvm_pb2.MicroVMSpec:
    """A spec flintlockd accepts: kernel, root volume and one TAP interface; with `guest`, the
    images it names (the QEMU backend pulls them), else names no registry serves."""
    kernel = guest.kernel if guest else "ghcr.io/example/kernel:6.1"
    rootfs = guest.rootfs if guest else "ghcr.io/example/root:1"
    return microvm_pb2.MicroVMSpec(
        id=name,
        namespace=namespace,
        kernel=microvm_pb2.Kernel(image=kernel, filename="boot/vmlinux"),
        root_volume=microvm_pb2.Volume(
            id="root", source=microvm_pb2.VolumeSource(container_source=rootfs)
        ),
        interfaces=[
            microvm_pb2.NetworkInterface(device_id="eth1", type=microvm_pb2.NetworkInterface.TAP)
        ],
        allow_guest_agent=allow_guest_agent,
    )


@contextlib.asynccontextmanager
async def published_guest(folder: Path) -> AsyncIterator[samples.GuestImages]:
    """The amd64 guest images (built once per definition, `guest_image.ensure_image`) pushed to
    a registry on loopback for as long as the context lasts: what a QEMU guest's spec names.
    Skips the test, saying why, where QEMU, the registry or skopeo is missing."""
    for tool, package in (("qemu-system-x86_64", "qemu-system-x86"), ("skopeo", "skopeo")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: install Debian's {package}")
    if not have_registry():
        pytest.skip(MISSING_REGISTRY)
    image = await asyncio.to_thread(guest_image.ensure_image)
    with loopback_registry(folder) as address:
        yield await asyncio.to_thread(guest_image.publish, image, address)


@dataclass
class Client:
    """Stubs for one fake Host on one real channel."""

    host: FakeFlintlockd
    channel: grpc.aio.Channel
    microvm: microvms_pb2_grpc.MicroVMStub
    exec: microvmexec_pb2_grpc.MicroVMExecStub
    shared_uid: str | None = None
    """A MicroVM that tests of a module share (a booted QEMU guest), when there is one."""
    guest: samples.GuestImages | None = None
    """The images a QEMU backend's MicroVMs boot (`published_guest`); None for the sandbox."""

    @property
    def ssh(self) -> microvmsshproxy_pb2_grpc.MicroVMSSHProxyStub:
        return microvmsshproxy_pb2_grpc.MicroVMSSHProxyStub(self.channel)

    async def create(self, spec: microvm_pb2.MicroVMSpec | None = None) -> str:
        """Create a MicroVM and return its uid."""
        request = microvms_pb2.CreateMicroVMRequest(microvm=spec or make_spec())
        response = await self.microvm.CreateMicroVM(request, timeout=10)
        return response.microvm.spec.uid

    async def create_ready(self, spec: microvm_pb2.MicroVMSpec, timeout: float = 900) -> str:
        """Create a MicroVM and return its uid once it is CREATED (a QEMU guest's agent
        answered). flintlock has no watch, so GetMicroVM is polled, as battery does."""
        uid = await self.create(spec)
        async with asyncio.timeout(timeout):
            while True:
                request = microvms_pb2.GetMicroVMRequest(uid=uid)
                try:
                    got = (await self.microvm.GetMicroVM(request, timeout=10)).microvm
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                    # The fake dropped it (a guest that could not start): say why.
                    raise AssertionError(
                        f"MicroVM {uid} is gone before CREATED; the fake's log ends:\n"
                        + self.host.log_tail()
                    ) from err
                if got.status.state == microvm_pb2.MicroVMStatus.CREATED:
                    return uid
                await asyncio.sleep(0.5)

    async def delete(self, uid: str) -> None:
        await self.microvm.DeleteMicroVM(microvms_pb2.DeleteMicroVMRequest(uid=uid), timeout=10)


async def requests_for(
    start: microvmexec_pb2.ExecStart, stdin: Sequence[bytes] = ()
) -> AsyncIterator[Request]:
    """start, then (only when start.has_stdin) the stdin chunks and stdin_eof.

    Nothing more is written: a grpc.aio client that writes after the server ended the stream
    can turn the server's status into INTERNAL ("Internal error from Core").
    """
    yield Request(start=start)
    if start.has_stdin:
        for chunk in stdin:
            yield Request(stdin=chunk)
        yield Request(stdin_eof=True)


async def run(
    client: Client, start: microvmexec_pb2.ExecStart, stdin: Sequence[bytes] = ()
) -> list[Response]:
    """Every response of one exec stream (raises the RPC error if it fails)."""
    call = client.exec.ExecCommand(requests_for(start, stdin), timeout=20)
    return [response async for response in call]


def joined(responses: Sequence[Response], kind: str) -> bytes:
    return b"".join(getattr(r, kind) for r in responses if r.WhichOneof("payload") == kind)


def assert_exit_last(responses: Sequence[Response], code: int) -> None:
    kinds = [r.WhichOneof("payload") for r in responses]
    assert kinds.count("exit_code") == 1, kinds
    assert kinds[-1] == "exit_code", kinds
    assert responses[-1].exit_code == code


# -- ssh through MicroVMSSHProxy --------------------------------------------------------------

HOST_KEY_PUB = "etc/ssh/ssh_host_ed25519_key.pub"
"""The guest's ed25519 host key, relative to `/` (a sandbox exec's `/` is its rootfs/)."""


def client_key(directory: Path) -> tuple[Path, str]:
    """A new ed25519 key pair for an ssh client in directory: (private key path, public line)."""
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(key)], check=True
    )
    return key, key.with_name("id_ed25519.pub").read_text().strip()


async def authorize(client: Client, uid: str, public_key: str, user: str = "root") -> None:
    """Append public_key to the user's ~/.ssh/authorized_keys through exec, as a client does
    (`user` makes a QEMU guest's agent set HOME; a sandbox exec's HOME is its rootfs/root)."""
    script = 'mkdir -p "$HOME/.ssh" && cat >> "$HOME/.ssh/authorized_keys"'
    start = microvmexec_pb2.ExecStart(uid=uid, cmd=script, shell=True, user=user, has_stdin=True)
    assert_exit_last(await run(client, start, stdin=[public_key.encode() + b"\n"]), 0)


async def known_hosts(client: Client, uid: str, path: Path) -> Path:
    """A known_hosts file at path naming the MicroVM's host key under the alias uid, read
    through exec (`HOST_KEY_PUB`)."""
    start = microvmexec_pb2.ExecStart(uid=uid, cmd="cat", args=[HOST_KEY_PUB], cwd="/")
    responses = await run(client, start)
    assert_exit_last(responses, 0)
    key_type, key = joined(responses, "stdout").decode().split()[:2]
    path.write_text(f"{uid} {key_type} {key}\n")
    return path


def ssh_command(
    target: str, uid: str, key: Path, known: Path, *command: str, user: str = "root"
) -> list[str]:
    """`ssh` to the MicroVM uid through the fake at target (`ssh_shim` as its ProxyCommand),
    with only key, the host key checked against known (StrictHostKeyChecking=yes), no config."""
    shim, _ = module_command("batteryop.testing.fake_flintlock.ssh_shim")
    proxy = shlex.join([*shim, target, uid])
    return [
        "ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", f"HostKeyAlias={uid}", "-o", f"ProxyCommand={proxy}",
        "-o", "ConnectTimeout=60", "-l", user, uid, *command,
    ]  # fmt: skip


def ssh_env() -> dict[str, str]:
    """The environment for `ssh_command`: PYTHONPATH for the shim."""
    return module_command("batteryop.testing.fake_flintlock.ssh_shim")[1]
