"""The drain guard against the real API server, acting as the agent's own identity: install.yaml's
RBAC and admission policy for it, a token bound to a Pod on its Node (what the DaemonSet's
projected token is), claims written as the operator writes them, a clock the test moves.

No kubelet runs here: a guard Pod stays Pending unless the test writes its status as the
kubelet would, and no kube-controller-manager computes budgets' status unless the test writes
it as the disruption controller would. Each eviction below says which it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from batteryop.api import names, samples
from batteryop.api.claim import ClaimStatus
from batteryop.api.clock import FakeClock
from batteryop.api.conditions import ClaimPhase
from batteryop.api.times import format_rfc3339_nano, parse_time
from batteryop.exec_agent.drain_guard import DrainGuard, bound_on
from batteryop.exec_agent.guard_pair import guard_objects
from batteryop.exec_agent.metrics import AgentMetrics
from batteryop.kube.client import KubeClient, Object
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import ConflictError, NotFoundError, TooManyRequestsError
from batteryop.kube.resources import (
    CLAIMS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    SERVICEACCOUNTS,
)
from batteryop.manifests import rbac
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    ensure_service_account,
    pod_bound_token,
)
from batteryop.testing.exec_agent_policy import NS, install_exec_agent

TIMEOUT = timedelta(hours=1)
LINGER = timedelta(seconds=names.EXEC_AGENT_DRAIN_GUARD_LINGER_SECONDS)
NO_CLAIMS_SA = "exec-agent-without-claims"
"""An identity with the agent's grants but reading no claims (the RBAC of a broken install)."""

# --- pure parts --------------------------------------------------------------------------------


def _claim(phase: str | None, node: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if node:
        status["host"] = {"nodeName": node}
    return {"metadata": {"name": "c", "namespace": "n"}, "status": status}


@pytest.mark.req("EA-040")
def test_only_a_claim_bound_on_this_node_counts() -> None:
    assert bound_on(_claim("Bound", "host-a"), "host-a")
    assert not bound_on(_claim("Bound", "host-b"), "host-a")
    assert not bound_on(_claim("Pending", "host-a"), "host-a")
    assert not bound_on(_claim("Expired", "host-a"), "host-a")
    assert not bound_on(_claim(None, None), "host-a")


@pytest.mark.req("EA-041")
def test_the_guard_is_a_budget_then_a_pod_bound_to_the_node_owned_by_it() -> None:
    budget, pod = guard_objects(node="host-a", node_uid="u-1", namespace="ns", image="pause:1")
    name = names.drain_guard_name("host-a")
    assert budget["metadata"]["name"] == pod["metadata"]["name"] == name
    assert budget["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": {names.DRAIN_GUARD_LABEL: "host-a"}},
    }
    assert pod["metadata"]["labels"][names.DRAIN_GUARD_LABEL] == "host-a"
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "host-a",
        "uid": "u-1",
        "controller": True,
    }
    spec = pod["spec"]
    assert spec["nodeName"] == "host-a"
    assert spec["automountServiceAccountToken"] is False
    assert "volumes" not in spec
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert [c["image"] for c in spec["containers"]] == ["pause:1"]


# --- the cluster -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(cluster: ControlPlane) -> ControlPlane:
    """install.yaml's Exec Agent objects (`install_exec_agent`) and `NO_CLAIMS_SA`."""
    api = admin_client(cluster)
    try:
        install_exec_agent(api)
        ensure_service_account(api, NS, NO_CLAIMS_SA)
        authz = k8s.RbacAuthorizationV1Api(api)
        without_claims = [
            r for r in rbac.exec_agent_cluster_rules() if names.CLAIM_PLURAL not in r["resources"]
        ]
        subjects = [{"kind": "ServiceAccount", "name": NO_CLAIMS_SA, "namespace": NS}]
        role_ref = {"apiGroup": rbac.RBAC_GROUP, "name": NO_CLAIMS_SA}
        with contextlib.suppress(k8s.ApiException):
            authz.create_cluster_role({"metadata": {"name": NO_CLAIMS_SA}, "rules": without_claims})
            authz.create_cluster_role_binding(
                {
                    "metadata": {"name": NO_CLAIMS_SA},
                    "roleRef": {**role_ref, "kind": "ClusterRole"},
                    "subjects": subjects,
                }
            )
            authz.create_namespaced_role(
                NS,
                {"metadata": {"name": NO_CLAIMS_SA}, "rules": rbac.exec_agent_namespace_rules()},
            )
            authz.create_namespaced_role_binding(
                NS,
                {
                    "metadata": {"name": NO_CLAIMS_SA},
                    "roleRef": {**role_ref, "kind": "Role"},
                    "subjects": subjects,
                },
            )
    finally:
        api.close()
    return cluster


