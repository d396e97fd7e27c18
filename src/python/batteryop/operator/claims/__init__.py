"""The claim controller: one MicroVMClaim, one Lease on one MicroVM in battery (CL-*).

`reconcile.reconcile_claim(body, ClaimDeps)` reconciles one claim and returns an `Outcome`
for the runtime to apply; it never writes to the API server. Its steps, each in its own
module, run in the order `reconcile.CHAIN` and `reconcile.LAST` define (`docs/operator.md`
lists them, with each module's summary, from those tuples).

Beside them: `scope.ClaimScope` (the working state the steps share), `status` (the status
merge-patch and the backoff read from a condition), `slots.ClaimSlots` (the ClaimVM bound),
`deleted_vms.DeletedVMs` (the runtime feeds it battery's Events), `lease_reads` and
`lease_checks` (ListLeases shared by the claims of one Pool, CL-016, CL-030).

Requirements on the runtime, not here: reconcile every Bound claim at start and on battery
reconnect (CL-030); queue the claims recording a MicroVM uid when `DeletedVMs.observe` returns
it, and the claims on a Node when its report changes. No step releases or adopts a Lease that
no claim records (CL-008, CL-031).
"""
