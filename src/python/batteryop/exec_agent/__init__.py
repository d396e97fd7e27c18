"""The Exec Agent: one per Host, the only way a claim's Holder runs commands in its MicroVM.

It serves flintlock's exec API on the Host's internal address over TLS and relays each
authorized stream to the Host's own flintlockd over mutual TLS. Modules:

- `config`: the settings, from flags and environment, checked once (EA-001, EA-002).
- `auth`: the checks every call passes, against the API server, uncached (EA-010..EA-014); its
  docstring says how a call names its claim (by its token's Secret binding).
- `relay`: one exec stream, caller to flintlockd and back (EA-020, EA-021).
- `servicer`, `server`: the gRPC services and the TLS server (EA-002, EA-003).
- `flintlockd`: the channel to this Host's flintlockd (EA-001).
- `host_checks`, `node_report`: the Host checks and the Node report annotations the operator
  turns into `HostReady` (EA-030..EA-035).
- `identity`: at start, the agent's own identity must name its Host (EA-050).
- `certs`: keys made on the Host, certificates by CSR, renewal (EA-060..EA-068).
  Its parts: `host_ca` (the Host's client CA and flintlockd's files), `csr` (one request to
  the cluster's signer), `ca_bundle` (the CA bundle ConfigMap, watched).
- `drain_guard`: while claims are Bound on the Host, a guard Pod and PodDisruptionBudget hold a
  drain of its Node open, for at most the drain timeout (EA-040, EA-041).
  `guard_pair`: that Pod and budget on the API server (their shape, create, delete).
- `errors`, `timing`, `metrics`: refusals, where the time goes, Prometheus.
- `main`: the entry point (`exec-agent` pex).

Its DaemonSet, identity, RBAC and the admission policy confining its Node writes and its drain
guard (EA-004, EA-051) are in `batteryop.manifests.exec_agent`.
"""
