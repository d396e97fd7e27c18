"""The claim controller: one MicroVMClaim, one Lease on one MicroVM in battery (CL-*).

`reconcile.reconcile_claim(body, ClaimDeps)` reconciles one claim and returns an `Outcome`
for the runtime to apply; it never writes to the API server. Its chain, in order, each step
in its own module:

1. `release` — a deleted claim: ReleaseVM; the finalizer goes once battery released the Lease
   or no longer holds it, never before (CL-020, CL-021, CL-022). Nothing else runs for it.
2. `finalizer` — the claim finalizer is stored before any ClaimVM (CL-001).
3. `bind` — a fresh read from the API server, then ClaimVM with the claim's uid as request
   id, at most N-1 at once; the Lease is recorded and the chain stops (CL-002, CL-008, CL-018,
   CL-060, CL-061, CL-063).
4. `pending` — Pending with PoolExhausted, PoolNotFound, PoolDeleting, BatteryUnavailable or
   ClaimAborted, retried after the time already pending, 1-30 s (CL-003, CL-004, CL-007,
   CL-062, CL-063).
5. `expiry` — a Bound claim whose MicroVM battery's Events reported deleted is Expired, even
   when the event came before the binding was written (CL-013).
6. `renew` — a pending renewal is relayed as a Heartbeat; battery's expiry and the relayed
   renewTime are written together (CL-010, CL-011, CL-015, CL-019).
7. `check_expiry` — requeue at the expiry; once it is due, ListLeases decides (CL-012, CL-014,
   CL-016, CL-017, CL-032).
8. `agent` — the Exec Agent address from the Node report (CL-005, CL-006).
9. `host_ready` — HostReady mirrors the Node report (CL-050, CL-051, CL-052, CL-053).
10. `synced` — always last: whether battery answered this reconcile's call (CL-040, CL-041,
    CL-042).

Beside them: `scope.ClaimScope` (the working state the steps share), `status` (the status
merge-patch and the backoff read from a condition), `slots.ClaimSlots` (the ClaimVM bound),
`expiry.DeletedVMs` (the runtime feeds it battery's Events).

Requirements on the runtime, not here: reconcile every Bound claim at start and on battery
reconnect (CL-030); queue the claims recording a MicroVM uid when `DeletedVMs.observe` returns
it, and the claims on a Node when its report changes. No step releases or adopts a Lease that
no claim records (CL-008, CL-031).
"""
