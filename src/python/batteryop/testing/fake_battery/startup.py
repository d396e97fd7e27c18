"""What the fake battery does at every start and `restart()`: read its state, then recover.

`open_state` is what poolmgrd reads at start (its database and its config's Hosts); `recover`
is its startup recovery (claims left mid-way go DELETING, placements are dropped). A new process
and an in-process restart both run them, so they come back alike (TD-006, BA-060).
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.hosts import HostConfig, HostConnection, HostTLSConfig
from batteryop.testing.fake_battery.store import Phase

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.battery import FakeBattery


def open_state(battery: FakeBattery) -> None:
    """What poolmgrd reads at start: its database (with `db`) and its config's Hosts.

    Without a database the store keeps what it holds (the in-process restart's memory),
    and only Hosts not yet known are added. With one, the store is read back from the file
    (SQLite, `db.py`; a file of the fake's old format is migrated on the way) and Hosts are built from the config,
    each with its stored row's cordon state (v0.4.0 seeds its `hosts` table from the config
    and keeps the cordon state); with `host_api`, Hosts stored but not in the config come
    back too (battery main: the database is the only source of Hosts).
    """
    now = battery.clock.now()
    if battery.db is None:
        for config in battery.host_configs:
            if config.name not in battery.store.hosts:
                battery.store.hosts[config.name] = HostConnection(config, now)
        return
    snapshot = battery.db.load()
    stored: dict[str, types_pb2.Host] = {}
    if snapshot is not None:
        battery.store.replace(
            pools=snapshot.pools,
            vms=snapshot.vms,
            leases=snapshot.leases,
            events=snapshot.events,
            next_event_id=snapshot.next_event_id,
        )
        stored = snapshot.hosts
    hosts: dict[str, HostConnection] = {}
    for config in battery.host_configs:
        hosts[config.name] = _with_row(HostConnection(config, now), stored.get(config.name))
    if battery.host_api:
        for name, row in stored.items():
            if name not in hosts:
                tls = HostTLSConfig(
                    insecure=row.tls.insecure,
                    ca_file=row.tls.ca_file,
                    cert_file=row.tls.cert_file,
                    key_file=row.tls.key_file,
                )
                config = HostConfig(name, row.address, tls)
                hosts[name] = _with_row(HostConnection(config, now), row)
    battery.store.hosts = hosts
    battery.store.commit()


def recover(battery: FakeBattery) -> None:
    """poolmgrd's startup recovery, at every start and restart: placements are dropped and
    claims left mid-way (pre-lease hook running, or LEASED without a Lease) go DELETING, for
    the sweep to delete (TD-006, BA-060)."""
    for host in battery.store.hosts.values():
        host.placements = 0
    for vm in battery.store.vms.values():
        mid_claim = vm.phase == Phase.PRE_LEASE_HOOK_RUNNING or (
            vm.phase == Phase.LEASED
            and (vm.lease_id is None or vm.lease_id not in battery.store.leases)
        )
        if mid_claim:
            battery.store.set_phase(vm.uid, Phase.DELETING)
    battery.deleter.warned.clear()


def _with_row(conn: HostConnection, row: types_pb2.Host | None) -> HostConnection:
    """conn with the cordon state and update time of its stored row, if there is one."""
    if row is not None:
        conn.cordoned = row.cordoned
        conn.cordoned_reason = row.cordoned_reason
        conn.cordoned_at = row.cordoned_at.ToDatetime(UTC) if row.HasField("cordoned_at") else None
        if row.HasField("updated_at"):
            conn.updated_at = row.updated_at.ToDatetime(UTC)
    return conn
