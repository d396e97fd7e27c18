"""The whole path of a claim's command: the operator binds the claim through battery, the Exec
Agent's Node report gives the claim its agent address and HostReady, and the Holder's command
runs through the agent on the MicroVM battery leased (EA-020, EA-034, CL-005, CL-050).

Everything talks TLS as in a cluster: battery and the agent dial the Host's (fake) flintlockd
with client certificates its client CA signed; the Holder dials the agent verifying its serving
certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Stack, condition, ready, wait_for, wait_phase
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api import names, samples
from batteryop.exec_agent.flintlockd import Flintlockd
from batteryop.exec_agent.node_report import NodeReporter
from batteryop.kube.client import KubeClient
from batteryop.testing import exec_agent as harness
from batteryop.testing.controlplane import ControlPlane, admin_client, ensure_service_account
from batteryop.testing.fake_battery import FakeBattery, HostConfig, HostTLSConfig
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.localstack import LocalStack, operator_kubeconfig, prepare_cluster
from batteryop.testing.operator_runner import OperatorProcess

HOST = harness.NODE


@pytest.mark.req("EA-020", "EA-034", "CL-005", "CL-050")
async def test_a_bound_claims_holder_runs_a_command_through_its_hosts_agent(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    prepare_cluster(controlplane, {HOST: harness.FLINTLOCKD_ADDRESS})
    harness.prepare_cluster(controlplane)
    pki = harness.make_pki(tmp_path / "pki")
    battery_cert, battery_key = pki.client_ca.issue(
        "battery", hosts=[names.spiffe_battery_client_id(names.DEFAULT_TRUST_DOMAIN)], client=True
    ).write(tmp_path / "pki", "battery")
    battery_tls = HostTLSConfig(
        insecure=False,
        ca_file=str(pki.files["flintlockd_ca_file"]),
        cert_file=str(battery_cert),
        key_file=str(battery_key),
    )
    agent_identity = harness.agent_kube_config(controlplane)
    api = admin_client(controlplane)
    async with contextlib.AsyncExitStack() as stack:
        fl = await stack.enter_async_context(
            FakeFlintlockd.start(
                address=harness.FLINTLOCKD_ADDRESS, tls=pki.flintlockd_tls, ssh_proxy=True
            )
        )
        battery = await stack.enter_async_context(
            FakeBattery.start(hosts=[HostConfig(HOST, fl.target, battery_tls)])
        )
        kubeconfig = operator_kubeconfig(controlplane, tmp_path / "operator.kubeconfig")
        operator = await stack.enter_async_context(
            OperatorProcess.start(kubeconfig=kubeconfig, battery_target=battery.target)
        )
        agent = await stack.enter_async_context(
            harness.running_agent(pki, agent_identity, fl.target)
        )
        local = LocalStack(controlplane, battery, {HOST: fl}, operator, kubeconfig, stack)
        env = Stack(local, api)

        # The agent's Node report, as its loop writes it (one round here).
        async with (
            KubeClient(agent_identity) as kube,
            Flintlockd.connect(agent.config) as upstream,
        ):
            report = await NodeReporter(
                kube,
                node_name=HOST,
                agent_address=agent.server.target,
                flintlockd_address=fl.target,
                paths=harness.healthy_host(tmp_path / "host"),
                server_info=upstream.server_info,
                interval=2.0,
                resync=300.0,
            ).report_once()
        assert report.ready

        # A lease long enough for this test on a loaded machine: the Holder here never renews.
        pool = samples.demo_pool(namespace=namespace)
        pool["spec"]["lease"] = {"heartbeatInterval": "1m", "expiryThreshold": "10m"}
        env.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, pool
        )
        await asyncio.to_thread(
            wait_for, env, names.POOL_PLURAL, namespace, "demo", ready, what="Ready=True"
        )
        ensure_service_account(api, namespace, "sandbox")
        secret = k8s.CoreV1Api(api).create_namespaced_secret(
            namespace, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=names.exec_secret_name("c1")))
        )
        env.custom.create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            samples.sample_claim(name="c1", pool="demo", namespace=namespace),
        )
        await asyncio.to_thread(wait_phase, env, namespace, "c1", "Bound")

        def usable(body: dict[str, Any] | None) -> bool:
            host_ready = condition(body, "HostReady")
            status = (body or {}).get("status") or {}
            address = (status.get("host") or {}).get("agentAddress")
            # The expiry arrives from battery a moment after the bind (CL-016).
            expiry = status.get("leaseExpiresAt")
            return bool(host_ready and host_ready["status"] == "True" and address and expiry)

        claim = await asyncio.to_thread(
            wait_for,
            env,
            names.CLAIM_PLURAL,
            namespace,
            "c1",
            usable,
            what="HostReady, agent address, lease expiry",
        )
        assert claim is not None
        status = claim["status"]
        assert status["host"]["agentAddress"] == agent.server.target

        holders = harness.Holders(api, namespace, fl, pki)
        token = holders.token("sandbox", (names.exec_secret_name("c1"), secret.metadata.uid))
        async with agent.channel() as channel:
            start = microvmexec_pb2.ExecStart(
                uid=status["microVM"]["uid"], cmd="echo", args=["through", "the", "agent"]
            )
            responses = await harness.run_exec(
                channel, (("authorization", f"Bearer {token}"),), start
            )
        assert harness.joined(responses, "stdout") == b"through the agent\n"
        assert responses[-1].exit_code == 0
        ran = await fl.exec_history()
        assert ran[-1].uid == status["microVM"]["uid"]
        assert ran[-1].cmd == "echo"
    api.close()
