"""The Pool controller: a Pool declared in Kubernetes, held in battery (PO-*).

`reconcile.reconcile_pool(body, PoolDeps)` reconciles one Pool and returns an `Outcome` for
the runtime to apply; it never writes to the API server. Its steps, in order:

- `delete`: a deleted Pool is DeletePool'd; refused while leased, the drained spec and
  `DeletionBlocked` (PO-042, PO-043, PO-044).
- `finalizer`: the finalizer is stored before battery hears of the Pool (PO-001).
- `declare`: GetPool, then CreatePool / UpdatePool on the Hosts the selector picks (PO-002,
  PO-004, PO-010, PO-011, PO-012), with `battery_spec` mapping the spec (RS-010).
- `status`: battery's counts, Exhausted and Ready (PO-020, PO-021, PO-022, PO-043).

Beside it, pure helpers for the runtime: `hosts.HostSet` (the published Hosts and their Node
labels), `hook_events.hook_failed_event` (PO-041); the Pool keys both controllers use are in
`batteryop.operator.keys`. PO-023 and PO-024 (refresh on battery's events,
resync while unsubscribed) are the runtime's: a steady reconcile is one GetPool and no write.
"""
