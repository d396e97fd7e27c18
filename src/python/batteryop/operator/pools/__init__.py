"""The Pool controller: a Pool declared in Kubernetes, held in battery (PO-*).

`reconcile.reconcile_pool(body, PoolDeps)` reconciles one Pool and returns an `Outcome` for
the runtime to apply; it never writes to the API server. It has the claim controller's shape:
a `scope.PoolScope` the steps share, each step in its own module, run in the order
`reconcile.CHAIN` and `reconcile.LAST` define (`docs/operator.md` lists them, with each
module's summary, from those tuples); `battery_spec` maps the spec for `declare` (RS-010).

Beside it, pure helpers for the runtime: `hosts.HostSet` (the published Hosts and their Node
labels), `hook_events.hook_failed_event` (PO-041); the Pool keys both controllers use are in
`batteryop.operator.keys`. PO-023 and PO-024 (refresh on battery's events,
resync while unsubscribed) are the runtime's: a steady reconcile is one GetPool and no write.
"""
