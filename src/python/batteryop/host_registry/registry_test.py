"""The registry as a process, against the real API server, acting as the operator's
ServiceAccount with install.yaml's RBAC, beside a fake battery process that it restarts for
real (the `BatteryPod` stands in for the kubelet: it keeps the config file equal to the
ConfigMap and starts battery again whenever it exits)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from batteryop.api import names
from batteryop.battery import BatteryClient, configfile
from batteryop.battery.errors import BatteryUnavailableError
from batteryop.battery.models import (
    HookFailurePolicy,
    Kernel,
    MicroVMTemplate,
    PoolRef,
    PoolSpec,
    Replenishment,
    ReplenishmentType,
    Volume,
)
from batteryop.host_registry.admission import INVALID_ADDRESS_EVENT_REASON, Refusal
from batteryop.host_registry.inventory.hosts import REMOVE_REFUSED_EVENT_REASON
from batteryop.kube.client import KubeClient, Object
from batteryop.kube.resources import CONFIGMAPS, EVENTS
from batteryop.testing import exposition
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.testing.host_registry_env import (
    BatteryPod,
    RegistryProcess,
    battery_client,
    create_host_node,
    publications_since,
    published,
    set_cordoned,
    set_labelled,
    set_report,
    until_configmap,
    until_event,
)
from batteryop.testing.polling import wait_until


def has(*hosts: str) -> Callable[[Object], bool]:
    """A ConfigMap check: the published Host set is exactly `hosts`."""
    return lambda cm: set(published(cm) or {}) == set(hosts) and published(cm) is not None


async def battery_hosts(pod: BatteryPod) -> dict[str, tuple[str, bool]]:
    async with battery_client(pod) as client:
        await client.wait_connected(timedelta(seconds=10))
        return {
            s.host.name: (s.host.address, s.host.cordoned)
            for s in await client.list_hosts()
            if s.host.name != configfile.NO_HOSTS_NAME
        }


async def battery_becomes(pod: BatteryPod, expected: set[str], timeout: float = 30) -> None:
    """Wait until battery has exactly `expected`, looking again after each restart."""
    async with asyncio.timeout(timeout):
        while True:
            seen = len(pod.starts)
            try:
                if set(await battery_hosts(pod)) == expected:
                    return
            except BatteryUnavailableError:
                continue  # read while the registry restarted battery: read the new one
            await pod.wait_starts(seen + 1, timeout)


REFUSED_REMOVALS = 'host_calls_total{result="refused",rpc="RemoveHost"}'
"""The registry's count of RemoveHost calls battery refused."""


def sample(page: str, name: str) -> float:
    """The value of one sample (`name` with its labels) in the registry's metrics, 0 if absent."""
    return exposition.value(page, f"battery_host_registry_{name}")


async def until_sample(registry: RegistryProcess, name: str, value: float, timeout: float) -> str:
    """Wait until the registry's metric sample `name` reaches `value`; its metrics then."""

    async def page() -> str:
        return registry.metrics()

    return await wait_until(
        page, lambda text: sample(text, name) >= value, what=name, within=timeout
    )


