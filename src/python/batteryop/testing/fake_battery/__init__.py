"""A fake battery (poolmgrd v0.4.0) for tests and the dev stack (TD-001..TD-006, BA-*).

`FakeBattery` serves battery's gRPC API (`poolmgr.v1alpha1` PoolAdmin, Lease, Events,
HostAdmin, and grpc.health.v1 with "" SERVING) from memory or, with `db=PATH`, from a database
file that outlives the process (BA-060), on loopback, and creates, places,
execs in and deletes MicroVMs only through flintlockd's gRPC API on the Hosts it is given
(a name -> flintlockd target each; TD-002). In process:

    async with FakeBattery.start(hosts={"host-a": host.target}, clock=FakeClock()) as battery:
        channel = grpc.aio.insecure_channel(battery.target)
        ...
        await battery.advance(10)          # sweeps and ticks that come due run
        battery.refuse_heartbeats()        # faults: see FakeBattery's "faults" methods

Standalone (`python -m batteryop.testing.fake_battery --help`, or the `fake-battery` pex): it
reads poolmgrd's v0.4.0 config file (`-config`) or `--host` flags, keeps its state in the
`-db` file when given one, and offers a small HTTP control API for faults, the fake clock and
inspection.

Deliberate differences from poolmgrd v0.4.0 (TD-005; also docs/dev/fake-battery.md):
- With `-db PATH` (`db=`) the state (Pools, VMs, Leases, the event outbox, Host rows with
  their cordon state) is kept in SQLite as poolmgrd keeps it, in its tables and columns, but
  for `pools`, which keeps each spec whole as protobuf JSON (`db.py`); the schema version is in
  `user_version` and the file is marked as the fake's by `application_id`. Changes are written
  in one transaction before any answer that follows them leaves, with writes coalesced
  (`Store.commit`); they survive a killed process (BA-060). A file of the fake's old format of
  its own is migrated in place on first open (`db_legacy.py`); a foreign database, a newer
  schema or a corrupt file is refused at start. poolmgrd's own migrations from v0.3.3 are not
  reproduced (no BA-109). Without `-db` the state lives in memory and survives only
  `restart()` (poolmgrd would default to `./poolmgr.db`). Hosts in the file but not in the
  config are dropped at start unless `host_api` is on.
- Provisioning polls GetMicroVM and waits for the guest agent every 50 ms of real time
  (poolmgrd: 2 s and 1 s); the 60 s / 30 s / 5 s caps are the same, in real time. Only
  timestamps, the sweep, the warning window and the reconcilers' tick use the injectable clock.
- `sweep_interval`, `warning_window` and the reconcile tick are settable (`Timings`); poolmgrd
  fixes the tick at 10 s.
- Open Subscribe streams get events as soon as they are recorded (poolmgrd polls its outbox
  every 1 s in batches of 100); replay order and ids are the same.
- A reconciler counts its own provisions that have not yet written a VM row as provisioning,
  and spreads them over Hosts with them counted, so one pass never starts more than the
  shortfall. ClaimVM takes the oldest AVAILABLE VM (poolmgrd: any).
- Channels to Hosts reconnect after 100 ms to 1 s (gRPC's default: 1 s growing to 120 s).
- Hosts come from the constructor / config file in both modes. `host_api=True` adds battery
  main's AddHost/UpdateHost/RemoveHost/GetHost, `Host.tls` in answers and the check of
  `flintlock_hosts` against registered Hosts; main would start with no Hosts and refuse a
  config with `hosts`. With `host_api=False` (default, v0.4.0) those RPCs are UNIMPLEMENTED.
- Every start and `restart()` applies main's startup recovery (claims left mid-way ->
  DELETING) and clears placements; whether v0.4.0 already did so is not known. With a
  database, `restart()` reads the state back from the file, as a new process does.
- The flintlockd version check calls `MicroVM.ServerInfo` as our fake flintlockd defines it
  (the real RPC's shape could not be read: the Go module proxy answered 403).
- No metrics endpoint, no server reflection, no TLS on the API server (loopback plaintext; a
  config asking for TLS is refused); basic auth is supported. The standalone process logs text.
- The sweeper and each Pool's reconciler run under `obs.supervisor.Supervisor`: one that raises
  is logged with its traceback and started again after 1 s doubling to 30 s of real time (a
  reconciler with a pass at its start); what poolmgrd does then is not known.
- Fault injection and the control API are ours (TD-006): `set_unavailable`,
  `stop_listening`/`resume_listening`, `delay_claims`, `refuse_heartbeats`, `fail_hooks`,
  `drop_event_streams`, `lose_claim_answers`, `restart`.
- Status codes are battery's; messages are battery's where battery-api.md quotes them, and our
  own wording otherwise.

Kept on purpose, although they are battery bugs or limits: a hook failure under
DELETE_AND_REPLACE drops the VM row even when flintlockd did not confirm the delete (#131,
#132); DELETING VMs of a deleted Pool are not retried by the sweeper; quarantined VMs are only
removed by DeletePool; a provision cut off by a restart stays PROVISIONING; the outbox is never
pruned and is replayed whole; VM_RELEASED and POOL_* events are never emitted; payload_json is
always empty; heartbeat_interval is not read; a 0s expiry threshold is accepted.
"""

from batteryop.api.clock import Clock, FakeClock, SystemClock
from batteryop.testing.fake_battery.battery import (
    BatteryStateError,
    FakeBattery,
    Timings,
    WaitTimeoutError,
)
from batteryop.testing.fake_battery.faults import Faults
from batteryop.testing.fake_battery.hosts import HostConfig, HostTLSConfig

__all__ = [
    "BatteryStateError",
    "Clock",
    "FakeBattery",
    "FakeClock",
    "Faults",
    "HostConfig",
    "HostTLSConfig",
    "SystemClock",
    "Timings",
    "WaitTimeoutError",
]
