"""The approver as the pex a release ships: it refuses to start without a trust domain, and
with one it signs a real request, reports ready and counts what it did."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from batteryop.api import names
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.csr_approver_env import (
    TRUST_DOMAIN,
    ApproverProcess,
    Cluster,
    until_csr,
)
from batteryop.testing.csrs import csr_body, ec_key, request_pem
from batteryop.testing.polling import wait_until


@pytest.mark.req("CT-020")
async def test_the_process_exits_2_without_a_trust_domain() -> None:
    with ApproverProcess.start(["--kubeconfig=/nonexistent"]) as proc:
        code = await asyncio.to_thread(proc.popen.wait, 60)
        assert code == 2, proc.logs()
        assert "--trust-domain: is required" in proc.logs()


@pytest.mark.controlplane
@pytest.mark.req("DP-107")
async def test_the_process_signs_a_request_and_reports_ready(
    cluster: Cluster, controlplane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = controlplane.write_kubeconfig(tmp_path / "admin.kubeconfig")
    args = [
        f"--kubeconfig={kubeconfig}",
        f"--trust-domain={TRUST_DOMAIN}",
        f"--namespace={cluster.namespace}",
        "--exec-agent-service-account=exec-agent",
        "--log-format=text",
    ]
    node = await cluster.node("host-p", "10.40.0.1")
    with ApproverProcess.start(args) as proc:
        async with cluster.client_as(node) as agent:
            sans = ("10.40.0.1", names.spiffe_exec_agent_id(TRUST_DOMAIN, node))
            pem = request_pem(ec_key(), sans)
            body = csr_body(cluster.name("pex"), names.EXEC_AGENT_SERVING_SIGNER, pem)
            name = await cluster.create_csr(agent, body)
            try:
                await until_csr(
                    cluster.kube,
                    name,
                    lambda o: bool((o.get("status") or {}).get("certificate")),
                    "signed",
                    timeout=60,
                )
            except AssertionError:
                raise AssertionError(proc.logs()[-4000:]) from None
        status, body_text = await asyncio.to_thread(proc.get, "/readyz?verbose")
        assert status == 200, body_text
        # DP-107: every watch and queue runs under the supervisor, each its own check.
        for task in (
            "watch-certificatesigningrequests",
            "watch-ca-bundle",
            "queue-certificatesigningrequests",
            "queue-ca-bundle",
        ):
            assert f"[+]{task} ok" in body_text, body_text

        # The approver counts the signing after its status write returns, which can be after
        # the test's watch saw the certificate.
        async def page() -> str:
            return (await asyncio.to_thread(proc.get, "/metrics", proc.metrics_port))[1]

        await wait_until(
            page, lambda text: 'outcome="signed"' in text, what="counted signed", within=30
        )
        assert "PRIVATE KEY" not in proc.logs()
        assert proc.stop() == 0, proc.logs()[-4000:]