async def until_battery_has(client: BatteryClient, expected: set[str], timeout: float) -> None:
    """Wait until battery's Host list is `expected`, reading it every 0.1 s: battery does not
    event Host changes, so its ListHosts is what there is to watch."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                hosts = {s.host.name for s in await client.list_hosts()}
                if hosts - {configfile.NO_HOSTS_NAME} == expected:
                    return
            except BatteryUnavailableError:
                pass  # restarting
            await asyncio.sleep(0.1)


def unique(stem: str, namespace: str) -> str:
    return f"{stem}-{namespace[-6:]}"


@pytest.mark.req("IN-001", "IN-002", "IN-003", "IN-010", "IN-102", "DP-004", "DP-006")
async def test_membership_follows_labels_readiness_and_deletion(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a, b = unique("a", namespace), unique("b", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig),
    ):
        await until_configmap(kube, namespace, has())  # published at once, empty
        await create_host_node(kube, a, address="127.0.0.41:9090")
        await create_host_node(kube, b, address="127.0.0.42:9090", ready=False)
        await create_host_node(
            kube, unique("plain", namespace), address="127.0.0.43:9090", labelled=False
        )
        cm = await until_configmap(kube, namespace, has(a))
        assert published(cm) == {a: "127.0.0.41:9090"}
        assert await battery_hosts(pod) == {a: ("127.0.0.41:9090", False)}
        assert configfile.hosts_of(pod.config_file.read_text()) == {a: "127.0.0.41:9090"}
        assert len(pod.starts) == 2  # battery was restarted once, with a

        await set_report(kube, b, "127.0.0.42:9090", ready=True)
        await until_configmap(kube, namespace, has(a, b))
        await set_report(kube, a, "127.0.0.41:9090", ready=False)
        await until_configmap(kube, namespace, has(b))
        await battery_becomes(pod, {b})
        await set_labelled(kube, b, False)
        # IN-013: the Host set loses b first; battery is restarted without it after the drain.
        cm = await until_configmap(kube, namespace, has())
        await battery_becomes(pod, set())
        assert names.RESTART_PENDING_ANNOTATION not in (cm["metadata"].get("annotations") or {})


@pytest.mark.req("IN-011", "IN-012")
async def test_several_changes_in_one_window_make_one_restart(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    nodes = [unique(f"w{i}", namespace) for i in range(3)]
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(
            pod, kubeconfig=registry_kubeconfig, settle_time="200ms", restart_window="3s"
        ) as registry,
    ):
        await until_configmap(kube, namespace, has())
        first = time.monotonic()
        for i, name in enumerate(nodes):
            await create_host_node(kube, name, address=f"127.0.0.{51 + i}:9090")
        await until_configmap(kube, namespace, has(*nodes))
        took = time.monotonic() - first
        assert len(pod.starts) == 2, "three Hosts joined in one restart"
        assert took >= 3.0, f"applied after {took:.1f}s, before the window closed"
        assert "battery_host_registry_battery_restarts_total 1.0" in registry.metrics()


@pytest.mark.req("IN-011")
async def test_a_flap_shorter_than_the_settle_time_never_restarts_battery(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a, marker = unique("flap", namespace), unique("marker", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig, settle_time="2s"),
    ):
        await until_configmap(kube, namespace, has())
        await create_host_node(kube, a, address="127.0.0.44:9090")
        await set_report(kube, a, "127.0.0.44:9090", ready=False)  # back before it settles
        await create_host_node(kube, marker, address="127.0.0.45:9090")
        await until_configmap(kube, namespace, has(marker))
        assert len(pod.starts) == 2 and set(await battery_hosts(pod)) == {marker}


def pool_spec(hosts: tuple[str, ...]) -> PoolSpec:
    return PoolSpec(
        namespace="drain",
        name="p",
        template=MicroVMTemplate(
            vcpu=1,
            memory_in_mb=256,
            kernel=Kernel(image="example/kernel:1", filename="boot/vmlinux"),
            root_volume=Volume(id="root", container_source="example/rootfs:1"),
        ),
        size=0,
        replenishment=Replenishment(ReplenishmentType.MIN_SIZE_THRESHOLD, min_size=1),
        hook_failure_policy=HookFailurePolicy.DELETE_AND_REPLACE,
        heartbeat_interval=timedelta(seconds=10),
        heartbeat_expiry_threshold=timedelta(seconds=30),
        flintlock_hosts=hosts,
    )


@pytest.mark.req("IN-013")
async def test_a_leaving_host_is_drained_before_battery_is_restarted(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a, b = unique("stay", namespace), unique("leave", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig, drain_timeout="20s"),
    ):
        await create_host_node(kube, a, address="127.0.0.46:9090")
        await create_host_node(kube, b, address="127.0.0.47:9090")
        await until_configmap(kube, namespace, has(a, b))
        starts = len(pod.starts)
        async with battery_client(pod) as client:
            await client.wait_connected(timedelta(seconds=10))
            await client.create_pool(pool_spec((a, b)))  # as the Pool controller would
            await set_report(kube, b, "127.0.0.47:9090", ready=False)
            # The Hosts that stay are published first; battery keeps b while a Pool names it.
            await until_configmap(kube, namespace, has(a))
            assert len(pod.starts) == starts
            assert b in await battery_hosts(pod)
            released = time.monotonic()
            await client.update_pool(pool_spec((a,)))  # the Pool controller follows
        start = await pod.wait_starts(starts + 1)
        assert start.at >= released
        assert set(await battery_hosts(pod)) == {a}


@pytest.mark.req("IN-001", "IN-100")
async def test_a_cordon_is_applied_in_battery_without_a_restart(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a = unique("cordon", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig),
    ):
        await create_host_node(kube, a, address="127.0.0.48:9090")
        await until_configmap(kube, namespace, has(a))
        starts = len(pod.starts)
        await set_cordoned(kube, a, True)
        await until_configmap(kube, namespace, has())
        assert await battery_hosts(pod) == {a: ("127.0.0.48:9090", True)}
        await set_cordoned(kube, a, False)
        await until_configmap(kube, namespace, has(a))
        assert await battery_hosts(pod) == {a: ("127.0.0.48:9090", False)}
        assert len(pod.starts) == starts


@pytest.mark.req("IN-003", "IN-004", "IN-101")
async def test_with_host_rpcs_hosts_join_and_leave_over_mtls_without_a_restart(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a = unique("api", namespace)
    async with BatteryPod.start(kube, namespace, host_api=True) as pod:
        cert, key, ca = pod.host_tls(a, "127.0.0.49")
        async with (
            FakeFlintlockd.start(address="127.0.0.49", tls=TLSFiles(cert, key, ca)) as host,
            RegistryProcess.start(pod, kubeconfig=registry_kubeconfig) as registry,
        ):
            await create_host_node(kube, a, address=host.target)
            await until_configmap(kube, namespace, has(a))
            async with battery_client(pod) as client:
                status = await client.get_host(a)
            # AddHost validated the Host: battery reached flintlockd over mutual TLS.
            assert status.flintlock_version
            await set_report(kube, a, host.target, ready=False)
            await until_configmap(kube, namespace, has())
            # The leaving Host is unpublished first (IN-013, IN-104), RemoveHost follows.
            async with asyncio.timeout(30):
                while await battery_hosts(pod) != {}:
                    await asyncio.sleep(0.2)  # battery's Host list has no watch
            assert len(pod.starts) == 1
            # battery drops the Host before it answers; the registry counts the answer after.
            removed = 'host_calls_total{result="ok",rpc="RemoveHost"}'
            metrics = await until_sample(registry, removed, 1, timeout=10)
            assert sample(metrics, removed) == 1
            assert 'host_calls_total{result="ok",rpc="AddHost"} 1.0' in metrics


@pytest.mark.req("IN-013", "IN-101", "IN-104")
async def test_a_refused_removal_is_reported_once_retried_and_keeps_the_host_unpublished(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a = unique("refused", namespace)
    async with BatteryPod.start(kube, namespace, host_api=True) as pod:
        cert, key, ca = pod.host_tls(a, "127.0.0.63")
        async with (
            FakeFlintlockd.start(address="127.0.0.63", tls=TLSFiles(cert, key, ca)) as host,
            RegistryProcess.start(
                pod, kubeconfig=registry_kubeconfig, drain_timeout="1s"
            ) as registry,
            battery_client(pod) as client,
        ):
            await create_host_node(kube, a, address=host.target)
            await until_configmap(kube, namespace, has(a))
            await client.create_pool(pool_spec((a,)))  # a Pool controller that never follows
            await set_labelled(kube, a, False)
            gone = await until_configmap(kube, namespace, has())
            # The drain times out; battery refuses (a Pool names the Host): said once, with
            # battery's reason, on the Node.
            event = await until_event(kube, a, REMOVE_REFUSED_EVENT_REASON)
            assert event["type"] == "Warning", event
            assert a in event["note"] and "still in use" in event["note"], event
            assert a in await battery_hosts(pod)

            # Retried, and never published again meanwhile (the Pool controller would place
            # Pools back on it): every Host set published since lacks it.
            await until_sample(registry, REFUSED_REMOVALS, 2, timeout=30)
            assert [p for p in await publications_since(kube, namespace, gone) if a in p] == []
            events = [
                e
                for e in await kube.list(EVENTS, "default")
                if e.get("reason") == REMOVE_REFUSED_EVENT_REASON
                and (e.get("regarding") or {}).get("name") == a
            ]
            # Once per reason: the same refusal is neither a second Event nor a series.
            assert [e.get("series") for e in events] == [None], events

            await client.delete_pool(PoolRef(namespace="drain", name="p"))
            async with asyncio.timeout(30):
                while a in await battery_hosts(pod):
                    await asyncio.sleep(0.2)  # battery's Hosts have no watch
            removed = 'host_calls_total{result="ok",rpc="RemoveHost"}'
            assert sample(await until_sample(registry, removed, 1, timeout=10), removed) == 1
            assert len(pod.starts) == 1


@pytest.mark.req("IN-103")
async def test_an_invalid_address_is_refused_with_an_event_and_never_reaches_battery(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    bad, good = unique("bad", namespace), unique("good", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig),
    ):
        await create_host_node(kube, bad, address="flintlock.example:9090")
        event = await until_event(kube, bad, INVALID_ADDRESS_EVENT_REASON)
        assert event["type"] == "Warning" and "flintlock.example:9090" in event["note"]
        await create_host_node(kube, good, address="127.0.0.50:9090")
        await until_configmap(kube, namespace, has(good))
        assert "flintlock.example" not in pod.config_file.read_text()
        await set_report(kube, bad, "127.0.0.60:9090")  # put right: it joins
        await until_configmap(kube, namespace, has(good, bad))


@pytest.mark.req("IN-108", "IN-109")
async def test_an_address_not_the_nodes_own_or_taken_is_refused_with_an_event(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    victim, impostor = unique("victim", namespace), unique("impostor", namespace)
    twin, marker = unique("twin", namespace), unique("marker", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig),
    ):
        await create_host_node(kube, victim, address="127.0.0.63:9090")
        await until_configmap(kube, namespace, has(victim))
        # IN-108: a report naming another Host's flintlockd, from a Node at 127.0.0.64.
        await create_host_node(kube, impostor, address="127.0.0.63:9090", internal_ip="127.0.0.64")
        event = await until_event(kube, impostor, str(Refusal.ADDRESS_NOT_ON_NODE))
        assert event["type"] == "Warning", event
        assert "'127.0.0.63:9090', which is not one of the Node's InternalIP addresses" in (
            event["note"]
        )
        assert "(127.0.0.64)" in event["note"]
        # IN-109: a Node whose own InternalIP is the victim's (its status says so) is refused;
        # battery keeps the Host it has there.
        await create_host_node(kube, twin, address="127.0.0.63:9191")
        event = await until_event(kube, twin, str(Refusal.ADDRESS_IN_USE))
        assert f"the report of Node {victim} also names (battery has it there)" in event["note"]
        await create_host_node(kube, marker, address="127.0.0.65:9090")
        await until_configmap(kube, namespace, has(victim, marker))  # a pass after both
        config = pod.config_file.read_text()
        assert impostor not in config and twin not in config and "9191" not in config
        assert config.count("127.0.0.63") == 1


@pytest.mark.req("IN-014")
async def test_a_reverted_config_is_written_back_without_a_restart(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a = unique("revert", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig),
    ):
        await create_host_node(kube, a, address="127.0.0.61:9090")
        cm = await until_configmap(kube, namespace, has(a))
        written = cm["data"]["config.json"]
        starts = len(pod.starts)
        await kube.patch(  # as re-applying install.yaml does
            CONFIGMAPS,
            names.BATTERY_CONFIG_MAP,
            {"data": {"config.json": pod.initial_config()}},
            namespace,
        )
        await until_configmap(kube, namespace, lambda c: c["data"]["config.json"] == written)
        assert len(pod.starts) == starts


@pytest.mark.req("DP-007", "DP-008")
async def test_a_renewed_client_certificate_restarts_battery_once_in_the_window(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a = unique("renew", namespace)
    async with (
        BatteryPod.start(kube, namespace) as pod,
        RegistryProcess.start(pod, kubeconfig=registry_kubeconfig, restart_window="3s"),
    ):
        await until_configmap(kube, namespace, has())
        starts = len(pod.starts)
        pod.renew_client_certificate()
        await create_host_node(kube, a, address="127.0.0.62:9090")
        digest = hashlib.sha256((pod.tls_dir / "tls.crt").read_bytes()).hexdigest()
        cm = await until_configmap(kube, namespace, has(a))
        annotations = cm["metadata"]["annotations"]
        assert annotations[names.CLIENT_CERTIFICATE_SHA256_ANNOTATION] == digest
        assert len(pod.starts) == starts + 1, "the renewal and the new Host: one restart"


@contextlib.asynccontextmanager
async def flintlockd_hosts(
    pod: BatteryPod, kube: KubeClient, names_ips: dict[str, str]
) -> AsyncIterator[dict[str, str]]:
    """A fake flintlockd per Host over mutual TLS, and its Node reporting it ready: the
    flintlockd targets by Host name."""
    async with contextlib.AsyncExitStack() as stack:
        targets: dict[str, str] = {}
        for name, ip in names_ips.items():
            host = await stack.enter_async_context(
                FakeFlintlockd.start(address=ip, tls=TLSFiles(*pod.host_tls(name, ip)))
            )
            targets[name] = host.target
        for name, target in targets.items():
            await create_host_node(kube, name, address=target)
        yield targets


@dataclass(frozen=True)
class Drift:
    """A battery that comes back other than the registry left it, and the repair expected."""

    stems: tuple[str, str]
    ips: tuple[str, str]
    b_leaves: bool
    """b's Node stops being a Host (and battery drops it) before battery restarts."""
    restarts_with_all: bool
    """battery comes back from a stale file naming both Hosts; else with no Host at all."""
    action: str
    repairs: int
    logs: tuple[str, ...]
    """Log lines expected, formatted with `a` and `b`."""
    pool: bool
    """A Pool names both Hosts (as the Pool controller would place it): it keeps them."""
    back_within: float | None
    """The Hosts are back in battery within this many seconds of its start."""


