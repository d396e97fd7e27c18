"""Exec over TLS (CC-020): against the fake flintlockd, which serves the same `MicroVMExec` the
Exec Agent serves and runs commands for real, and against a few-line server that shows what
arrives on the wire (the bearer token). Through the Exec Agent itself once it lands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from batteryop.client import (
    ExecPermissionError,
    ExecRequest,
    ExecUnavailableError,
    GrpcExecTransport,
)
from batteryop.client._exec import bytes_source
from batteryop.client._transport import EXEC_METHOD
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.testing.fake_flintlock.testkit import make_spec
from batteryop.tls import CertificateAuthority

ADDRESS = "127.0.0.31"


@dataclass
class Agent:
    target: str
    ca: CertificateAuthority
    microvm_uid: str
    host: FakeFlintlockd


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("exec-agent-serving")


@pytest.fixture
async def agent(ca: CertificateAuthority, tmp_path: Path) -> AsyncIterator[Agent]:
    cert, key = ca.issue("exec-agent", hosts=[ADDRESS], server=True).write(tmp_path, "serving")
    async with FakeFlintlockd.start(address=ADDRESS, tls=TLSFiles(cert=cert, key=key)) as host:
        creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem)
        async with grpc.aio.secure_channel(host.target, creds) as channel:
            created = await microvms_pb2_grpc.MicroVMStub(channel).CreateMicroVM(
                microvms_pb2.CreateMicroVMRequest(microvm=make_spec()), timeout=10
            )
        yield Agent(host.target, ca, created.microvm.spec.uid, host)


async def run(
    transport: GrpcExecTransport, agent: Agent, argv: tuple[str, ...], stdin: bytes | None = None
) -> tuple[int, bytes, bytes, list[str]]:
    out: list[bytes] = []
    err: list[bytes] = []
    errors: list[str] = []
    code = await transport.run(
        agent.target,
        "token",
        ExecRequest(agent.microvm_uid, argv, has_stdin=stdin is not None),
        stdin=None if stdin is None else bytes_source(stdin),
        stdout=out.append,
        stderr=err.append,
        errors=errors.append,
    )
    return code, b"".join(out), b"".join(err), errors


def test_the_wire_name_is_flintlocks() -> None:
    assert EXEC_METHOD == "/microvmexec.services.api.v1alpha1.MicroVMExec/ExecCommand"
    descriptor = microvmexec_pb2.DESCRIPTOR.services_by_name["MicroVMExec"]
    assert f"/{descriptor.full_name}/ExecCommand" == EXEC_METHOD


@pytest.mark.req("CC-020")
async def test_a_command_runs_over_tls_with_its_output_and_exit_code(agent: Agent) -> None:
    transport = GrpcExecTransport(agent.ca.cert_pem)
    try:
        code, out, err, errors = await run(
            transport, agent, ("sh", "-c", "echo out; echo err >&2; exit 3")
        )
        assert (code, out, err, errors) == (3, b"out\n", b"err\n", [])
        code, out, _, _ = await run(transport, agent, ("cat",), stdin=b"x" * 200_000)
        assert (code, len(out)) == (0, 200_000)
        code, _, _, errors = await run(transport, agent, ("no-such-program-here",))
        assert code == 127
        assert errors
    finally:
        await transport.aclose()


@pytest.mark.req("CC-020")
async def test_an_agent_whose_certificate_another_ca_signed_is_refused(agent: Agent) -> None:
    stranger = CertificateAuthority.create("stranger")
    transport = GrpcExecTransport(stranger.cert_pem, open_timeout=2)
    try:
        with pytest.raises(ExecUnavailableError, match="could not connect"):
            await run(transport, agent, ("true",))
    finally:
        await transport.aclose()


async def test_a_stream_cut_before_the_exit_code_is_an_error_not_an_exit(agent: Agent) -> None:
    transport = GrpcExecTransport(agent.ca.cert_pem)
    try:
        await agent.host.cut_next_exec_stream(code=grpc.StatusCode.UNAVAILABLE)
        with pytest.raises(ExecUnavailableError, match="UNAVAILABLE"):
            await run(transport, agent, ("sh", "-c", "echo partial"))
    finally:
        await transport.aclose()


class Recorder(microvmexec_pb2_grpc.MicroVMExecServicer):
    """Keeps the metadata of every call; answers exit 0, or UNAUTHENTICATED to `Bearer bad`."""

    def __init__(self) -> None:
        self.seen: list[tuple[tuple[str, str], ...]] = []

    async def ExecCommand(
        self,
        request_iterator: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[microvmexec_pb2.ExecCommandResponse]:
        metadata = tuple((m.key, str(m.value)) for m in context.invocation_metadata() or ())
        self.seen.append(metadata)
        if ("authorization", "Bearer bad") in metadata:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "token refused")
        async for message in request_iterator:
            assert message.WhichOneof("payload") == "start"
            break
        yield microvmexec_pb2.ExecCommandResponse(exit_code=0)


@pytest.mark.req("CC-020")
async def test_the_token_is_sent_as_bearer_metadata_on_every_call(
    ca: CertificateAuthority,
) -> None:
    pair = ca.issue("recorder", hosts=["127.0.0.32"], server=True)
    server = grpc.aio.server()
    recorder = Recorder()
    microvmexec_pb2_grpc.add_MicroVMExecServicer_to_server(recorder, server)
    port = server.add_secure_port(
        "127.0.0.32:0", grpc.ssl_server_credentials([(pair.key_pem, pair.cert_pem)])
    )
    await server.start()
    transport = GrpcExecTransport(ca.cert_pem)
    target = f"127.0.0.32:{port}"
    try:
        for token in ("first", "second"):
            code = await transport.run(
                target,
                token,
                ExecRequest("vm", ("true",)),
                stdin=None,
                stdout=lambda _: None,
                stderr=lambda _: None,
                errors=lambda _: None,
            )
            assert code == 0
        auth = [dict(m)["authorization"] for m in recorder.seen]
        assert auth == ["Bearer first", "Bearer second"]
        with pytest.raises(ExecPermissionError, match="UNAUTHENTICATED") as refused:
            await transport.run(
                target,
                "bad",
                ExecRequest("vm", ("true",)),
                stdin=None,
                stdout=lambda _: None,
                stderr=lambda _: None,
                errors=lambda _: None,
            )
        assert "Bearer" not in str(refused.value)
    finally:
        await transport.aclose()
        await server.stop(None)


async def test_a_malformed_answer_fails_the_exec_and_is_no_exit_code(
    ca: CertificateAuthority,
) -> None:
    """An answer `_wire` cannot decode (here cut inside its stdout) ends the call: an
    `ExecUnavailableError` naming the cause, never an exit code or output."""

    async def answer(
        requests: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        async for _ in requests:
            break
        yield b"\x0a\x05ab"  # stdout of 5 bytes, 2 sent
        yield microvmexec_pb2.ExecCommandResponse(exit_code=0).SerializeToString()

    pair = ca.issue("garbler", hosts=["127.0.0.33"], server=True)
    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(
        answer, request_deserializer=microvmexec_pb2.ExecCommandRequest.FromString
    )
    service = EXEC_METHOD.split("/")[1]
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(service, {"ExecCommand": handler})]
    )
    port = server.add_secure_port(
        "127.0.0.33:0", grpc.ssl_server_credentials([(pair.key_pem, pair.cert_pem)])
    )
    await server.start()
    transport = GrpcExecTransport(ca.cert_pem)
    out: list[bytes] = []
    try:
        with pytest.raises(ExecUnavailableError, match="malformed answer: truncated field"):
            await transport.run(
                f"127.0.0.33:{port}",
                "token",
                ExecRequest("vm", ("true",)),
                stdin=None,
                stdout=out.append,
                stderr=out.append,
                errors=lambda _: None,
            )
        assert out == []
    finally:
        await transport.aclose()
        await server.stop(None)
