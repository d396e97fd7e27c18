"""The agent as a real process (`python -m batteryop.exec_agent.main`, what the pex runs): its
flags, its own kubeconfig identity, TLS both ways, the Node report loop, a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api import names
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    pod_bound_token,
    request_token,
)
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.exec_agent import (
    AGENT_ADDRESS,
    AGENT_NAMESPACE,
    NODE,
    Holders,
    Pki,
    healthy_host,
    joined,
    run_exec,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.processes import module_command

pytestmark = pytest.mark.controlplane


class AgentProcess:
    """The running process and the JSON log lines it wrote so far, awaitable by message."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"message": raw.decode(errors="replace").rstrip()}
            async with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def logged(self, message: str, timeout: float = 30) -> dict[str, Any]:
        """The first log line with `message`, waiting for it (fails if the process ends)."""
        async with asyncio.timeout(timeout), self._changed:
            while True:
                for line in self.lines:
                    if line.get("message") == message:
                        return line
                assert not self._reader.done(), f"the agent exited: {self.lines[-5:]}"
                await self._changed.wait()


@contextlib.asynccontextmanager
async def agent_process(argv: list[str]) -> AsyncIterator[AgentProcess]:
    command, env = module_command("batteryop.exec_agent.main")
    process = await asyncio.create_subprocess_exec(
        *command,
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    running = AgentProcess(process)
    try:
        yield running
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await running._reader


@pytest.mark.req("EA-001", "EA-002", "EA-003", "EA-034", "EA-050")
async def test_the_agent_process_serves_execs_reports_its_node_and_stops_cleanly(
    cluster: ControlPlane, pki: Pki, flintlockd: FakeFlintlockd, holders: Holders, tmp_path: Path
) -> None:
    api = admin_client(cluster)
    try:
        with contextlib.suppress(k8s.ApiException):
            k8s.CoreV1Api(api).create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=NODE)))
        token = pod_bound_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME, NODE)
    finally:
        api.close()
    kubeconfig = cluster.write_kubeconfig(tmp_path / "agent.kubeconfig", token=token)
    host = healthy_host(tmp_path / "host")
    port = free_port(AGENT_ADDRESS)
    argv = [
        f"--host-node={NODE}",
        f"--address={AGENT_ADDRESS}",
        f"--port={port}",
        f"--flintlockd={flintlockd.target}",
        *(f"--{key.replace('_', '-')}={path}" for key, path in pki.files.items()),
        f"--kubeconfig={kubeconfig}",
        f"--not-ready-dir={host.not_ready_dir}",
        f"--kvm-device={host.kvm_device}",
        f"--kvm-sysfs-dir={host.kvm_sysfs_dir}",
        f"--sys-block-dir={host.sys_block_dir}",
        "--log-format=json",
    ]
    holding = await holders.hold()
    async with agent_process(argv) as agent:
        await agent.logged("Exec API listening")
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.serving_ca.cert_pem)
        async with grpc.aio.secure_channel(f"{AGENT_ADDRESS}:{port}", credentials) as channel:
            start = microvmexec_pb2.ExecStart(uid=holding.microvm_uid, cmd="echo", args=["hi"])
            responses = await run_exec(channel, holding.metadata, start)
        assert joined(responses, "stdout") == b"hi\n"
        assert responses[-1].exit_code == 0

        published = await agent.logged("Published the Node report")
        assert published["ready"] is True
        api = admin_client(cluster)
        try:
            node = k8s.CoreV1Api(api).read_node(NODE)
        finally:
            api.close()
        annotations = node.metadata.annotations
        assert annotations[names.EXEC_AGENT_READY_ANNOTATION] == "true"
        assert annotations[names.EXEC_AGENT_ADDRESS_ANNOTATION] == f"{AGENT_ADDRESS}:{port}"
        assert annotations[names.FLINTLOCKD_ADDRESS_ANNOTATION] == flintlockd.target

        agent.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await agent.process.wait() == 0
    assert not any(holding.token in json.dumps(line) for line in agent.lines)


@pytest.mark.req("EA-050")
@pytest.mark.parametrize("bound_to", [None, "host-elsewhere"])
async def test_an_agent_whose_identity_does_not_name_its_host_refuses_to_start(
    cluster: ControlPlane,
    pki: Pki,
    flintlockd: FakeFlintlockd,
    tmp_path: Path,
    bound_to: str | None,
) -> None:
    api = admin_client(cluster)
    try:
        if bound_to is None:
            token = request_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME)
        else:
            token = pod_bound_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME, bound_to)
    finally:
        api.close()
    kubeconfig = cluster.write_kubeconfig(tmp_path / "agent.kubeconfig", token=token)
    argv = [
        f"--host-node={NODE}",
        f"--address={AGENT_ADDRESS}",
        f"--port={free_port(AGENT_ADDRESS)}",
        f"--flintlockd={flintlockd.target}",
        *(f"--{key.replace('_', '-')}={path}" for key, path in pki.files.items()),
        f"--kubeconfig={kubeconfig}",
    ]
    async with agent_process(argv) as agent:
        async with asyncio.timeout(30):
            assert await agent.process.wait() == 1
    said = " ".join(str(line.get("message")) for line in agent.lines)
    expected = "names no Node" if bound_to is None else f"names Node {bound_to}"
    assert f"identity check for Host {NODE}: " in said
    assert expected in said
    assert not any(line.get("message") == "Exec API listening" for line in agent.lines)
