"""The Operator's Kubernetes manifests: install.yaml, rendered from code.

- `render`: every object of install.yaml in apply order (`render()`), as YAML (`to_yaml()`),
  and the entry point that writes the file (`main()`, also `python -m batteryop.manifests`).
- `rbac`: the Operator's least-privilege ClusterRole and Role, and the claim editor and
  viewer roles users get by aggregation into `edit` and `view` (DP-020, DP-021).
- `chart`: the Helm chart, generated from `render()`'s objects with values where users change
  them; its `values.yaml` and `values.schema.json` come from the same slots (DP-112..DP-114).
- `install.snapshot.yaml`: install.yaml rendered with `render.SNAPSHOT_OPERATOR_IMAGE`; a test
  keeps it equal to `render()`, so every change to the Manifests shows in review.

Names come from `batteryop.api.names`, the CRDs from `batteryop.api.crds`. The few names only
the Manifests use (the ServiceAccount, role and container names, the common labels) are
defined, once, in `render` and `rbac`.
"""
