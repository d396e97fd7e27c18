"""Issue 43, finding 6 (CT-101): flintlockd's serving key must not pass as the Exec Agent.

flintlockd's serving certificate and the agent's exec API serving certificate name the same
Host address. When one CA signed both, a client that trusted "the serving CA" for an Exec Agent
let flintlockd's key (on the Host's disk, readable by flintlockd and whoever breaks into it)
answer as the agent, and receive the Holder's token, commands and stdin. Now the approver signs
`exec-agent-serving` with a CA of its own and publishes it as `exec-agent-serving-ca.crt`; the
client (`batteryop.client`'s transport) trusts that CA only.

Both certificates here are what the real approver signs for the agent's real requests
(`exec_agent.certs.AgentCertificates`, the agent's own token, the real API server); each is
served with real TLS on the Host's address, and the client is given exactly what the CA
bundle ConfigMap publishes for an Exec Agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from cryptography import x509

from batteryop.api import names
from batteryop.client import ExecError, ExecUnavailableError
from batteryop.client._exec import ExecRequest
from batteryop.client._transport import EXEC_METHOD, GrpcExecTransport
from batteryop.exec_agent.certs import EXEC_SERVING, FLINTLOCKD_SERVING
from batteryop.testing.csr_approver_env import Cluster, agent_certificates, running

ADDRESS = "127.0.0.63"
OPEN_TIMEOUT = 5.0


class Recorder:
    """A gRPC server answering the exec method on ADDRESS with `credentials`: it records the
    metadata of every call that reaches it (a token there is a token stolen)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def handler(self) -> grpc.GenericRpcHandler:
        recorder = self

        async def exec_call(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[bytes]:
            recorder.calls.append({k: str(v) for k, v in context.invocation_metadata() or ()})
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "a recorder, not an agent")
            yield b""  # pragma: no cover: abort raises

        class Handler(grpc.GenericRpcHandler):
            def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
                if details.method == EXEC_METHOD:
                    return grpc.stream_stream_rpc_method_handler(exec_call)
                return None

        return Handler()


async def exec_through_client(ca_pem: bytes, target: str) -> None:
    """One exec as a Holder's client runs it, trusting `ca_pem` for the Exec Agent."""
    transport = GrpcExecTransport(ca_pem, open_timeout=OPEN_TIMEOUT)
    try:
        await transport.run(
            target,
            "the-holders-token",
            ExecRequest(microvm_uid="uid", argv=("cat", "/secret")),
            stdin=None,
            stdout=lambda _b: None,
            stderr=lambda _b: None,
            errors=lambda _m: None,
        )
    finally:
        await transport.aclose()


@pytest.mark.controlplane
@pytest.mark.req("CT-101", "CT-103", "CT-105", "EA-127")
async def test_flintlockds_serving_key_cannot_pass_as_the_exec_agent(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    c = csr_cluster
    node = await c.node("host-s", ADDRESS)
    cert_dir = tmp_path / "flintlockd"
    async with running(c), agent_certificates(c, node, ADDRESS, cert_dir) as agent:
        current = agent.current
        bundle = agent.ca_bundle

    # The approver signed the two serving certificates with different CAs (CT-103, CT-101).
    flintlockd_cert = current[FLINTLOCKD_SERVING].cert
    exec_cert = current[EXEC_SERVING].cert
    assert flintlockd_cert.issuer != exec_cert.issuer, "one CA signs both serving certificates"
    exec_ca_pem = bundle[names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY].encode()  # CT-105
    exec_ca = x509.load_pem_x509_certificate(exec_ca_pem)
    exec_cert.verify_directly_issued_by(exec_ca)
    assert exec_ca.subject == c.exec_serving_ca.pair.cert.subject

    # flintlockd's key and certificate, from the Host's disk, served on the Host's address.
    impostor = Recorder()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((impostor.handler(),))
    creds = grpc.ssl_server_credentials(
        [
            (
                (cert_dir / names.TLS_KEY_FILE).read_bytes(),
                (cert_dir / names.TLS_CERT_FILE).read_bytes(),
            )
        ]
    )
    port = server.add_secure_port(f"{ADDRESS}:0", creds)
    await server.start()
    try:
        with pytest.raises(ExecUnavailableError, match="signed by the configured CA"):
            await exec_through_client(exec_ca_pem, f"{ADDRESS}:{port}")
        assert impostor.calls == [], "the Holder's token reached flintlockd's key"
    finally:
        await server.stop(0)

    # The agent's own exec serving certificate, as the agent serves it, is accepted.
    agent_server = grpc.aio.server()
    genuine = Recorder()
    agent_server.add_generic_rpc_handlers((genuine.handler(),))
    port = agent_server.add_secure_port(f"{ADDRESS}:0", agent.server_credentials())
    await agent_server.start()
    try:
        # The TLS handshake succeeds and the call arrives; the recorder then refuses it.
        with pytest.raises(ExecError, match="answered UNIMPLEMENTED: a recorder"):
            await exec_through_client(exec_ca_pem, f"{ADDRESS}:{port}")
        assert [call.get("authorization") for call in genuine.calls] == ["Bearer the-holders-token"]
    finally:
        await agent_server.stop(0)
