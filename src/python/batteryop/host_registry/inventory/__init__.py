"""The host registry's one reconcile, of its whole inventory, as a chain of steps.

The same shape as the operator's controllers (`batteryop.kube.chain`): `reconcile` runs
`CHAIN` then `LAST` over a `RegistryScope`; each step has its own module, and
`docs/host-registry.md` lists them from `reconcile.py`. What the registry knows between
reconciles (Nodes, ConfigMap, what battery has, pending changes) is one `RegistryState`;
what a reconcile uses besides it is `RegistryDeps`.

- `state`, `deps`, `scope`: what the steps share.
- `configmap`, `hosts`: the writes to the battery config ConfigMap and the Host calls to
  battery the steps share; `drain`, `restart`: the drain of leaving Hosts and battery's
  restart, which more than one step runs.
- The steps, in `reconcile.CHAIN` order: `listed`, `resume`, `admit`, `check_battery`,
  `cordons`, `apply_with_api`, `apply_with_restart`, `write_back`, `publish`, `schedule`.
"""
