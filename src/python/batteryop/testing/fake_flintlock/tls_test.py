"""The fake over TLS, and over mutual TLS refusing clients its CA did not sign (TD-012)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2_grpc
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.tls import CertificateAuthority, KeyPair

ADDRESS = "127.0.0.3"


@dataclass(frozen=True)
class Pki:
    serving_ca: CertificateAuthority
    client_ca: CertificateAuthority
    stranger_ca: CertificateAuthority
    serving: TLSFiles
    client_ca_file: Path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    serving_ca = CertificateAuthority.create("flintlockd-serving")
    client_ca = CertificateAuthority.create("flintlockd-client")
    cert, key = serving_ca.issue("flintlockd", hosts=[ADDRESS], server=True).write(
        tmp_path, "serving"
    )
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca.cert_pem)
    return Pki(
        serving_ca=serving_ca,
        client_ca=client_ca,
        stranger_ca=CertificateAuthority.create("stranger"),
        serving=TLSFiles(cert=cert, key=key),
        client_ca_file=client_ca_file,
    )


async def server_info(target: str, pki: Pki, client: KeyPair | None) -> str:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.serving_ca.cert_pem,
        private_key=client.key_pem if client else None,
        certificate_chain=client.cert_pem if client else None,
    )
    async with grpc.aio.secure_channel(target, credentials) as channel:
        info = await microvms_pb2_grpc.MicroVMStub(channel).ServerInfo(empty_pb2.Empty(), timeout=5)
        return info.version


@pytest.mark.req("TD-012")
async def test_tls_without_client_ca_serves_any_tls_client(pki: Pki) -> None:
    async with FakeFlintlockd.start(address=ADDRESS, tls=pki.serving) as host:
        assert await server_info(host.target, pki, None) == "v0.16.0"
        async with grpc.aio.insecure_channel(host.target) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await microvms_pb2_grpc.MicroVMStub(plain).ServerInfo(empty_pb2.Empty(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.req("TD-012")
async def test_client_ca_requires_a_client_cert_it_signed(pki: Pki) -> None:
    tls = TLSFiles(pki.serving.cert, pki.serving.key, client_ca=pki.client_ca_file)
    async with FakeFlintlockd.start(address=ADDRESS, tls=tls) as host:
        good = pki.client_ca.issue("exec-agent", client=True)
        assert await server_info(host.target, pki, good) == "v0.16.0"

        for refused in (None, pki.stranger_ca.issue("exec-agent", client=True)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await server_info(host.target, pki, refused)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE

        # Down and up again keeps the same TLS settings.
        await host.go_down()
        await host.come_up()
        assert await server_info(host.target, pki, good) == "v0.16.0"
