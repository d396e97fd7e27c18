"""The fake's MicroVMSSHProxy with the sandbox backend: flintlockd's errors, a real OpenSSH sshd
per MicroVM reached through the stream (a real `ssh` client with a key and a checked host key),
half-close both ways, and the sshd gone with its MicroVM (TD-013; flintlock-api.md §8.4).
The QEMU backend's ssh session is in qemu_test.py."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2
from battery_protos.flintlock.services.microvm.v1alpha1.microvms_pb2_grpc import MicroVMStub
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock import FakeFlintlockd, sshd
from batteryop.testing.fake_flintlock.guests import SandboxGuests
from batteryop.testing.fake_flintlock.sshproxy import relay
from batteryop.testing.fake_flintlock.testkit import (
    ADDRESS,
    Client,
    authorize,
    client_key,
    known_hosts,
    make_spec,
    ssh_command,
    ssh_env,
)
from batteryop.testing.fake_flintlock.vms import VmStore

Request = microvmsshproxy_pb2.SSHProxyRequest
Response = microvmsshproxy_pb2.SSHProxyResponse
State = microvm_pb2.MicroVMStatus.MicroVMState
USER = "root" if os.geteuid() == 0 else getpass.getuser()
"""Who logs in: a non-root sshd can log in only the user it runs as."""

needs_sshd = pytest.mark.skipif(
    sshd.find_sshd() is None,
    reason="no sshd on this machine: install Debian's openssh-server (.ci/run does, so CI runs these)",
)


@pytest_asyncio.fixture
async def ssh_client() -> AsyncIterator[Client]:
    async with (
        FakeFlintlockd.start(address=ADDRESS, ssh_proxy=True) as host,
        grpc.aio.insecure_channel(host.target) as channel,
    ):
        yield Client(host, channel, MicroVMStub(channel), MicroVMExecStub(channel))


async def sandbox(client: Client, uid: str) -> Path:
    """The MicroVM's folder (its rootfs/ stands for the guest's /)."""
    got = await client.microvm.GetMicroVM(microvms_pb2.GetMicroVMRequest(uid=uid), timeout=10)
    return Path(got.microvm.status.vsock_path).parent


async def read_to_end(call: grpc.aio.StreamStreamCall) -> bytes:
    data = b""
    while (response := await call.read()) is not grpc.aio.EOF:
        assert isinstance(response, Response)
        data += response.data
    return data


async def _status(client: Client, *first: Request) -> grpc.aio.AioRpcError:
    """The status of a call that sends `first` and half-closes. The messages go from an
    iterator, not `call.write`: a write that meets the server's refusal would make grpc.aio
    report INTERNAL in place of the server's status."""

    async def requests() -> AsyncIterator[Request]:
        for request in first:
            yield request

    call = client.ssh.SSHProxy(requests(), timeout=20)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await read_to_end(call)
    return err.value


@pytest.mark.req("TD-013")
async def test_off_by_default_as_in_flintlockd(client: Client, ssh_client: Client) -> None:
    err = await _status(client, Request(uid=await client.create()))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED
    off = await client.microvm.ServerInfo(empty_pb2.Empty(), timeout=10)
    on = await ssh_client.microvm.ServerInfo(empty_pb2.Empty(), timeout=10)
    assert (off.ssh_proxy_enabled, on.ssh_proxy_enabled) == (False, True)


@pytest.mark.req("TD-013")
async def test_errors_as_flintlockd_gives_them(ssh_client: Client) -> None:
    client = ssh_client
    uid = await client.create()
    for first in [(Request(data=b"SSH-2.0-x\r\n"),), (), (Request(uid=""),)]:
        err = await _status(client, *first)
        assert (err.code(), err.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "first message must set uid",
        )
    err = await _status(client, Request(uid="01NOPE"))
    assert err.code() == grpc.StatusCode.UNKNOWN  # flintlockd wraps the lookup error

    closed = await client.create(make_spec("closed", allow_guest_agent=False))
    err = await _status(client, Request(uid=closed))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "microvm was not created with guest agent access enabled",
    )
    await client.host.set_vm_state(uid, State.PENDING)
    err = await _status(client, Request(uid=uid))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "microvm is not ready (state: PENDING)",
    )


