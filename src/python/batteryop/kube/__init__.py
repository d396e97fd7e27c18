"""Our small async Kubernetes API client and the controller machinery every deployable shares.

- `config`: `KubeConfig` (server, CA, token or token file, client certificate), loaded in-cluster
  or from a kubeconfig (the CSR approver hands it to kopf as a `kopf.ConnectionInfo`).
- `resources`: `Resource` (group, version, plural, scope) and its URL paths; the constants for
  every resource the deployables touch.
- `client`: `KubeClient`: get, list, watch, create, patch, replace, delete,
  SelfSubjectAccessReview; plain dicts in and out.
- `http`: `ConnectionPool`, the HTTP/1.1 under `KubeClient`, on the standard library.
- `errors`: the `KubeError` tree, read from the server's Status objects.
- `events`: `EventRecorder`, best-effort events.k8s.io/v1 Events folded into series.
- `informer`: `list_watch`, the list+watch loop the operator and the host registry run.
- `workqueue`: `WorkQueue`, the keyed queue of level-triggered reconciles.
- `chain`, `outcome`: a reconcile as ordered steps over one scope, and the `Outcome` it returns
  for the runtime to apply.
"""
