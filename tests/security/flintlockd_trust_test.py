"""Issue 43, finding 4: one Host's Exec Agent credential must open that Host's flintlockd only.

Two Hosts, `host-a` and `host-b`, each with its Exec Agent's real certificate code
(`exec_agent.certs.AgentCertificates`, acting as the agent's own ServiceAccount with a token
bound to a Pod on its Node, against the real API server and the real CSR approver), and a fake
flintlockd per Host started from the files that agent wrote (`tls.crt`, `tls.key`,
`client-ca.crt`: what the Host Image's flintlockd reads). Real mutual TLS on loopback.

The attack: host-a's agent key (taken from host-a) presented to host-b's flintlockd. Before
EA-126 every agent's client certificate came from the one cluster client CA that every
flintlockd trusted, so host-b let it in. Now each agent signs its own with its Host's CA, and
host-b's flintlockd trusts battery's client CA and host-b's CA only. battery's certificate
(cert-manager, from the client CA) still opens both. And a taken-over agent cannot get a
cluster-signed client certificate instead: the CSR approver denies `flintlockd-client` (CT-102).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio
import pytest
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2_grpc
from batteryop.api import names
from batteryop.api.conditions import CSRCondition, CSRReason
from batteryop.testing.csr_approver_env import (
    TRUST_DOMAIN,
    Cluster,
    agent_certificates,
    condition,
    decided,
    running,
    until_csr,
)
from batteryop.testing.csrs import csr_body, ec_key, request_pem
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles

ADDRESS_A = "127.0.0.61"
ADDRESS_B = "127.0.0.62"
HANDSHAKE_SECONDS = 10.0


def flintlockd_files(cert_dir: Path) -> TLSFiles:
    """flintlockd's TLS as the Host Image starts it: the files the agent wrote."""
    return TLSFiles(
        cert=cert_dir / names.TLS_CERT_FILE,
        key=cert_dir / names.TLS_KEY_FILE,
        client_ca=cert_dir / names.CLIENT_CA_BUNDLE_KEY,
    )


async def server_info(target: str, credentials: grpc.ChannelCredentials) -> str:
    """flintlockd's `ServerInfo` over mutual TLS; raises AioRpcError when refused."""
    async with grpc.aio.secure_channel(target, credentials) as channel:
        stub = microvms_pb2_grpc.MicroVMStub(channel)
        info = await stub.ServerInfo(empty_pb2.Empty(), timeout=HANDSHAKE_SECONDS)
        return str(info.version)


async def refused(target: str, credentials: grpc.ChannelCredentials) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server_info(target, credentials)
    return err.value.code()


@pytest.mark.controlplane
@pytest.mark.req("EA-126", "EA-128", "CT-102")
async def test_an_agents_credential_opens_its_own_hosts_flintlockd_only(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    c = csr_cluster
    node_a = await c.node("host-a", ADDRESS_A)
    node_b = await c.node("host-b", ADDRESS_B)
    battery_pair = c.client_ca.issue(  # as cert-manager issues it (CT-023)
        "battery", hosts=[names.spiffe_battery_client_id(TRUST_DOMAIN)], client=True
    )
    battery = grpc.ssl_channel_credentials(
        root_certificates=c.serving_ca.cert_pem,
        private_key=battery_pair.key_pem,
        certificate_chain=battery_pair.cert_pem,
    )
    dir_a, dir_b = tmp_path / "host-a", tmp_path / "host-b"
    async with (
        running(c),
        agent_certificates(c, node_a, ADDRESS_A, dir_a) as agent_a,
        agent_certificates(c, node_b, ADDRESS_B, dir_b) as agent_b,
        FakeFlintlockd.start(address=ADDRESS_A, tls=flintlockd_files(dir_a)) as fl_a,
        FakeFlintlockd.start(address=ADDRESS_B, tls=flintlockd_files(dir_b)) as fl_b,
    ):
        # Each agent reaches its own Host's flintlockd; battery reaches both.
        assert await server_info(fl_a.target, agent_a.client_credentials())
        assert await server_info(fl_b.target, agent_b.client_credentials())
        assert await server_info(fl_a.target, battery)
        assert await server_info(fl_b.target, battery)
        # The attack: host-a's agent key at host-b's flintlockd, and the other way round.
        code = await refused(fl_b.target, agent_a.client_credentials())
        assert code == grpc.StatusCode.UNAVAILABLE, code  # the TLS handshake fails
        code = await refused(fl_a.target, agent_b.client_credentials())
        assert code == grpc.StatusCode.UNAVAILABLE, code

        # Nor can host-a's agent (its own token, its own Node) get a certificate every Host
        # would trust: the approver denies the request, naming the rule.
        async with c.client_as(node_a) as as_agent_a:
            pem = request_pem(ec_key(), (names.spiffe_exec_agent_id(TRUST_DOMAIN, node_a),))
            name = await c.create_csr(
                as_agent_a,
                csr_body(c.name("steal-client"), names.FLINTLOCKD_CLIENT_SIGNER, pem),
            )
            obj = await until_csr(c.kube, name, decided, "decided")
    denied = condition(obj, CSRCondition.DENIED)
    assert denied is not None, obj.get("status")
    assert denied["reason"] == CSRReason.CLIENT_SIGNED_ON_HOST
    assert "CT-102" in str(denied["message"])
    assert not (obj.get("status") or {}).get("certificate")