DRIFTS = {
    # battery comes back from a lost database and an empty config file: no Host at all.
    "hosts-a-restarted-battery-lost-are-added-again-and-never-leave-the-host-set": Drift(
        stems=("lost-a", "lost-b"),
        ips=("127.0.0.64", "127.0.0.65"),
        b_leaves=False,
        restarts_with_all=False,
        action="add",
        repairs=2,
        logs=("battery lost Host {a}; adding it again", "battery lost Host {b}; adding it again"),
        pool=True,
        back_within=10.0,
    ),
    # battery comes back from a stale config file that still names b, which the registry removed.
    "a-host-the-registry-removed-is-removed-again-when-battery-brings-it-back": Drift(
        stems=("keep", "gone"),
        ips=("127.0.0.66", "127.0.0.67"),
        b_leaves=True,
        restarts_with_all=True,
        action="remove",
        repairs=1,
        logs=("battery holds Host {b}, which the registry removed",),
        pool=False,
        back_within=None,
    ),
}


@pytest.mark.req("IN-105", "IN-106", "IN-107")
@pytest.mark.parametrize("case", DRIFTS.values(), ids=DRIFTS.keys())
async def test_a_restarted_battery_is_repaired_by_reconnect_and_the_host_set_never_changes(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path, case: Drift
) -> None:
    a, b = (unique(stem, namespace) for stem in case.stems)
    repairs = f'drift_repairs_total{{action="{case.action}"}}'
    reconnect = 'host_list_checks_total{trigger="reconnect"}'
    async with (
        BatteryPod.start(kube, namespace, host_api=True) as pod,
        flintlockd_hosts(pod, kube, {a: case.ips[0], b: case.ips[1]}) as targets,
        # Checked at start and on reconnect only: the period is far beyond the test.
        RegistryProcess.start(
            pod, kubeconfig=registry_kubeconfig, host_resync_interval="1h"
        ) as registry,
        battery_client(pod) as client,
    ):
        before = await until_configmap(kube, namespace, has(a, b))
        # IN-107: battery's config records what AddHost put into battery.
        assert configfile.hosts_of(before["data"]["config.json"]) == targets
        if case.pool:
            await client.create_pool(pool_spec((a, b)))  # as the Pool controller would
        stays = {a, b}
        if case.b_leaves:
            await set_labelled(kube, b, False)
            await until_battery_has(client, {a}, timeout=20)
            # IN-107: the record follows RemoveHost.
            before = await until_configmap(
                kube,
                namespace,
                lambda cm: configfile.hosts_of(cm["data"]["config.json"]) == {a: targets[a]},
            )
            assert published(before) == {a: targets[a]}
            stays = {a}
        reconnects = sample(registry.metrics(), reconnect)

        started = await pod.restart(hosts=targets if case.restarts_with_all else {})
        if case.back_within is not None:
            await until_battery_has(client, stays, timeout=20)
            took = time.monotonic() - started.at
            assert took < case.back_within, f"the Hosts were back {took:.1f}s after it started"
        timeout = 5 if case.back_within is not None else 20
        metrics = await until_sample(registry, repairs, case.repairs, timeout=timeout)
        await until_battery_has(client, stays, timeout=5)
        assert sample(metrics, repairs) == case.repairs, metrics
        assert sample(metrics, reconnect) > reconnects
        logs = registry.logs()
        for line in case.logs:
            assert line.format(a=a, b=b) in logs, logs[-3000:]
        # IN-106: every Host set published meanwhile is exactly the Hosts that stay: a Host
        # battery lost never left it (so the Pool controller never took one out of battery's
        # Pool), and a Host the registry removed never came back.
        published_since = await publications_since(kube, namespace, before)
        assert [p for p in published_since if set(p) != stays] == []
        if case.pool:
            assert [p.spec.flintlock_hosts for p in await client.list_pools("drain")] == [(a, b)]
        assert len(pod.starts) == 2