@dataclass
class Host:
    """A fresh Node, the admin, and the agent's identity on that Node."""

    cp: ControlPlane
    admin: KubeClient
    node: str
    claims_namespace: str

    @property
    def guard(self) -> str:
        return names.drain_guard_name(self.node)

    @contextlib.asynccontextmanager
    async def agent_client(
        self, service_account: str = names.EXEC_AGENT_NAME
    ) -> AsyncIterator[KubeClient]:
        api = admin_client(self.cp)
        try:
            token = await asyncio.to_thread(pod_bound_token, api, NS, service_account, self.node)
        finally:
            api.close()
        async with KubeClient(KubeConfig.from_dict(self.cp.kubeconfig(token=token))) as kube:
            yield kube

    @contextlib.asynccontextmanager
    async def running(
        self,
        clock: FakeClock,
        service_account: str = names.EXEC_AGENT_NAME,
        linger: timedelta = LINGER,
    ) -> AsyncIterator[DrainGuard]:
        """The guard, as the agent runs it, until the block ends."""
        async with self.agent_client(service_account) as kube:
            guard = DrainGuard(
                kube,
                node_name=self.node,
                namespace=NS,
                timeout=TIMEOUT,
                linger=linger,
                clock=clock,
            )
            stop = asyncio.Event()
            task = asyncio.create_task(guard.run(stop))
            try:
                yield guard
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)

    async def claim(self, name: str, node: str, phase: ClaimPhase = ClaimPhase.BOUND) -> None:
        """A claim with the status the operator writes when it binds one on `node`."""
        ns = self.claims_namespace
        await self.admin.create(CLAIMS, samples.sample_claim(name, "pool", "sandbox", ns), ns)
        await self.set_phase(name, node, phase)

    async def set_phase(self, name: str, node: str, phase: ClaimPhase) -> None:
        now = datetime.now(UTC).replace(microsecond=0)
        bound = phase == ClaimPhase.BOUND
        status = ClaimStatus(
            phase=phase,
            lease_id=f"lease-{name}" if bound else None,
            microvm_uid=f"vm-{name}" if bound else None,
            node_name=node if bound else None,
            bound_time=now if bound else None,
            lease_expires_at=now + timedelta(hours=1) if bound else None,
        )
        patch = {"status": status.to_dict()}
        await self.admin.patch(CLAIMS, name, patch, self.claims_namespace, subresource="status")

    async def delete_claim(self, name: str) -> None:
        await self.admin.delete(CLAIMS, name, self.claims_namespace)

    async def cordon(self, unschedulable: bool) -> None:
        await self.admin.patch(NODES, self.node, {"spec": {"unschedulable": unschedulable}})

    async def touch(self, guard: DrainGuard) -> None:
        """A change of the Node that is not ours, and the guard's pass over it."""
        seen = guard.reconciles
        patch = {"metadata": {"annotations": {"example.com/touched": uuid.uuid4().hex}}}
        await self.admin.patch(NODES, self.node, patch)
        await until(guard, lambda g: g.reconciles > seen)

    async def drain_started(self) -> str | None:
        node = await self.admin.get(NODES, self.node)
        annotations = node["metadata"].get("annotations") or {}
        return annotations.get(names.DRAIN_STARTED_ANNOTATION)

    async def guard_objects(self) -> tuple[Object | None, Object | None]:
        """The guard's budget and Pod as the API server has them (None: not there)."""
        found: list[Object | None] = []
        for res in (POD_DISRUPTION_BUDGETS, PODS):
            try:
                found.append(await self.admin.get(res, self.guard, NS))
            except NotFoundError:
                found.append(None)
        return found[0], found[1]

    async def evict(self, *, dry_run: bool = False) -> None:
        """An eviction of the guard Pod, as `kubectl drain` asks for it."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": self.guard, "namespace": NS},
        }
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        await self.admin.create(PODS, body, NS, name=self.guard, subresource="eviction")


async def until(guard: DrainGuard, predicate: Callable[[DrainGuard], bool]) -> None:
    await asyncio.wait_for(guard.wait_for(predicate), 20)


async def drain_begun(host: Host, guard: DrainGuard) -> None:
    """A claim "held" Bound on the Host, the guard up, then the Host cordoned: a drain started."""
    await host.claim("held", host.node)
    await until(guard, lambda g: bool(g.held))
    await host.cordon(True)
    await until(guard, lambda g: g.drain_started is not None)


@pytest_asyncio.fixture
async def host(installed: ControlPlane, namespace: str) -> AsyncIterator[Host]:
    async with KubeClient(KubeConfig.from_dict(installed.kubeconfig())) as admin:
        node = f"host-{uuid.uuid4().hex[:8]}"
        await admin.create(NODES, {"metadata": {"name": node}})
        try:
            yield Host(installed, admin, node, namespace)
        finally:
            await admin.delete(NODES, node)
            for res in (PODS, POD_DISRUPTION_BUDGETS):
                with contextlib.suppress(NotFoundError):
                    await admin.delete(res, names.drain_guard_name(node), NS)


@pytest.fixture
def guard_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="batteryop.exec_agent.drain_guard"):
        yield caplog


def messages(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "batteryop.exec_agent.drain_guard" and r.levelno >= level
    ]


@pytest.mark.controlplane
@pytest.mark.req("EA-040", "EA-041", "EA-051")
async def test_a_claim_bound_here_holds_a_drain_until_the_last_one_goes(host: Host) -> None:
    clock = FakeClock()
    async with host.running(clock) as guard:
        await until(guard, lambda g: g.claims_known and g.held is False)
        # A claim on another Host, and one still Pending here, hold nothing.
        await host.claim("elsewhere", "host-other")
        await host.claim("mine", host.node, ClaimPhase.PENDING)
        await host.touch(guard)
        assert guard.held is False
        assert await host.guard_objects() == (None, None)

        await host.set_phase("mine", host.node, ClaimPhase.BOUND)
        await until(guard, lambda g: bool(g.held))
        assert guard.bound_claims == [f"{host.claims_namespace}/mine"]
        metrics = AgentMetrics(CollectorRegistry())
        metrics.follow_drain_guard(guard)
        sample = metrics.registry.get_sample_value
        assert sample("battery_operator_exec_agent_drain_guard_held") == 1.0
        assert sample("battery_operator_exec_agent_bound_claims") == 1.0
        budget, pod = await host.guard_objects()
        assert budget is not None and pod is not None
        node = await host.admin.get(NODES, host.node)
        assert pod["spec"]["nodeName"] == host.node
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert not pod["spec"].get("volumes")
        assert pod["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        assert budget["spec"]["minAvailable"] == 1

        # What a drain meets. The Eviction API ignores budgets for a Pending Pod (a dry run
        # shows it would go): the guard holds once the kubelet runs it.
        await host.evict(dry_run=True)
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        await host.admin.replace(PODS, host.guard, pod, NS, subresource="status")
        with pytest.raises(TooManyRequestsError) as refused:
            await host.evict()
        assert refused.value.status == 429
        assert "disruption budget" in refused.value.message
        # The budget as the disruption controller writes it for that Pod: still 429.
        status = {
            "observedGeneration": budget["metadata"]["generation"],
            "currentHealthy": 0,
            "desiredHealthy": 1,
            "expectedPods": 1,
            "disruptionsAllowed": 0,
        }
        await host.admin.patch(
            POD_DISRUPTION_BUDGETS, host.guard, {"status": status}, NS, subresource="status"
        )
        with pytest.raises(TooManyRequestsError) as refused:
            await host.evict()
        assert "needs 1 healthy pods and has 0 currently" in str(refused.value.causes)

        # A second claim here; the guard stays until the last one goes.
        await host.claim("mine-too", host.node)
        await until(guard, lambda g: len(g.bound_claims) == 2)
        await host.delete_claim("mine")
        await until(guard, lambda g: len(g.bound_claims) == 1)
        assert guard.held
        await host.delete_claim("mine-too")
        # EA-042: the Node is not cordoned, so the guard stays the linger for the next claim.
        await until(guard, lambda g: g.idle_since is not None)
        assert guard.held
        assert guard.bound_claims == []  # "elsewhere" is still Bound, on its own Host
        clock.advance(LINGER - timedelta(microseconds=1))
        await host.touch(guard)
        assert guard.held
        budget, pod = await host.guard_objects()
        assert budget is not None and pod is not None
        clock.advance(timedelta(microseconds=1))
        await until(guard, lambda g: g.held is False)
        assert await host.guard_objects() == (None, None)
        assert sample("battery_operator_exec_agent_drain_guard_held") == 0.0


@pytest.mark.controlplane
@pytest.mark.req("EA-040", "EA-042")
async def test_the_guard_lingers_for_the_next_claim_and_goes_at_a_cordon(
    host: Host, guard_log: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    async with host.running(clock) as guard:
        await host.claim("first", host.node)
        await until(guard, lambda g: bool(g.held))
        _, pod = await host.guard_objects()
        assert pod is not None
        await host.delete_claim("first")
        await until(guard, lambda g: g.idle_since == clock.now())

        # A claim bound within the linger finds the same guard: nothing made or deleted.
        clock.advance(LINGER / 2)
        await host.touch(guard)
        await host.claim("second", host.node)
        await until(guard, lambda g: g.bound_claims != [] and g.idle_since is None)
        _, same = await host.guard_objects()
        assert same is not None and same["metadata"]["uid"] == pod["metadata"]["uid"]

        # Its linger counts from when it went, not from the first claim's.
        await host.delete_claim("second")
        await until(guard, lambda g: g.idle_since == clock.now())
        clock.advance(LINGER / 2)
        await host.touch(guard)
        assert guard.held

        # A cordon starts a drain: with no claim Bound, the guard goes at once (EA-040).
        await host.cordon(True)
        await until(guard, lambda g: g.held is False)
        assert guard.drain_started == clock.now()
        assert await host.guard_objects() == (None, None)
        assert "Released the drain guard: no claim is Bound on the Host" in messages(guard_log)
        assert messages(guard_log, logging.WARNING) == []


@pytest.mark.controlplane
@pytest.mark.req("EA-040", "EA-042")
async def test_without_a_linger_the_guard_goes_with_the_last_claim(
    host: Host, guard_log: pytest.LogCaptureFixture
) -> None:
    async with host.running(FakeClock(), linger=timedelta(0)) as guard:
        await host.claim("only", host.node)
        await until(guard, lambda g: bool(g.held))
        await host.delete_claim("only")
        await until(guard, lambda g: g.held is False)
        assert await host.guard_objects() == (None, None)
        assert "Released the drain guard: no claim is Bound on the Host" in messages(guard_log)


@pytest.mark.controlplane
@pytest.mark.req("EA-040")
async def test_cordon_records_the_drain_start_and_the_timeout_releases_the_guard(
    host: Host, guard_log: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    async with host.running(clock) as guard:
        await drain_begun(host, guard)
        started = clock.now()
        assert await host.drain_started() == format_rfc3339_nano(started)

        # A moment before the timeout the drain is still held.
        clock.set(started + TIMEOUT - timedelta(microseconds=1))
        await host.touch(guard)
        assert guard.held
        assert messages(guard_log, logging.WARNING) == []

        clock.set(started + TIMEOUT)
        await until(guard, lambda g: g.held is False)
        assert await host.guard_objects() == (None, None)
        assert f"Abandoned MicroVMClaim {host.claims_namespace}/held: the drain timeout passed" in (
            messages(guard_log, logging.WARNING)
        )
        # Still cordoned, still a Bound claim: the guard does not come back.
        await host.claim("late", host.node)
        await until(guard, lambda g: len(g.bound_claims) == 2)
        assert guard.held is False

        # Uncordoned: the drain start goes, and the Bound claims bring the guard back.
        await host.cordon(False)
        await until(guard, lambda g: bool(g.held))
        assert guard.drain_started is None
        assert await host.drain_started() is None
        budget, pod = await host.guard_objects()
        assert budget is not None and pod is not None

        # The next cordon is a new drain, with its own start and its own timeout.
        clock.advance(timedelta(minutes=5))
        await host.cordon(True)
        await until(guard, lambda g: g.drain_started == clock.now())
        assert await host.drain_started() == format_rfc3339_nano(clock.now())
        assert guard.held


@pytest.mark.controlplane
@pytest.mark.req("EA-040", "EA-041")
async def test_a_restarted_agent_adopts_the_guard_and_counts_from_the_recorded_start(
    host: Host, guard_log: pytest.LogCaptureFixture
) -> None:
    first = FakeClock()
    async with host.running(first) as guard:
        await drain_begun(host, guard)
    started = parse_time(str(await host.drain_started()))
    _, pod = await host.guard_objects()
    assert pod is not None

    # The agent comes back half an hour later.
    later = FakeClock(started + TIMEOUT / 2)
    async with host.running(later) as guard:
        await until(guard, lambda g: bool(g.held))
        assert "Adopted the drain guard" in messages(guard_log)
        assert guard.drain_started == started
        _, still = await host.guard_objects()
        assert still is not None and still["metadata"]["uid"] == pod["metadata"]["uid"]
        assert await host.drain_started() == format_rfc3339_nano(started)  # not restarted

        later.set(started + TIMEOUT)
        await until(guard, lambda g: g.held is False)
        assert await host.guard_objects() == (None, None)


@pytest.mark.controlplane
@pytest.mark.req("EA-040")
async def test_the_guard_is_left_as_it_is_while_claims_cannot_be_listed(host: Host) -> None:
    async with host.running(FakeClock()) as guard:
        await host.claim("held", host.node)
        await until(guard, lambda g: bool(g.held))
    # No claim is Bound any more: an agent that could list them would release the guard.
    await host.delete_claim("held")

    async with host.running(FakeClock(), service_account=NO_CLAIMS_SA) as guard:
        await until(guard, lambda g: g.claim_failures > 0 and g.held is not None)
        await host.touch(guard)
        assert guard.held is True
        assert guard.claims_known is False
        budget, pod = await host.guard_objects()
        assert budget is not None and pod is not None


@pytest.mark.controlplane
@pytest.mark.req("EA-040", "EA-041")
async def test_a_refused_guard_is_tried_again_until_it_is_made(
    host: Host, guard_log: pytest.LogCaptureFixture
) -> None:
    # Without the namespace's `default` ServiceAccount the API server refuses the Pod.
    default_sa = await host.admin.get(SERVICEACCOUNTS, "default", NS)
    await host.admin.delete(SERVICEACCOUNTS, "default", NS)
    try:
        async with host.running(FakeClock()) as guard:
            await host.claim("held", host.node)
            await until(guard, lambda g: g.failures > 0)
            assert guard.held is False
            budget, pod = await host.guard_objects()
            assert budget is not None and pod is None  # the budget first, and only it so far
            await host.admin.create(SERVICEACCOUNTS, {"metadata": {"name": "default"}}, NS)
            await until(guard, lambda g: bool(g.held))
            budget, pod = await host.guard_objects()
            assert budget is not None and pod is not None
        assert "Could not bring the drain guard up to date; trying again" in messages(
            guard_log, logging.WARNING
        )
    finally:
        with contextlib.suppress(ConflictError):
            await host.admin.create(
                SERVICEACCOUNTS, {"metadata": {"name": default_sa["metadata"]["name"]}}, NS
            )
