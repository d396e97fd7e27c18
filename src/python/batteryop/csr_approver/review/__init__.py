"""One review of one certificate signing request, as a chain of steps over a `ReviewScope`
(`batteryop.kube.chain`, the operator's shape): `steps.CHAIN` is the order, each step's module
says what it owns.

1. `node` — the requester's Node, fresh from the API server, for a serving signer (CT-010,
   CT-014).
2. `pins` — the address pins, for a serving signer; a Node without a pin first releases the
   pins of gone Nodes whose certificates have all expired (CT-100).
3. `verdict` — `checks.review` over the request and those facts.
4. `decide` — not yet Approved: a failure is written as `Denied` (CT-013), a pass as
   `Approved`; Approved by anyone and failing: `Failed`, never signed (CT-006, CT-008).
5. `sign` — signed with its CA (CT-101, CT-103), the address pinned or its pin's expiry moved
   first (CT-015, CT-016), then the certificate written through `/status`.

Unlike the operator's steps these write to the API server themselves, in this order: the
order of the writes is what makes a restart resume where it stopped (`controller`). `writes`
holds the two writes (a condition, the certificate), `scope` the state, `deps` what every
review shares.
"""