@needs_sshd
@pytest.mark.req("TD-013")
async def test_sshd_answers_and_half_close_ends_ok(ssh_client: Client) -> None:
    uid = await ssh_client.create()
    call = ssh_client.ssh.SSHProxy(timeout=20)
    await call.write(Request(uid=uid))
    await call.write(Request(data=b"SSH-2.0-fake_flintlock_test\r\n"))
    first = await call.read()
    assert isinstance(first, Response)
    assert first.data.startswith(b"SSH-2.0-OpenSSH")
    await call.done_writing()  # sshd reads EOF and closes; the stream then ends
    await read_to_end(call)
    assert await call.code() == grpc.StatusCode.OK


@needs_sshd
@pytest.mark.req("TD-013")
async def test_the_guest_closing_first_ends_the_stream_ok(ssh_client: Client) -> None:
    uid = await ssh_client.create()
    call = ssh_client.ssh.SSHProxy(timeout=20)
    await call.write(Request(uid=uid))
    await call.write(Request(data=b"not ssh\r\n"))  # sshd refuses it and closes
    data = await read_to_end(call)  # the client never half-closed
    assert data.startswith(b"SSH-2.0-OpenSSH")
    assert await call.code() == grpc.StatusCode.OK


@needs_sshd
@pytest.mark.req("TD-013")
async def test_a_real_ssh_session_with_a_checked_host_key(
    ssh_client: Client, tmp_path: Path
) -> None:
    client = ssh_client
    uid = await client.create()
    key, public = client_key(tmp_path)
    await authorize(client, uid, public)  # the exec a client makes: $HOME/.ssh
    known = await known_hosts(client, uid, tmp_path / "known_hosts")
    root = await sandbox(client, uid)
    host_pub = root / "rootfs" / f"{sshd.HOST_KEY}.pub"
    assert known.read_text().split()[1:] == host_pub.read_text().split()[:2]

    started = time.perf_counter()
    ran = await asyncio.to_thread(
        subprocess.run,
        ssh_command(client.host.target, uid, key, known, "true", user=USER),
        env=ssh_env(),
        capture_output=True,
        timeout=60,
    )
    first = time.perf_counter() - started
    assert ran.returncode == 0, ran.stderr.decode()
    script = 'echo "$HOME $FAKE_FLINTLOCK_VM_UID"; exit 3'
    ran = await asyncio.to_thread(
        subprocess.run,
        ssh_command(client.host.target, uid, key, known, script, user=USER),
        env=ssh_env(),
        capture_output=True,
        timeout=60,
    )
    assert ran.returncode == 3, ran.stderr.decode()
    assert ran.stdout.decode().split() == [str(root / "rootfs/root"), uid]
    print(f"\nsandbox sshd: first `ssh true` (sshd started) {first * 1000:.0f} ms")

    # Another MicroVM's host key is refused (StrictHostKeyChecking=yes).
    other = await client.create(make_spec("other"))
    wrong = await known_hosts(client, other, tmp_path / "wrong")
    wrong.write_text(wrong.read_text().replace(other, uid))
    ran = await asyncio.to_thread(
        subprocess.run,
        ssh_command(client.host.target, uid, key, wrong, "true", user=USER),
        env=ssh_env(),
        capture_output=True,
        timeout=60,
    )
    assert ran.returncode == 255
    assert b"Host key verification failed" in ran.stderr


