"""The Node report on a real Node of the real API server, written by the agent's own identity,
from a real (fake) flintlockd's ServerInfo over mutual TLS (EA-030, EA-034, EA-035)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.api.conditions import HostReportReason
from batteryop.exec_agent.flintlockd import Flintlockd
from batteryop.exec_agent.host_checks import HostPaths
from batteryop.exec_agent.node_report import NodeReporter
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.exec_agent import FLINTLOCKD_ADDRESS, Pki, agent_config, healthy_host
from batteryop.testing.fake_flintlock import FakeFlintlockd

pytestmark = pytest.mark.controlplane

AGENT_AT = f"127.0.0.42:{names.EXEC_AGENT_PORT}"


@pytest.fixture
def node(cluster: ControlPlane) -> Iterator[str]:
    """A fresh Node labelled as a Host."""
    name = f"host-{uuid.uuid4().hex[:8]}"
    api = admin_client(cluster)
    core = k8s.CoreV1Api(api)
    try:
        core.create_node(
            k8s.V1Node(
                metadata=k8s.V1ObjectMeta(
                    name=name, labels={names.HOST_LABEL: names.HOST_LABEL_VALUE}
                )
            )
        )
        yield name
        core.delete_node(name)
    finally:
        api.close()


def published_on(cluster: ControlPlane, node: str) -> dict[str, str]:
    api = admin_client(cluster)
    try:
        body = k8s.CoreV1Api(api).read_node(node)
    finally:
        api.close()
    return {
        k: v for k, v in (body.metadata.annotations or {}).items() if k.startswith(names.PREFIX)
    }


def reporter(
    kube: KubeClient, node: str, paths: HostPaths, upstream: Flintlockd, target: str
) -> NodeReporter:
    return NodeReporter(
        kube,
        node_name=node,
        agent_address=AGENT_AT,
        flintlockd_address=target,
        paths=paths,
        server_info=upstream.server_info,
        interval=2.0,
        resync=3600.0,
    )


@pytest.mark.req("EA-030", "EA-034", "EA-035")
async def test_a_ready_host_publishes_its_report_and_addresses(
    cluster: ControlPlane,
    node: str,
    pki: Pki,
    flintlockd: FakeFlintlockd,
    agent_identity: KubeConfig,
    tmp_path: Path,
) -> None:
    config = agent_config(pki, flintlockd.target, call_timeout=timedelta(seconds=2))
    async with KubeClient(agent_identity) as kube, Flintlockd.connect(config) as upstream:
        report = reporter(kube, node, healthy_host(tmp_path), upstream, flintlockd.target)
        first = await report.report_once()
        assert first.ready
        assert published_on(cluster, node) == {
            names.EXEC_AGENT_READY_ANNOTATION: "true",
            names.EXEC_AGENT_REASON_ANNOTATION: "Ready",
            names.EXEC_AGENT_MESSAGE_ANNOTATION: "flintlockd v0.16.0 with exec enabled",
            names.EXEC_AGENT_ADDRESS_ANNOTATION: AGENT_AT,
            names.FLINTLOCKD_ADDRESS_ANNOTATION: flintlockd.target,
        }

        # Nothing changed: nothing is written until the resync.
        await report.report_once()
        assert report.writes == 1

        await flintlockd.go_down()
        down = await report.report_once()
        assert (down.ready, down.reason) == (False, HostReportReason.FLINTLOCKD_NOT_READY)
        assert report.writes == 2
        published = published_on(cluster, node)
        assert published[names.EXEC_AGENT_READY_ANNOTATION] == "false"
        assert published[names.EXEC_AGENT_REASON_ANNOTATION] == "FlintlockdNotReady"
        assert published[names.EXEC_AGENT_MESSAGE_ANNOTATION].startswith("flintlockd: UNAVAILABLE")


@pytest.mark.req("EA-030")
async def test_a_flintlockd_without_exec_reports_exec_disabled(
    cluster: ControlPlane, node: str, pki: Pki, agent_identity: KubeConfig, tmp_path: Path
) -> None:
    async with FakeFlintlockd.start(
        address=FLINTLOCKD_ADDRESS, tls=pki.flintlockd_tls, exec_enabled=False
    ) as host:
        config = agent_config(pki, host.target)
        async with KubeClient(agent_identity) as kube, Flintlockd.connect(config) as upstream:
            await reporter(kube, node, healthy_host(tmp_path), upstream, host.target).report_once()
    published = published_on(cluster, node)
    assert published[names.EXEC_AGENT_READY_ANNOTATION] == "false"
    assert published[names.EXEC_AGENT_REASON_ANNOTATION] == "ExecDisabled"
