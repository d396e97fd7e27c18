"""The CSR approver: a deployable of its own that will review, approve and sign the Exec Agents'
certificate requests, and publish the two CA certificates.

So far: `request` (a CSR object read once) and `checks`, the chain of pure approval checks
(CT-001, CT-010..CT-015). The controller, signing, pins, the CA bundle, the config and the entry
point (with its `pex_binary`) follow.

Planned, not here: the Deployment, ServiceAccount and least-privilege RBAC in the Manifests
(`batteryop.manifests`), including the cert-manager CA resources (CT-021..CT-023).
"""
