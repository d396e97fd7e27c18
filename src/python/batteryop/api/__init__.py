"""The API every deployable and the client share: names, bodies and CRDs, with no IO.

- `names`: the group, version, kinds, finalizers, labels, annotations, signer names, token
  audience and object names; the only place these strings are written.
- `conditions`: condition types, reasons, phases and event reasons as StrEnums, the `Condition`
  dataclass and the pure `set_condition` / `find_condition`.
- `pool`, `claim`: Pool and MicroVMClaim as frozen dataclasses, from and to their bodies
  (`meta` holds the metadata part, `times` the timestamp and duration formats).
- `crds`: the two CRDs (`crds/*.yaml`), the single source for the Manifests and the tests.
- `samples`: the sample Pool, the demo Pool and a claim.
- `clock`: `Clock`, the one clock every deployable, the client and the fakes read time
  from (wall, monotonic, a wait until a time), `SYSTEM_CLOCK` and the tests' `FakeClock`.
- `backoff`: `Backoff`, the one retry backoff (minimum, maximum, factor, jitter, reset).
- `closing`: `AsyncClosing`, the `async with` of the clients that close by `aclose()`.

A Pool's translation into battery's PoolSpec lives with the operator
(`batteryop.operator.pools.battery_spec`): this package imports nothing of ours, so the client
wheel can ship it without gRPC.

Modules are imported by name (`from batteryop.api import names`); this package re-exports
nothing.
"""
