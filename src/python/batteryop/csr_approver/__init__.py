"""The CSR approver: a deployable of its own that reviews, approves and signs the Exec Agents'
certificate requests, and publishes the CA certificates.

It follows CertificateSigningRequests (certificates.k8s.io/v1) through kopf, which lists and
watches them and writes nothing to them (`kopf_driver`), and acts on
the three signers of `batteryop.api.names.SIGNERS` only, and signs only the two serving ones:
a `flintlockd-client` request is denied (CT-102; each Exec Agent signs its client certificate
with its own Host's CA, EA-126). Each request goes through the
chain of checks in `checks` (CT-010..CT-016); one that is not yet Approved is approved or denied
with a reason naming the failing check (CT-013); one that is Approved, by anyone, is signed only
if it passes every check again, else it is marked Failed (CT-003, CT-006, CT-008). `signing`
issues the certificate from the CA read from its Secret, flintlockd's serving CA or the Exec
Agents' own serving CA (CT-101, CT-103, CT-004, CT-007), `pins` keeps
the address pins (CT-015, CT-016), `publish` writes the CA bundle ConfigMap (CT-005), `config`
refuses to start without a trust domain (CT-020).

Modules: `request` (a CSR object read once), `checks` (pure checks), `signing` (CAs and
certificates), `pins`, `publish`, `inputs` (the newest copy of each request), `review` (one
review of a request as a chain of steps: read the Node, read the pins, check, decide, sign),
`controller` (the inputs, when a review runs, retries), `kopf_driver` (how kopf runs its watch
of the requests), `config`, `main`.

Its Deployment, ServiceAccount and least-privilege RBAC are in the Manifests
(`batteryop.manifests.csr_approver`); the cert-manager resources that issue the CAs it signs
with (and the client CA it publishes), and battery's client certificate, are in `batteryop.manifests.cert_manager` (CT-021,
CT-023).
"""
