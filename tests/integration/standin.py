"""A stand-in for the Exec Agent, until the agent lands: a TLS server per simulated Host, signed
by a test CA, that requires a bearer token, records it, and relays the exec stream to that
Host's fake flintlockd; each Host's Node report names its stand-in. It does no authorization
(the agent's job, EA-010..014), so tests through it show what the client sends and that stdin,
output and exit codes make the round trip, nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from integration.stack import Stack
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from batteryop.api import names
from batteryop.tls import CertificateAuthority

STAND_IN_ADDRESSES = {"host-a": "127.0.0.41", "host-b": "127.0.0.42"}


class Relay(microvmexec_pb2_grpc.MicroVMExecServicer):
    """Needs `authorization: Bearer <token>`, keeps the token, relays to flintlockd."""

    def __init__(self, upstream: str) -> None:
        self.channel = grpc.aio.insecure_channel(upstream)
        self.tokens: list[str] = []
        self.started = asyncio.Event()

    async def ExecCommand(
        self,
        request_iterator: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[microvmexec_pb2.ExecCommandResponse]:
        metadata = {m.key: str(m.value) for m in context.invocation_metadata() or ()}
        auth = metadata.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth.removeprefix("Bearer "):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "no bearer token")
        self.tokens.append(auth.removeprefix("Bearer "))
        call = microvmexec_pb2_grpc.MicroVMExecStub(self.channel).ExecCommand(request_iterator)
        self.started.set()
        try:
            async for response in call:
                yield response
        finally:
            call.cancel()


@dataclass
class StandIns:
    ca_file: Path
    relays: dict[str, Relay] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)

    def tokens(self) -> list[str]:
        return [t for r in self.relays.values() for t in r.tokens]


def report_nodes(stack: Stack, targets: dict[str, str | None]) -> None:
    core = k8s.CoreV1Api(stack.api)
    for node, target in targets.items():
        annotations = {
            names.EXEC_AGENT_READY_ANNOTATION: None if target is None else "true",
            names.EXEC_AGENT_REASON_ANNOTATION: None if target is None else "Ready",
            names.EXEC_AGENT_ADDRESS_ANNOTATION: target,
        }
        core.patch_node(node, {"metadata": {"annotations": annotations}})


@contextlib.asynccontextmanager
async def start_stand_ins(stack: Stack, workdir: Path) -> AsyncIterator[StandIns]:
    """A stand-in per simulated Host, named in its Node report until the block ends."""
    ca = CertificateAuthority.create("exec-agent-serving")
    ca_file = workdir / "agent-ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    found = StandIns(ca_file)
    servers: list[grpc.aio.Server] = []
    try:
        for node, address in STAND_IN_ADDRESSES.items():
            pair = ca.issue(f"exec-agent-{node}", hosts=[address], server=True)
            relay = Relay(stack.local.hosts[node].target)
            server = grpc.aio.server()
            microvmexec_pb2_grpc.add_MicroVMExecServicer_to_server(relay, server)
            port = server.add_secure_port(
                f"{address}:0", grpc.ssl_server_credentials([(pair.key_pem, pair.cert_pem)])
            )
            await server.start()
            servers.append(server)
            found.relays[node] = relay
            found.targets[node] = f"{address}:{port}"
        report_nodes(stack, dict(found.targets))
        yield found
    finally:
        report_nodes(stack, dict.fromkeys(STAND_IN_ADDRESSES))
        for server in servers:
            await server.stop(None)
        for relay in found.relays.values():
            await relay.channel.close()
