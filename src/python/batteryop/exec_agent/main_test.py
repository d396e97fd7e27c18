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
from batteryop.csr_approver.config import ApproverConfig
from batteryop.csr_approver.controller import Approver
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    pod_bound_token,
    request_token,
)
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.csr_approver_env import tls_secret
from batteryop.testing.exec_agent import (
    AGENT_ADDRESS,
    AGENT_NAMESPACE,
    NODE,
    Holders,
    Pki,
    agent_process_args,
    healthy_host,
    joined,
    run_exec,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
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

    async def logged(self, message: str, timeout: float = 30, **fields: Any) -> dict[str, Any]:
        """The first log line with `message` (and these `fields`), waiting for it (fails if the
        process ends)."""
        async with asyncio.timeout(timeout), self._changed:
            while True:
                for line in self.lines:
                    if line.get("message") == message and all(
                        line.get(k) == v for k, v in fields.items()
                    ):
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


@pytest.mark.req("EA-001", "EA-002", "EA-003", "EA-034", "EA-040", "EA-050")
async def test_the_agent_process_serves_execs_reports_its_node_and_stops_cleanly(
    cluster: ControlPlane, pki: Pki, flintlockd: FakeFlintlockd, holders: Holders, tmp_path: Path
) -> None:
    argv, port = agent_process_args(cluster, pki, flintlockd.target, tmp_path)
    holding = await holders.hold()
    async with agent_process(argv) as agent:
        await agent.logged("Exec API listening")
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.exec_serving_ca.cert_pem)
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
        # EA-040: the claim is Bound on this Host, so a drain of its Node is held.
        await agent.logged("Holding drains of the Node: claims are Bound on it")

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


@pytest.mark.req("EA-060", "EA-061", "EA-064", "EA-066", "EA-068", "EA-126", "EA-128")
async def test_the_agent_process_gets_its_certificates_by_csr_and_serves_with_them(
    cluster: ControlPlane, pki: Pki, namespace: str, tmp_path: Path
) -> None:
    """The whole path with nothing handed out: the CSR approver signs with the test's CAs; the
    agent makes its keys, writes flintlockd's files; flintlockd starts from those files (as the
    Host Image's path unit starts it); flintlockd lets the agent in by the Host CA the agent
    made (EA-126, EA-128); an exec goes through, verified against the exec serving CA."""
    api = admin_client(cluster)
    core = k8s.CoreV1Api(api)
    try:
        with contextlib.suppress(k8s.ApiException):
            core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=NODE)))
        core.patch_node_status(
            NODE, {"status": {"addresses": [{"type": "InternalIP", "address": AGENT_ADDRESS}]}}
        )
        token = pod_bound_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME, NODE)
        for name, ca in (
            (names.SERVING_CA_SECRET, pki.serving_ca),
            (names.CLIENT_CA_SECRET, pki.client_ca),
            (names.EXEC_AGENT_SERVING_CA_SECRET, pki.exec_serving_ca),
        ):
            with contextlib.suppress(k8s.ApiException):
                core.delete_namespaced_secret(name, AGENT_NAMESPACE)
            core.create_namespaced_secret(AGENT_NAMESPACE, tls_secret(name, ca))
    finally:
        api.close()
    kubeconfig = cluster.write_kubeconfig(tmp_path / "agent.kubeconfig", token=token)
    host = healthy_host(tmp_path / "host")
    port = free_port(AGENT_ADDRESS)
    fl_port = free_port(AGENT_ADDRESS)
    cert_dir = tmp_path / "flintlockd"
    argv = [
        f"--host-node={NODE}",
        f"--address={AGENT_ADDRESS}",
        f"--port={port}",
        f"--flintlockd={AGENT_ADDRESS}:{fl_port}",
        f"--trust-domain={names.DEFAULT_TRUST_DOMAIN}",
        f"--namespace={AGENT_NAMESPACE}",
        f"--flintlockd-cert-dir={cert_dir}",
        f"--kubeconfig={kubeconfig}",
        f"--not-ready-dir={host.not_ready_dir}",
        f"--kvm-device={host.kvm_device}",
        f"--kvm-sysfs-dir={host.kvm_sysfs_dir}",
        f"--sys-block-dir={host.sys_block_dir}",
        "--log-format=json",
    ]
    approver_config = ApproverConfig(
        trust_domain=names.DEFAULT_TRUST_DOMAIN,
        namespace=AGENT_NAMESPACE,
        exec_agent_service_account=names.EXEC_AGENT_NAME,
        health_probe_bind_address="0",
        metrics_bind_address="0",
    )
    async with (
        KubeClient(KubeConfig.from_dict(cluster.kubeconfig())) as admin,
        _approver(approver_config, admin),
        agent_process(argv) as agent,
    ):
        await agent.logged("Obtaining certificates by CSR")
        await agent.logged("Exec API listening", timeout=60)
        files = TLSFiles(
            cert=cert_dir / names.TLS_CERT_FILE,
            key=cert_dir / names.TLS_KEY_FILE,
            client_ca=cert_dir / names.CLIENT_CA_BUNDLE_KEY,
        )
        async with FakeFlintlockd.start(address=AGENT_ADDRESS, port=fl_port, tls=files) as fl:
            # The agent reaches flintlockd over mutual TLS with its CSR-made client certificate:
            # its Node report turns ready.
            await agent.logged("Published the Node report", ready=True)
            api = admin_client(cluster)
            try:
                holding = await Holders(api, namespace, fl, pki).hold()
            finally:
                api.close()
            credentials = grpc.ssl_channel_credentials(
                root_certificates=pki.exec_serving_ca.cert_pem
            )
            async with grpc.aio.secure_channel(f"{AGENT_ADDRESS}:{port}", credentials) as channel:
                start = microvmexec_pb2.ExecStart(uid=holding.microvm_uid, cmd="echo", args=["ok"])
                responses = await run_exec(channel, holding.metadata, start)
            assert joined(responses, "stdout") == b"ok\n"
            assert responses[-1].exit_code == 0
        agent.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await agent.process.wait() == 0
    # EA-065: the agent's own keys were never written; only flintlockd's files and the Host
    # CA's are on the Host.
    assert sorted(p.name for p in cert_dir.iterdir()) == sorted(
        [
            names.TLS_CERT_FILE,
            names.TLS_KEY_FILE,
            names.CLIENT_CA_BUNDLE_KEY,
            names.HOST_CA_CERT_FILE,
            names.HOST_CA_KEY_FILE,
        ]
    )
    assert not any("PRIVATE KEY" in json.dumps(line) for line in agent.lines)


@contextlib.asynccontextmanager
async def _approver(config: ApproverConfig, kube: KubeClient) -> AsyncIterator[Approver]:
    approver = Approver(config, kube)
    stop = asyncio.Event()
    task = asyncio.create_task(approver.run(stop))
    try:
        yield approver
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