async def exited(pid: int) -> None:
    """Return once process pid has exited (its pidfd turns readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@needs_sshd
@pytest.mark.req("TD-013")
async def test_sshd_and_its_sessions_are_gone_after_delete(ssh_client: Client) -> None:
    client = ssh_client
    uid = await client.create()
    root = await sandbox(client, uid)
    call = client.ssh.SSHProxy(timeout=20)
    await call.write(Request(uid=uid))
    banner = await call.read()
    assert isinstance(banner, Response) and banner.data.startswith(b"SSH-2.0-OpenSSH")
    pid = int((root / "rootfs" / sshd.PID_FILE).read_text())
    os.kill(pid, 0)  # running
    await client.delete(uid)
    async with asyncio.timeout(10):
        await exited(pid)
        await read_to_end(call)  # the open session went with it: the guest closed
    assert await call.code() == grpc.StatusCode.OK
    assert not root.exists()


# -- in-process: the relay and the sandbox's sshd-less case --------------------------------


@contextlib.asynccontextmanager
async def guest_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A connection to a loopback server that runs handle on it."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handle(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        server.close()


async def _data(*chunks: bytes, hold: asyncio.Event | None = None) -> AsyncIterator[Request]:
    for chunk in chunks:
        yield Request(data=chunk)
    if hold is not None:
        await hold.wait()  # a client that never half-closes


@pytest.mark.req("TD-013")
async def test_relay_half_close_waits_for_the_guest_to_finish() -> None:
    async def count_then_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = await reader.read()  # until the half-close
        writer.write(b"got %d bytes" % len(got))  # only after the client's EOF
        await writer.drain()

    async with guest_server(count_then_answer) as (reader, writer):
        responses = [r async for r in relay(_data(b"abc", b"", b"de"), reader, writer)]
    assert b"".join(r.data for r in responses) == b"got 5 bytes"


@pytest.mark.req("TD-013")
async def test_relay_ends_when_the_guest_closes_first() -> None:
    async def say_bye(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"bye")
        await writer.drain()

    never = asyncio.Event()
    async with guest_server(say_bye) as (reader, writer):
        async with asyncio.timeout(10):
            responses = [r async for r in relay(_data(hold=never), reader, writer)]
    assert [r.data for r in responses] == [b"bye"]


@pytest.mark.req("TD-013")
async def test_relay_carries_a_megabyte_each_way_in_reads_of_at_most_32k() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()

    data = os.urandom(1 << 20)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    async with guest_server(echo) as (reader, writer):
        responses = [r async for r in relay(_data(*chunks), reader, writer)]
    assert b"".join(r.data for r in responses) == data
    assert max(len(r.data) for r in responses) <= 32 * 1024


@pytest.mark.req("TD-013")
async def test_without_sshd_the_connection_closes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As the guest agent does when the guest has no sshd, with one warning saying why."""
    monkeypatch.setattr(sshd, "find_sshd", lambda: None)
    guests = SandboxGuests(ssh=True)
    store = VmStore(tmp_path, guests)
    uid = store.create(make_spec()).spec.uid
    record = store.record(uid)
    assert (record.rootfs / sshd.HOST_KEY).is_file()  # made at boot, sshd or not
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            reader, writer = await guests.ssh(record)
            assert await reader.read() == b""
            writer.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "openssh-server" in warnings[0]
    store.close()
    await guests.close()


@pytest.mark.req("TD-013")
async def test_sshd_config_names_the_sandbox_paths(tmp_path: Path) -> None:
    guests = SandboxGuests()
    store = VmStore(tmp_path, guests)
    record = store.record(store.create(make_spec()).spec.uid)
    config = sshd.sshd_config(record, 2222).splitlines()
    rootfs = record.rootfs
    for line in [
        "Port 2222",
        "ListenAddress 127.0.0.1",
        f"HostKey {rootfs / sshd.HOST_KEY}",
        f"AuthorizedKeysFile {rootfs / 'root/.ssh/authorized_keys'}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        f"PidFile {rootfs / sshd.PID_FILE}",
    ]:
        assert line in config
    assert not (rootfs / sshd.HOST_KEY).exists()  # the SSH proxy is off: no key at boot
    store.close()
