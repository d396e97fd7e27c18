"""The pins ConfigMap's writes against the real API server: each conditional on what was read,
releases idempotent, a pin of unknown expiry given the longest lifetime before it is released."""

from __future__ import annotations

import datetime

import pytest

from batteryop.api import names
from batteryop.csr_approver.pins import Pin, Pins, pin_certificate, read_pins, release_gone
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import ConflictError
from batteryop.kube.resources import CONFIGMAPS
from batteryop.testing.csr_approver_env import Cluster

pytestmark = pytest.mark.controlplane

CM = names.ADDRESS_PINS_CONFIG_MAP
MAX = datetime.timedelta(hours=168)
T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)


async def read(kube: KubeClient, cluster: Cluster) -> Pins:
    return await read_pins(kube, cluster.namespace, CM)


def test_a_pin_reads_back_as_written_and_a_bare_address_has_no_expiry() -> None:
    pin = Pin("10.0.0.1", T0)
    assert Pin.decode(pin.encode()) == pin
    assert Pin.decode("10.0.0.1") == Pin("10.0.0.1", None)
    assert not Pin("10.0.0.1", None).expired(T0 + MAX * 100)
    assert not pin.expired(T0) and pin.expired(T0 + datetime.timedelta(seconds=1))


@pytest.mark.req("CT-016", "CT-100")
async def test_a_release_from_a_stale_read_conflicts_and_a_second_release_writes_nothing(
    cluster: Cluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    gone_a, gone_b = cluster.name("gone-a"), cluster.name("gone-b")  # no such Nodes
    stale = await pin_certificate(kube, ns, CM, Pins(), gone_a, "10.42.0.1", T0)
    pins = await pin_certificate(kube, ns, CM, stale, gone_b, "10.42.0.2", T0)
    # A pin already covering the expiry is not written again.
    assert await pin_certificate(kube, ns, CM, pins, gone_b, "10.42.0.2", T0) is pins
    with pytest.raises(ValueError):
        await pin_certificate(kube, ns, CM, pins, gone_b, "10.42.0.9", T0 + MINUTE)

    with pytest.raises(ConflictError):
        await release_gone(kube, ns, CM, stale, now=T0 + MINUTE, unknown_expiry=MAX)
    assert set((await read(kube, cluster)).entries) == {gone_a, gone_b}

    fresh = await read(kube, cluster)
    after, released = await release_gone(kube, ns, CM, fresh, now=T0 + MINUTE, unknown_expiry=MAX)
    assert released == {gone_a: Pin("10.42.0.1", T0), gone_b: Pin("10.42.0.2", T0)}
    assert after.entries == {} and after.resource_version != fresh.resource_version
    again, none = await release_gone(kube, ns, CM, after, now=T0 + MINUTE, unknown_expiry=MAX)
    assert none == {} and again == after
    assert (await read(kube, cluster)) == after


@pytest.mark.req("CT-100")
async def test_a_bare_address_pin_of_a_gone_node_is_released_after_the_longest_lifetime(
    cluster: Cluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    gone = cluster.name("legacy-gone")
    live = await cluster.node("legacy-live", "10.42.1.2")
    await kube.create(
        CONFIGMAPS,
        {"metadata": {"name": CM}, "data": {gone: "10.42.1.1", live: "10.42.1.2"}},
        ns,
    )
    pins = await read(kube, cluster)
    assert pins.entries[gone] == Pin("10.42.1.1", None)

    stamped, released = await release_gone(kube, ns, CM, pins, now=T0, unknown_expiry=MAX)
    assert released == {}
    assert stamped.entries == {gone: Pin("10.42.1.1", T0 + MAX), live: Pin("10.42.1.2", None)}

    later = T0 + MAX + datetime.timedelta(seconds=1)
    after, released = await release_gone(kube, ns, CM, stamped, now=later, unknown_expiry=MAX)
    assert released == {gone: Pin("10.42.1.1", T0 + MAX)}
    assert after.addresses == {live: "10.42.1.2"}  # its Node exists: kept, expiry unknown