@pytest.mark.req("IN-105")
async def test_a_host_removed_behind_the_registrys_back_is_added_again_at_the_next_resync(
    kube: KubeClient, namespace: str, registry_kubeconfig: Path
) -> None:
    a = unique("resync", namespace)
    async with (
        BatteryPod.start(kube, namespace, host_api=True) as pod,
        flintlockd_hosts(pod, kube, {a: "127.0.0.68"}),
        RegistryProcess.start(
            pod, kubeconfig=registry_kubeconfig, host_resync_interval="1s"
        ) as registry,
        battery_client(pod) as client,
    ):
        await until_configmap(kube, namespace, has(a))
        reconnects = sample(registry.metrics(), 'host_list_checks_total{trigger="reconnect"}')
        await client.remove_host(a)  # as `poolmgrctl host remove` would; battery stays up
        metrics = await until_sample(registry, 'drift_repairs_total{action="add"}', 1, timeout=10)
        assert sample(metrics, 'drift_repairs_total{action="add"}') == 1, metrics
        await until_battery_has(client, {a}, timeout=5)
        assert sample(metrics, 'host_list_checks_total{trigger="periodic"}') >= 1, metrics
        # No reconnect explains it: battery never went away.
        assert sample(metrics, 'host_list_checks_total{trigger="reconnect"}') == reconnects
        assert len(pod.starts) == 1
